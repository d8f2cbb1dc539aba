/*
 * cuda_device.h — CUDA device discovery, callable from C. Built only when
 * the CUDA backend is on (IFD_HAVE_CUDA).
 *
 * A machine with nvcc but no GPU or driver makes cudaGetDeviceCount fail
 * ("CUDA driver version is insufficient…"): every such error means "no
 * device" here, reported with the runtime's message.
 */
#ifndef IFD_CUDA_DEVICE_H
#define IFD_CUDA_DEVICE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices into *count. Returns 0 when at least one
 * device exists; IFD_ENODEV (with the runtime's reason in errbuf) when none
 * is usable. Thread-safe. */
int ifd_cuda_device_count(int *count, char *errbuf, size_t errlen);

/* "NVIDIA H200, 139 GiB, sm_90" for device `dev` into buf. 0 or IFD_ECUDA. */
int ifd_cuda_device_describe(int dev, char *buf, size_t len);

/* Free and total memory of the current device (cudaMemGetInfo), in bytes.
 * Returns 0, or IFD_ENODEV with the runtime's reason in errbuf. */
int ifd_cuda_mem_info(size_t *free_bytes, size_t *total_bytes, char *errbuf, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
