/*
 * nccl_absent.c - build/cuda_emu/lib/libnccl.so.2 and libnccl.so for the CPU
 * emulator (tests/cuda_emu). The machine has a real NCCL on the loader's
 * path (/usr/local/cuda/lib via ld.so.conf), which cannot work without a
 * driver; these shadows need a library that does not exist
 * (libnccl_absent_under_cuda_emu.so), so dlopen fails on them and the plugin
 * reports NCCL as unavailable ("NCCL not found: ..."), its path for a machine
 * without NCCL.
 */
int cuemu_nccl_absent;
