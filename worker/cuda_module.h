/*
 * cuda_module.h — the CUDA backend as a loadable module, so a worker that
 * serves on the CPU never maps the CUDA libraries.
 *
 * libinferd-cuda.so holds backend_cuda.c, kernels/cuda and the links to
 * libcudart, libcublas and libcublasLt (≈ 150 MiB resident once mapped and
 * relocated, before any weight). inferd-worker (and every program linking
 * ifd_worker_lib) opens it with dlopen the first time something asks for a
 * CUDA backend or the CUDA devices: a CPU worker never does. The module
 * exports one symbol, ifd_cuda_module(), returning the table below; every
 * other symbol of it is local. The ifd_* functions it calls (log, error
 * strings, ggml types, the CPU dequantizers) resolve against the program
 * that loads it, which is linked with -rdynamic for that (one copy of the
 * log level and tag); so a module only works with programs of its own
 * build, which the table's abi, version and ops_size check.
 *
 * Where it is looked for (ifd_cuda_module_load), first found wins:
 *   $INFERD_CUDA_MODULE               when set and not empty: that path only;
 *   <dir of the program>/libinferd-cuda.so;
 *   <dir of the program>/../lib/inferd/libinferd-cuda.so
 *                                     the installed layout (bin/, lib/inferd/)
 *                                     and the build tree's (build/worker/,
 *                                     build/bench/ → build/lib/inferd/).
 * The program's directory comes from /proc/self/exe.
 *
 * Builds that compile the backend into the program (the emulator worker of
 * tests/gpu/emu, IFD_CUDA_STATIC) get the same table without dlopen.
 *
 * Threading: ifd_cuda_module_load may be called from any thread (once
 * semantics); the table's functions follow their originals (backend.h,
 * kernels/cuda/cuda_device.h). The module stays loaded until exit.
 */
#ifndef IFD_CUDA_MODULE_H
#define IFD_CUDA_MODULE_H

#include <stdbool.h>
#include <stddef.h>

#include "backend.h"

/* Bump when the table or anything it passes (backend.h) changes shape. */
#define IFD_CUDA_MODULE_ABI 1
/* The module's file name, and the variable that overrides the search. */
#define IFD_CUDA_MODULE_NAME "libinferd-cuda.so"
#define IFD_CUDA_MODULE_ENV  "INFERD_CUDA_MODULE"

typedef struct {
    int abi;           /* IFD_CUDA_MODULE_ABI of the module's build */
    const char *version; /* IFD_VERSION of the module's build: must equal the loader's */
    size_t ops_size;     /* sizeof(ifd_backend_ops_t) there: must equal the loader's */
    /* ifd_backend_cuda_create (backend.h) */
    int (*backend_create)(ifd_backend_t **out, int device, bool f32, char *errbuf,
                          size_t errlen);
    /* ifd_cuda_device_count, _describe, ifd_cuda_mem_info (cuda_device.h) */
    int (*device_count)(int *count, char *errbuf, size_t errlen);
    int (*device_describe)(int dev, char *buf, size_t len);
    int (*mem_info)(size_t *free_bytes, size_t *total_bytes, char *errbuf, size_t errlen);
} ifd_cuda_module_t;

/* The module's one exported entry point (cuda_module.c). */
const ifd_cuda_module_t *ifd_cuda_module(void);

/* The CUDA module, loaded on the first call (later calls return the same
 * table, or fail the same way). NULL when there is none: errbuf gets one
 * line saying which paths were tried and dlopen's reason (a missing file,
 * a missing libcudart/libcublasLt, a module from another build). The table
 * is static: never freed. */
const ifd_cuda_module_t *ifd_cuda_module_load(char *errbuf, size_t errlen);

#endif
