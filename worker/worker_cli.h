/*
 * worker_cli.h — the inferd-worker command line, kept out of main.c so that
 * tests can drive it in-process.
 */
#ifndef IFD_WORKER_CLI_H
#define IFD_WORKER_CLI_H

#include <stddef.h>

/* Runs inferd-worker with argv; returns the process exit status
 * (0 ok, 1 runtime failure, 2 usage error). */
int ifd_worker_main(int argc, char **argv);

#include "backend.h"

/* The backend named `name` ("cpu" or NULL, "cuda", "cuda-f32": device 0 of
 * CUDA_VISIBLE_DEVICES) with `threads` CPU threads (0 = all) and, for the
 * CPU, `weights` (backend.h: AUTO keeps quantized weights quantized, F32 the
 * exact path). 0, or an IFD_E* code with a one-line reason in err
 * (IFD_ENOTSUP: a build without CUDA; IFD_ENODEV: no device or driver). */
int ifd_worker_backend_create(ifd_backend_t **out, const char *name, int threads,
                              ifd_weights_dtype_t weights, char *err, size_t errlen);

#endif
