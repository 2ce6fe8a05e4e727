# ldist - build, run, test, bench.  `make run` and `make test` set up a fresh
# machine first (scripts/setup.sh installs the Debian packages it lacks).

CC      ?= gcc
ARCH    ?= native
OPT     ?= -O3 -march=$(ARCH) -fno-math-errno
CFLAGS  ?= $(OPT) -g -std=gnu11 -Wall -Wextra -Wno-unused-parameter -fPIC -pthread
LUA_INC := $(shell pkg-config --cflags lua5.4 2>/dev/null || echo -I/usr/include/lua5.4)
BLAS_INC:= -I/usr/include/x86_64-linux-gnu/openblas-pthread
BLAS_LIB:= -L/usr/lib/x86_64-linux-gnu/openblas-pthread -lopenblas
CPPFLAGS+= -Iengine -Iengine/net -Ilua_bindings -Ikernel -I$(B) $(LUA_INC) $(BLAS_INC)
# OpenBLAS is opened at run time, on the first product (engine/ld_cpu.c)
ENGINE_LIBS := -lz -lpng -ljpeg -lm -lpthread -ldl
LUA_LIB := -llua5.4
APP_LIBS := -lreadline -ljansson
# the network half (Jupyter kernel, cluster control plane, ring all-reduce)
NET_LIBS := -lzmq -ljansson -lssl -lcrypto -luuid
PREFIX  ?= /usr/local

# Sanitizer builds: `make test SANITIZE=address` (ASan + UBSan, any UBSan
# finding fatal) or SANITIZE=thread (TSan) builds ldist, ldist.so, the network
# plugin and the engine tests into build-asan/ or build-tsan/ (objects beside
# them), leaving build/ and ./ldist alone, and runs the engine and Lua tiers
# against them. The plugin sits next to the sanitized ldist, where netload.c
# and ld_device.c look first. The CUDA plugin is not instrumented: it is
# build/ldist_cuda.so copied beside the sanitized ldist.
SANITIZE ?=
ifeq ($(SANITIZE),)
B          := build
LDIST_EXE  := ldist
LDIST_SO   := ldist.so
NET_SO     := build/ldist_net.so
else
ifeq ($(SANITIZE),address)
B          := build-asan
SAN_FLAGS  := -fsanitize=address,undefined -fno-sanitize-recover=undefined
else ifeq ($(SANITIZE),thread)
B          := build-tsan
SAN_FLAGS  := -fsanitize=thread
else
$(error SANITIZE is address or thread, not '$(SANITIZE)')
endif
LDIST_EXE  := $(B)/ldist
LDIST_SO   := $(B)/ldist.so
NET_SO     := $(B)/ldist_net.so
CFLAGS     += $(SAN_FLAGS) -fno-omit-frame-pointer
endif

