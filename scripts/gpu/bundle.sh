#!/usr/bin/env bash
# scripts/gpu/bundle.sh - prepare build/gpu-bundle/, everything a bare GPU
# machine (no package registries; it gets the working tree plus up to 8
# ignored paths, 64 MiB in all) needs to run `make test-gpu` and
# `make bench-gpu`:
#
#   build/gpu-bundle/run.sh          sets the paths up, then runs its arguments
#   build/gpu-bundle/ldist           wrapper: LD_LIBRARY_PATH=lib/ + the machine's cuBLAS/NCCL
#   build/gpu-bundle/payload.tar.xz  bin/ldist, bin/ldist_cuda.so, lib/, mpi/ (Open MPI, where
#                                    installed here; unpacked on first use)
#   build/gpu-bundle/data/fashion-mnist/*.gz
#
# ldist is rebuilt for x86-64-v3 (AVX2) in a scratch copy of the sources, not
# -march=native, so it runs on the GPU machine's processor. The shared
# libraries come from `ldd ldist`, minus glibc and the C++ runtime (any
# machine with PyTorch has newer ones, and PyTorch must keep its own).
# cuBLAS and NCCL are not carried (over 700 MB): the plugin opens the GPU
# machine's own, from its CUDA toolkit or PyTorch's nvidia-* wheels.
#
# Then, through the device tool:  command "bash build/gpu-bundle/run.sh make test-gpu",
# carry ["build/gpu-bundle"] (README.md, section GPU).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=build/gpu-bundle
limit=$((64 * 1024 * 1024))
arch=${BUNDLE_ARCH:-x86-64-v3}

[ -f build/ldist_cuda.so ] || { echo "bundle: build/ldist_cuda.so is missing: run make (nvcc needed)"; exit 1; }

# ---- ldist for a portable processor level, built apart from build/
src=$(mktemp -d /tmp/ldist-bundle.XXXXXX)
trap 'rm -rf "$src"' EXIT
tar --exclude=./build --exclude=./.git --exclude=./ldist --exclude=./ldist.so -cf - . | tar -C "$src" -xf -
echo "bundle: building ldist with ARCH=$arch ..."
make -C "$src" -j"$(nproc)" ARCH="$arch" NVCC= ldist >"$src/build.log" 2>&1 || { tail -20 "$src/build.log"; exit 1; }

rm -rf "$out"
stage=$src/stage
mkdir -p "$stage/bin" "$stage/lib" "$out/data/fashion-mnist"
cp "$src/ldist" "$stage/bin/ldist"
cp build/ldist_cuda.so "$stage/bin/ldist_cuda.so"
strip --strip-debug "$stage/bin/ldist" "$stage/bin/ldist_cuda.so" 2>/dev/null || true

# ---- the shared libraries ldist needs, but not glibc's nor the C++ runtime's
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|libresolv\.so|libutil\.so|libstdc\+\+\.so|libgcc_s\.so)'
# ldist opens the network plugin and OpenBLAS at run time: carry them and what they need
cp build/ldist_net.so "$stage/bin/ldist_net.so"
blas=$(ldconfig -p | awk '/libopenblas\.so\.0 / { print $NF; exit }')
[ -n "$blas" ] || { echo "bundle: libopenblas.so.0 not found"; exit 1; }
cp -L "$blas" "$stage/lib/libopenblas.so.0"
for bin in "$stage/bin/ldist" "$stage/bin/ldist_net.so" "$stage/lib/libopenblas.so.0"; do
  ldd "$bin" | awk '/=>/ { print $1, $3 }'
done | sort -u | while read -r name path; do
  [[ $name =~ $skip ]] && continue
  [ -f "$stage/lib/$name" ] && continue
  [ -f "$path" ] || { echo "bundle: $name not found (ldd: $path)"; exit 1; }
  cp -L "$path" "$stage/lib/$name"
done
# every library ldist needs resolves inside lib/ or among the skipped ones
missing=$(LD_LIBRARY_PATH="$stage/lib" ldd "$stage/bin/ldist" | awk '/=>/ { print $1, $3 }' |
  grep -Ev "$skip" | awk -v lib="$stage/lib/" 'index($2, lib) != 1 { print $1 }' || true)
