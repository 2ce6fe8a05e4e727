#!/usr/bin/env bash
# Install what ldist needs to build, run and test, from Debian's packages
# (and the test-side Python packages from PyPI). Quiet when all is present.
set -euo pipefail
need=()
for p in build-essential pkg-config lua5.4 liblua5.4-dev libreadline-dev libzmq3-dev \
         libjansson-dev libssl-dev uuid-dev libopenblas-dev zlib1g-dev \
         libpng-dev libjpeg62-turbo-dev \
         dataset-fashion-mnist tmux librsvg2-bin \
         openmpi-bin libopenmpi-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if ((${#need[@]})); then
  echo "setup: installing ${need[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
# Test side: a real Jupyter client and the kernel conformance suite.
if [ "${LDIST_SETUP_PY:-1}" = 1 ]; then
  py=python3
  if ! $py -c 'import jupyter_client, jupyter_kernel_test, nbclient, nbformat, safetensors, numpy, pytest, pexpect' 2>/dev/null; then
    echo "setup: installing Python test packages"
    $py -m pip install -q jupyter_client jupyter_kernel_test nbclient nbformat safetensors numpy pytest pexpect >/dev/null
  fi
fi
