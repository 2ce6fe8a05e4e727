# emu.mk - builds the CUDA plugin for the CPU emulator (tests/cuda_emu/run.sh
# runs `make -f tests/cuda_emu/emu.mk`, from the repository root, after
# convert.py wrote build/cuda_emu/src/*.cpp):
#   build/cuda_emu/ldist_cuda.so        engine/cuda/*.cu (converted) + the emulated runtime
#   build/cuda_emu/lib/libcublas.so.13  cuBLAS on the CPU (OpenBLAS)
#   build/cuda_emu/lib/libcuda.so.1     the "driver" the plugin checks for
#   build/cuda_emu/lib/libnccl.so.2, libnccl.so   shadows that fail to load (no NCCL)
#   build/cuda_emu/selftest             the emulator's own tests
#   build/cuda_emu/test_attn_offsets    attention with causal offsets (C only), device against CPU
E       := tests/cuda_emu
O       := build/cuda_emu
CXX     ?= g++
CC      ?= gcc
# -march=native -ffp-contract=fast: FMA contraction, as nvcc's default --fmad=true (and the CPU engine's build)
EMU_OPT ?= -O2 -march=native -ffp-contract=fast
EMU_CXXFLAGS := $(EMU_OPT) -g -std=gnu++17 -fPIC -fvisibility=hidden -Wall -Wno-unknown-pragmas -Wno-unused-function \
          -include $(E)/cuda_emu.h -I$(E)/include -Iengine -Iengine/cuda
BLAS_INC := -I/usr/include/x86_64-linux-gnu/openblas-pthread
BLAS_LIB := -L/usr/lib/x86_64-linux-gnu/openblas-pthread -lopenblas

SRC := $(wildcard $(O)/src/cuda_*.cpp)
OBJ := $(SRC:$(O)/src/%.cpp=$(O)/obj/%.o) $(O)/obj/cuemu_runtime.o

all: $(O)/ldist_cuda.so $(O)/lib/libcublas.so.13 $(O)/lib/libcuda.so.1 $(O)/lib/libnccl.so.2 $(O)/lib/libnccl.so \
     $(O)/selftest $(O)/test_attn_offsets

$(O)/obj/%.o: $(O)/src/%.cpp $(E)/cuda_emu.h
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) -MMD -MP -c $< -o $@

$(O)/obj/cuemu_runtime.o: $(E)/cuemu_runtime.cpp $(E)/cuda_emu.h
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) -MMD -MP -c $< -o $@

# as the Makefile's plugin rule: -shared, -z defs (nothing from the engine), -ldl -lpthread;
# shared.ld gathers the __shared__ arrays so that the runtime can poison them
$(O)/ldist_cuda.so: $(OBJ) $(E)/shared.ld
	$(CXX) -shared -fPIC -o $@ $(OBJ) -Wl,-T,$(E)/shared.ld -Wl,-z,defs -ldl -lpthread

$(O)/lib/libcublas.so.13: $(E)/fake_cublas.cpp $(E)/include/cublas_v2.h $(E)/include/cuda_runtime.h engine/ld_half.h
	@mkdir -p $(dir $@)
	$(CXX) -O2 -g -std=gnu++17 -fPIC -shared -fvisibility=hidden -Wall -I$(E)/include -Iengine $(BLAS_INC) \
	  -Wl,-soname,libcublas.so.13 -o $@ $< $(BLAS_LIB) -Wl,-z,defs

$(O)/lib/libcuda.so.1: $(E)/fake_libcuda.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -fPIC -shared -Wl,-soname,libcuda.so.1 -o $@ $<

# a library that needs one that does not exist: dlopen fails on it
$(O)/lib/libnccl.so.2 $(O)/lib/libnccl.so: $(E)/nccl_absent.c
	@mkdir -p $(dir $@) $(O)/tmp
	$(CC) -fPIC -shared -Wl,-soname,libnccl_absent_under_cuda_emu.so -o $(O)/tmp/libnccl_absent_under_cuda_emu.so $<
	$(CC) -fPIC -shared -o $@ $< -L$(O)/tmp -Wl,--no-as-needed -lnccl_absent_under_cuda_emu
	rm -f $(O)/tmp/libnccl_absent_under_cuda_emu.so

$(O)/obj/selftest.o: $(O)/src/selftest.cpp $(E)/cuda_emu.h
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) -MMD -MP -c $< -o $@

$(O)/selftest: $(O)/obj/selftest.o $(O)/obj/cuemu_runtime.o $(E)/shared.ld
	$(CXX) -o $@ $(O)/obj/selftest.o $(O)/obj/cuemu_runtime.o -Wl,-T,$(E)/shared.ld -lpthread

# an engine test (tests/engine/test_util.c's harness) linked as the Makefile links them
ENGINE_CPPFLAGS := -Itests/engine -Iengine -Iengine/net -Ilua_bindings -Ikernel -Ibuild $(BLAS_INC)
$(O)/test_attn_offsets: $(E)/test_attn_offsets.c tests/engine/test_util.c build/libldist_engine.a
	$(CC) -O2 -g -std=gnu11 -Wall -Wextra -Wno-unused-parameter -pthread $(ENGINE_CPPFLAGS) -o $@ $(E)/test_attn_offsets.c \
	  tests/engine/test_util.c build/libldist_engine.a -lz -lpng -ljpeg -lm -lpthread -ldl

-include $(OBJ:.o=.d) $(O)/obj/selftest.d