[ -z "$missing" ] || { echo "bundle: not resolved inside the bundle: $missing"; exit 1; }

# ---- Open MPI, where installed, for the MPI row of make bench-cores: mpirun
# and its plugins under mpi/usr (the layout Debian installs under /usr, so
# OPAL_PREFIX and PMIX_PREFIX relocate it), their libraries in
# mpi/lib; the plugins for fabrics a single machine does not use (UCX, OFI,
# verbs, PSM) stay behind, and the MCA settings of Debian's
# openmpi-mca-params.conf go as OMPI_MCA_ variables (run.sh).
parts=(bin lib)
mlib=/usr/lib/x86_64-linux-gnu
if [ "${BUNDLE_MPI:-1}" = 1 ] && [ -x /usr/bin/orterun ] && [ -d $mlib/openmpi/lib/openmpi3 ] && [ -d $mlib/pmix2 ]; then
  m=$stage/mpi
  mkdir -p "$m/usr/bin" "$m/usr/share" "$m/usr/lib/x86_64-linux-gnu/openmpi/lib" "$m/lib"
  cp /usr/bin/orterun /usr/bin/orted "$m/usr/bin/"
  cp -r /usr/share/openmpi "$m/usr/share/"
  cp -r $mlib/pmix2 "$m/usr/lib/x86_64-linux-gnu/"
  cp -r $mlib/openmpi/lib/openmpi3 "$m/usr/lib/x86_64-linux-gnu/openmpi/lib/"
  find "$m/usr/lib" -name '*.so' | grep -E '_(ucx|ofi|verbs|openib|psm2?|uct|usnic|portals4)[._]' | xargs -r rm -f
  cp -L $mlib/libmpi.so.40 $mlib/libopen-rte.so.40 $mlib/libopen-pal.so.40 $mlib/libmca_common_sm.so.40 \
    $mlib/libmca_common_ompio.so.41 $mlib/libmca_common_monitoring.so.50 $mlib/libpmix.so.2 "$m/lib/"
  # what those need, found with the bundle's own copies first
  for round in 1 2; do
    find "$m" -name '*.so*' -type f -o -path "$m/usr/bin/*" -type f | while read -r f; do
      LD_LIBRARY_PATH="$m/lib:$stage/lib" ldd "$f" 2>/dev/null | awk '/=>/ { print $1, $3 }'
    done | sort -u | while read -r name path; do
      [[ $name =~ $skip ]] && continue
      [ -f "$m/lib/$name" ] || [ -f "$stage/lib/$name" ] && continue
      [ -f "$path" ] && cp -L "$path" "$m/lib/$name"
    done
  done
  missing=$(find "$m" -name '*.so*' -type f -o -path "$m/usr/bin/*" -type f | while read -r f; do
    LD_LIBRARY_PATH="$m/lib:$stage/lib" ldd "$f" 2>/dev/null | awk -v f="$f" '/not found/ { print f ": " $1 }'; done)
  [ -z "$missing" ] || { echo "bundle: Open MPI parts with libraries not found: $missing"; exit 1; }
  parts+=(mpi)
  echo "bundle: Open MPI $(orterun --version 2>/dev/null | head -1 | awk '{print $NF}') included ($(du -sh "$m" | cut -f1))"
fi

