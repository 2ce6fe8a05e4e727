/*
 * fake_libcuda.c - build/cuda_emu/lib/libcuda.so.1 for the CPU emulator
 * (tests/cuda_emu). engine/cuda/cuda_device.cu opens libcuda.so.1 only to
 * tell "no driver" apart from the other failures; the emulated runtime
 * (cuemu_runtime.cpp) is the driver. These two symbols make it look like one.
 */
__attribute__((visibility("default"))) int cuInit(unsigned int flags) { (void)flags; return 0; }
__attribute__((visibility("default"))) int cuDriverGetVersion(int *v) { if (v) *v = 13000; return 0; }
