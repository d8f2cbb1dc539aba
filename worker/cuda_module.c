/*
 * cuda_module.c — the entry point of libinferd-cuda.so (cuda_module.h): the
 * table of the CUDA backend's functions the worker reaches through dlopen.
 * Also compiled into the emulator worker (tests/gpu/emu), which links the
 * backend in (IFD_CUDA_STATIC). The module's only exported symbol
 * (worker/cuda_module.map).
 */
#include "cuda_module.h"

#include "cuda/cuda_device.h"

static const ifd_cuda_module_t ifd__cuda_module = {
    .abi = IFD_CUDA_MODULE_ABI,
    .version = IFD_VERSION,
    .ops_size = sizeof(ifd_backend_ops_t),
    .backend_create = ifd_backend_cuda_create,
    .device_count = ifd_cuda_device_count,
    .device_describe = ifd_cuda_device_describe,
    .mem_info = ifd_cuda_mem_info,
};

__attribute__((visibility("default"))) const ifd_cuda_module_t *ifd_cuda_module(void)
{
    return &ifd__cuda_module;
}