echo "bundle: compressing $(du -sh "$stage" | cut -f1) of binaries and libraries ..."
tar -C "$stage" -cf - "${parts[@]}" | xz -T0 -6 >"$out/payload.tar.xz"
cp /usr/share/datasets/fashion-mnist/*-ubyte.gz "$out/data/fashion-mnist/"

# ---- the wrapper and the run script
cat >"$out/ldist" <<'EOF'
#!/bin/sh
# ldist from the GPU bundle: its libraries first, then the machine's cuBLAS/NCCL
here=$(dirname "$(readlink -f "$0")")
[ -x "$here/bin/ldist" ] || tar -C "$here" -xJf "$here/payload.tar.xz" || exit 1
LD_LIBRARY_PATH="$here/lib${LDIST_CUDA_LIBS:+:$LDIST_CUDA_LIBS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  exec "$here/bin/ldist" "$@"
EOF
cat >"$out/run.sh" <<'EOF'
#!/usr/bin/env bash
# build/gpu-bundle/run.sh [test | bench | COMMAND...] - on the GPU machine, from
# the repository root: unpack the bundle, find the machine's cuBLAS and NCCL
# (CUDA toolkit, or PyTorch's nvidia-* wheels), then run
#   test   -> tests/gpu/run.sh      bench -> scripts/gpu/bench.sh
#   COMMAND (e.g. make test-gpu; NO_BUILD=1 keeps make from rebuilding)
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.." || exit 1
[ -x "$here/bin/ldist" ] || tar -C "$here" -xJf "$here/payload.tar.xz" || exit 1
dirs=""
add() { case ":$dirs:" in *":$1:"*) ;; *) dirs="${dirs:+$dirs:}$1" ;; esac; }
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  ls "$d"/libcublas.so.* "$d"/libnccl.so.* >/dev/null 2>&1 && add "$d"
done
for sp in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
  for f in $(find "$sp/nvidia" "$sp/torch/lib" -maxdepth 4 \( -name 'libcublas.so.*' -o -name 'libcublasLt.so.*' -o -name 'libnccl.so.*' \) 2>/dev/null); do
    add "$(dirname "$f")"
  done
done
export LDIST_CUDA_LIBS=$dirs LDIST="$here/ldist" LDIST_DATA_DIR="$here/data" NO_BUILD=1
if [ -d "$here/mpi" ]; then
  # the bundle's Open MPI (bundle.sh): relocated, mpirun on the PATH, Debian's MCA settings
  export OPAL_PREFIX="$here/mpi/usr" PMIX_PREFIX="$here/mpi/usr/lib/x86_64-linux-gnu/pmix2"
  export PMIX_MCA_mca_base_component_path="$PMIX_PREFIX/lib/pmix"
  export LDIST_MPI_LIB="$here/mpi/lib/libmpi.so.40" OMPI_MCA_btl_base_warn_component_unused=0
  export OMPI_MCA_mtl=^ofi OMPI_MCA_btl=^uct,openib,ofi OMPI_MCA_pml=^ucx OMPI_MCA_osc=^ucx,pt2pt
  mkdir -p "$here/mpi/path"
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s/mpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s/mpi/usr/bin/orterun" "$@"\n' \
    "$here" "$here" >"$here/mpi/path/mpirun"
  chmod +x "$here/mpi/path/mpirun"
  export PATH="$here/mpi/path:$PATH"
fi
echo "# ldist: $("$LDIST" -e 'io.write(tensor.device_note())' 2>&1)"
echo "# cuBLAS/NCCL from: ${dirs:-(the default library paths)}"
case ${1:-test} in
  test) shift || true; exec bash tests/gpu/run.sh "$@" ;;
  bench) shift || true; exec bash scripts/gpu/bench.sh "$@" ;;
  *) exec "$@" ;;
esac
EOF
chmod +x "$out/ldist" "$out/run.sh"

# ---- the bundle's own ldist runs here, with its libraries (then the unpacked copy goes)
"$out/ldist" -e 'print("bundle: ldist " .. ldist.version .. " starts; " .. tensor.device_note())'
rm -rf "$out/bin" "$out/lib" "$out/mpi"

# ---- the size that travels: this folder plus the working tree
tree=$( (git ls-files; git ls-files --others --exclude-standard) | tr '\n' '\0' | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
size=$(du -sb "$out" | cut -f1)
printf 'bundle: %s is %.1f MiB, the working tree %.1f MiB: %.1f MiB of the 64 MiB that may travel\n' \
  "$out" "$(echo "$size / 1048576" | bc -l)" "$(echo "$tree / 1048576" | bc -l)" "$(echo "($size + $tree) / 1048576" | bc -l)"
if [ $((size + tree)) -ge $limit ]; then echo "bundle: too big"; exit 1; fi
