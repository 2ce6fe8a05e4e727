#!/usr/bin/env bash
# tests/lua/test_ops_device.sh - every op on every device, in `make test`:
# tests/ops/test_ops.lua (each kernel against the CPU result, gradients, the
# errors a user meets) run on the logical CPU device cpu:1, i.e. through the
# executor and the device-placement paths a GPU takes. On a GPU machine
# `make test-gpu` runs the same cases on cuda:0. LDIST_BIN: the binary under
# test (tests/run.sh sets it; ./ldist by default).
cd "$(dirname "$0")/../.." || exit 1
LDIST_GPU_TEST_DEVICE=cpu:1 exec "${LDIST_BIN:-./ldist}" tests/ops/test_ops.lua
