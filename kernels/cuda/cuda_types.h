/*
 * cuda_types.h — what every CUDA kernel launcher header shares: the stream
 * type, C/C++ linkage, `restrict` in both languages, and the element types
 * and KV-cache layout of the CPU kernels (cpu/cpu_kernels.h), which the GPU
 * kernels use unchanged so a backend can hand the same descriptions to
 * either.
 *
 * Conventions of every launcher in kernels/cuda (STYLE.md "Kernels"):
 *  - outputs first, the caller allocates; every pointer is a DEVICE pointer
 *    (unless its comment says host) with its shape in a comment;
 *  - the launch is asynchronous on `stream` (NULL = the legacy default
 *    stream); inputs must stay valid and unchanged, and outputs untouched by
 *    others, until the stream reaches that point;
 *  - returns 0 when the kernel was launched, IFD_EINVAL for bad arguments
 *    (checked on the host before anything is launched), IFD_ENOTSUP for a
 *    shape/dtype without a specialization, IFD_ECUDA when the runtime
 *    refused a call or the launch (logged once where it happened). Errors
 *    that happen later on the device surface at the next synchronization;
 *  - thread-safe: launchers keep no state; concurrent launches on different
 *    streams are independent.
 */
#ifndef IFD_CUDA_TYPES_H
#define IFD_CUDA_TYPES_H

#include <stddef.h>
#include <stdint.h>

/* cudaStream_t without <cuda_runtime.h>: the same type. */
typedef struct CUstream_st *ifd_cuda_stream_t;

#ifdef __cplusplus
#define IFD_CUDA_RESTRICT __restrict__
/* cpu_kernels.h spells its qualifiers `restrict` (C only). */
#define restrict __restrict__
extern "C" {
#include "cpu/cpu_kernels.h"
}
#undef restrict
#define IFD_CUDA_API_BEGIN extern "C" {
#define IFD_CUDA_API_END   }
#else
#define IFD_CUDA_RESTRICT restrict
#include "cpu/cpu_kernels.h"
#define IFD_CUDA_API_BEGIN
#define IFD_CUDA_API_END
#endif

#endif
