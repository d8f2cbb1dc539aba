/*
 * device.cu — CUDA device discovery (see cuda_device.h).
 */
#include "cuda_device.h"

#include <cuda_runtime.h>
#include <stdio.h>

extern "C" {
#include "error.h"
}

extern "C" int ifd_cuda_device_count(int *count, char *errbuf, size_t errlen)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        if (errbuf && errlen)
            snprintf(errbuf, errlen, "%s", e != cudaSuccess ? cudaGetErrorString(e)
                                                            : "no CUDA device");
        (void)cudaGetLastError(); /* clear the sticky-free error state */
        *count = 0;
        return IFD_ENODEV;
    }
    *count = n;
    return 0;
}

extern "C" int ifd_cuda_device_describe(int dev, char *buf, size_t len)
{
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, dev);
    if (e != cudaSuccess) {
        snprintf(buf, len, "device %d: %s", dev, cudaGetErrorString(e));
        return IFD_ECUDA;
    }
    snprintf(buf, len, "%s, %.0f GiB, sm_%d%d", p.name,
             (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), p.major, p.minor);
    return 0;
}

extern "C" int ifd_cuda_mem_info(size_t *free_bytes, size_t *total_bytes, char *errbuf,
                                 size_t errlen)
{
    size_t f = 0, t = 0;
    cudaError_t e = cudaMemGetInfo(&f, &t);
    if (e != cudaSuccess) {
        if (errbuf && errlen)
            snprintf(errbuf, errlen, "cudaMemGetInfo: %s", cudaGetErrorString(e));
        (void)cudaGetLastError();
        return IFD_ENODEV;
    }
    *free_bytes = f;
    *total_bytes = t;
    return 0;
}
