/*
 * cuda_check.h — checking every CUDA runtime call and every kernel launch in
 * the host launchers of kernels/cuda (STYLE.md "Errors": every CUDA call is
 * checked, every launch is followed by a check of the last error).
 *
 * For .cu files only (C++ host code). A failed call is logged once, here,
 * with the call's text, its file and line and the runtime's message; the
 * launcher then returns IFD_ECUDA, which callers pass up without logging it
 * again. Thread-safe (the runtime's error state is per host thread).
 */
#ifndef IFD_CUDA_CHECK_H
#define IFD_CUDA_CHECK_H

#include <cuda_runtime.h>

extern "C" {
#include "error.h"
#include "log.h"
}

/* Evaluates a cudaError_t expression; on failure logs it and returns
 * IFD_ECUDA from the enclosing function (which must return int). */
#define IFD_CUDA_CHECK(call)                                                                       \
    do {                                                                                           \
        cudaError_t ifd__cuda_err = (call);                                                        \
        if (ifd__cuda_err != cudaSuccess) {                                                        \
            IFD_ERROR("%s:%d: %s: %s", __FILE__, __LINE__, #call,                                  \
                      cudaGetErrorString(ifd__cuda_err));                                          \
            return IFD_ECUDA;                                                                      \
        }                                                                                          \
    } while (0)

/* Right after a kernel launch: the launch's own error (bad configuration,
 * too much shared memory, no device); logs the kernel's name. */
#define IFD_CUDA_CHECK_LAUNCH(kernel_name)                                                         \
    do {                                                                                           \
        cudaError_t ifd__cuda_err = cudaGetLastError();                                            \
        if (ifd__cuda_err != cudaSuccess) {                                                        \
            IFD_ERROR("%s:%d: launching %s: %s", __FILE__, __LINE__, (kernel_name),                \
                      cudaGetErrorString(ifd__cuda_err));                                          \
            return IFD_ECUDA;                                                                      \
        }                                                                                          \
    } while (0)

#endif