# What needs ZeroMQ/OpenSSL/jansson (engine/net/, the kernel, the cluster
# bindings) goes into build/ldist_net.so, which the
# ldist program opens only for the kernel and clusters (lua_bindings/netload.c):
# loading those libraries would cost every start-up ~10 ms. ldist.so links all.
NET_ENGINE_SRC := $(wildcard engine/net/*.c)
NET_BIND_SRC := lua_bindings/cluster.c
ENGINE_SRC := $(filter-out $(NET_ENGINE_SRC),$(wildcard engine/*.c))
BIND_SRC   := $(filter-out $(NET_BIND_SRC),$(wildcard lua_bindings/*.c))
# the prelude: the files lua_bindings/lua/prelude.lua lists, in its order
PRELUDE_MANIFEST := lua_bindings/lua/prelude.lua
PRELUDE    := $(filter-out $(PRELUDE_MANIFEST),$(wildcard lua_bindings/lua/*.lua lua_bindings/lua/*/*.lua))
REPL_SRC   := $(wildcard repl/*.c)
KERNEL_SRC := $(wildcard kernel/*.c)
ENGINE_OBJ := $(ENGINE_SRC:%.c=$(B)/%.o)
BIND_OBJ   := $(BIND_SRC:%.c=$(B)/%.o) $(B)/prelude.o
APP_OBJ    := $(REPL_SRC:%.c=$(B)/%.o)
NET_OBJ    := $(KERNEL_SRC:%.c=$(B)/%.o) $(NET_ENGINE_SRC:%.c=$(B)/%.o) $(NET_BIND_SRC:%.c=$(B)/%.o)
ENGINE_TESTS := $(patsubst tests/engine/%.c,$(B)/tests/engine/%,$(filter-out tests/engine/test_util.c,$(wildcard tests/engine/*.c)))

NVCC    ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
# The CUDA plugin, built where nvcc is installed; the engine dlopens it at run
# time. SASS for A100 and H100/H200, PTX that newer GPUs compile on load.
NVCC_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
             -gencode arch=compute_75,code=compute_75
NVCCFLAGS ?= -O3 -std=c++17 $(NVCC_ARCH) -Xcompiler -fPIC,-fvisibility=hidden,-Wall -Iengine -Iengine/cuda
CUDA_OBJ   := $(patsubst %.cu,build/%.o,$(wildcard engine/cuda/*.cu))
CUDA_PLUGIN := $(if $(NVCC),build/ldist_cuda.so)
ifneq ($(SANITIZE),)
# (a sanitized build never runs nvcc: it copies the plugin the plain build made)
CUDA_PLUGIN := $(if $(wildcard build/ldist_cuda.so),$(B)/ldist_cuda.so)
endif

.PHONY: all run test bench install setup clean test-engine test-gpu bench-gpu bench-cores fuzz
all: $(LDIST_EXE) $(LDIST_SO) $(NET_SO) $(ENGINE_TESTS) $(CUDA_PLUGIN)

# -MMD -MP: each object's .d file lists the headers it includes, so a header
# change rebuilds only what includes it (read back by -include at the end)
$(B)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(B)/prelude.c: $(PRELUDE_MANIFEST) $(PRELUDE) scripts/embed.lua
	@mkdir -p $(B)
	lua5.4 scripts/embed.lua $@ $(PRELUDE_MANIFEST) $(PRELUDE)

$(B)/engine/ld_device.o: CPPFLAGS += -DLD_PREFIX='"$(PREFIX)"'

ifeq ($(SANITIZE),)
build/engine/cuda/%.o: engine/cuda/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

# static cudart: the plugin needs only libcuda.so.1 (the driver), and opens
# cuBLAS and NCCL itself; -z defs proves it needs nothing from the engine
build/ldist_cuda.so: $(CUDA_OBJ)
	$(NVCC) -shared $(NVCC_ARCH) -cudart static -o $@ $^ -Xlinker -z,defs -ldl -lpthread -lrt
else
$(B)/ldist_cuda.so: build/ldist_cuda.so
	@mkdir -p $(B) && cp $< $@
endif

$(B)/libldist_engine.a: $(ENGINE_OBJ)
	rm -f $@ && ar rcs $@ $^

# the whole engine is linked in and exported, for the plugins to call
$(LDIST_EXE): $(APP_OBJ) $(BIND_OBJ) $(B)/libldist_engine.a
	$(CC) $(CFLAGS) -rdynamic -o $@ $(APP_OBJ) $(BIND_OBJ) -Wl,--whole-archive $(B)/libldist_engine.a \
	  -Wl,--no-whole-archive $(LUA_LIB) $(APP_LIBS) $(ENGINE_LIBS)

$(NET_SO): $(NET_OBJ)
	$(CC) $(CFLAGS) -shared -o $@ $(NET_OBJ) $(NET_LIBS) $(ENGINE_LIBS)

$(B)/lua_bindings/netload.o: CPPFLAGS += -DLD_PREFIX='"$(PREFIX)"'

# A Lua C module: `package.cpath = "./?.so;" .. package.cpath; require "ldist"`
$(LDIST_SO): $(BIND_OBJ) $(NET_BIND_SRC:%.c=$(B)/%.o) $(NET_ENGINE_SRC:%.c=$(B)/%.o) $(B)/libldist_engine.a
	$(CC) $(CFLAGS) -shared -o $@ $(BIND_OBJ) $(NET_BIND_SRC:%.c=$(B)/%.o) $(NET_ENGINE_SRC:%.c=$(B)/%.o) \
	  $(B)/libldist_engine.a $(ENGINE_LIBS) $(NET_LIBS)

$(B)/tests/engine/%: tests/engine/%.c tests/engine/test_util.c $(B)/libldist_engine.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -MF $@.d -o $@ $< tests/engine/test_util.c $(B)/libldist_engine.a $(ENGINE_LIBS)

setup:
	@bash scripts/setup.sh

# On a terminal, stay at the ldist prompt with the trained model in scope.
run: setup all
	@if [ -t 0 ]; then ./ldist -i scripts/main.lua; else ./ldist scripts/main.lua; fi

# SANITIZE=address|thread: the engine and Lua tiers against build-asan/ or
# build-tsan/ (tests/run.sh reads LDIST_BUILD and LDIST_SANITIZE)
test: setup all
	@$(if $(SANITIZE),LDIST_BUILD=$(B) LDIST_SANITIZE=$(SANITIZE) )bash tests/run.sh $(if $(SANITIZE),engine lua)

test-engine: all
	@bash tests/run.sh engine

bench: setup all
	@bash scripts/bench/run.sh

# ldist on every core of this machine (issue 29): one device against PyTorch,
# the pool's scaling, Mirrored over 1-16 CPU devices, MultiWorker over 1-8
# processes, the ring against gloo. Runs from the GPU bundle too (README, "GPU").
bench-cores: $(if $(NO_BUILD),,all)
	@bash scripts/bench/cores.sh

# On a GPU machine (README, "GPU"): the tests of tests/gpu, and the benchmark
# against PyTorch on the same GPU. Without a GPU they say so in one line.
# NO_BUILD=1 runs the prebuilt binaries of build/gpu-bundle (scripts/gpu/bundle.sh).
test-gpu: $(if $(NO_BUILD),,all)
	@bash tests/gpu/run.sh

bench-gpu: $(if $(NO_BUILD),,all)
	@bash scripts/gpu/bench.sh

# Fuzz the kernel's wire decoder (libFuzzer); FUZZ_SECONDS=60 by default.
FUZZ_SECONDS ?= 60
fuzz:
	@bash tests/kernel/fuzz.sh $(FUZZ_SECONDS)

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/lua/5.4
	install -m 755 ldist $(DESTDIR)$(PREFIX)/bin/ldist
	install -m 755 ldist.so $(DESTDIR)$(PREFIX)/lib/lua/5.4/ldist.so
	install -d $(DESTDIR)$(PREFIX)/lib/ldist && install -m 755 build/ldist_net.so $(DESTDIR)$(PREFIX)/lib/ldist/
	$(if $(CUDA_PLUGIN),install -m 755 $(CUDA_PLUGIN) $(DESTDIR)$(PREFIX)/lib/ldist/)

clean:
	rm -rf build build-asan build-tsan ldist ldist.so

# the header dependencies the compilers wrote (-MMD); absent before a first build
-include $(ENGINE_OBJ:.o=.d) $(BIND_OBJ:.o=.d) $(APP_OBJ:.o=.d) $(NET_OBJ:.o=.d) $(ENGINE_TESTS:=.d) \
  $(if $(SANITIZE),,$(CUDA_OBJ:.o=.d))
