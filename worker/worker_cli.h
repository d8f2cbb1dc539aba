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

#include "kvprobe.h"

/* The device check of a GPU worker's start: 0 when this build can open its
 * CUDA module and the runtime sees a device; else IFD_ENODEV / IFD_ENOTSUP
 * with the one-line reason ("no CUDA device: CUDA driver version is
 * insufficient ...") that `inferd --gpus` prints as "GPU i: ...". */
int ifd_worker_gpu_check(char *err, size_t errlen);

/* Sizes the KV pool of the GPU m was loaded on (device 0 of
 * CUDA_VISIBLE_DEVICES): reads the device's memory, runs ifd_kvprobe_size
 * with warm (max_ctx <= 0 or beyond the model's: the model's context) and
 * fraction, and writes the device's description into desc. Used by
 * `--kv-probe` and by serve.c's POOL step, so both count alike. Returns
 * ifd_kvprobe_size's codes (IFD_ENOMEM: no block fits, *out still filled),
 * IFD_ENOTSUP without CUDA. Borrows be and m (their buffers stay grown). */
int ifd_worker_gpu_size(ifd_backend_t *be, ifd_model_t *m, const ifd_kvprobe_params_t *warm,
                        double fraction, ifd_kvprobe_size_t *out, char *desc, size_t desclen,
                        char *err, size_t errlen);

#endif
