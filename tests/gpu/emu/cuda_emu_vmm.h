/*
 * cuda_emu_vmm.h — the emulator's device memory as shared memory, so that
 * memory one emulated "GPU process" made can be shared with another the way
 * a real driver shares it (see cuda_emu_vmm.cc). Test code only.
 *
 * cuda_emu.cc's cudaMalloc/cudaFree call these two: every emulated
 * cudaMalloc is a memfd mapped MAP_SHARED (so cudaIpcGetMemHandle can name
 * it), the memfd kept open by this process until cudaFree. Thread-safe.
 */
#ifndef IFD_CUDA_EMU_VMM_H
#define IFD_CUDA_EMU_VMM_H

#include <cstddef>

/* n bytes (at least one page) of shareable "device memory", zero-filled, or
 * NULL when memfd_create/mmap fail. */
void *ifd__emu_dev_alloc(size_t n);

/* Frees p when it came from ifd__emu_dev_alloc and returns true; false
 * (nothing done) for any other pointer. */
bool ifd__emu_dev_free(void *p);

/*
 * The emulated device's memory budget (cuda_emu.cc), so that what a process
 * holds on its "GPU" is what cudaMemGetInfo reports and an allocation past
 * the device's size fails as on a real one: cudaMalloc, cuMemMap (the VMM
 * memory this process maps) and instantiated graphs charge it. Per process
 * (each emulated process sees only its own use). $IFD_EMU_DEVICE_MIB sets
 * the size (default 1024). charge: false (nothing charged) when n does not
 * fit. Thread-safe.
 */
bool ifd__emu_mem_charge(size_t n);
void ifd__emu_mem_release(size_t n);

#endif
