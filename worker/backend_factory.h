/*
 * backend_factory.h — the worker's backends made from their names, and the
 * questions a GPU worker asks its device before and after loading a model:
 * whether there is one, what it is called, and how many KV blocks fit on it.
 *
 * Both the serving loop (serve.c) and the command line (worker_cli.c: offline
 * generation, --kv-probe) start their backend here, so a backend named on
 * the command line and one named by the router's HELLO are the same thing,
 * and `--kv-probe` and serve.c's POOL step size the pool alike.
 *
 * The CUDA backend lives in a module (cuda_module.h) that this file opens
 * only when a CUDA backend or the CUDA devices are asked for: a CPU worker
 * never maps the CUDA libraries. "cuda" and "cuda-f32" mean device 0 of the
 * CUDA_VISIBLE_DEVICES the process was started with (the router sets it per
 * worker).
 *
 * Errors: every function returns 0 or a negative IFD_E* code and writes a
 * one-line reason into the caller's err buffer (not logged here: the caller
 * decides whether the line goes to the log, to stderr or to the router).
 *
 * Threading: call from the worker's main thread (the CUDA module's loader is
 * itself safe from any thread; the backends are single-threaded objects).
 */
#ifndef IFD_BACKEND_FACTORY_H
#define IFD_BACKEND_FACTORY_H

#include <stddef.h>

#include "backend.h"
#include "kvprobe.h"
#include "model.h"

/* The backend named `name` ("cpu" or NULL, "cuda", "cuda-f32": device 0 of
 * CUDA_VISIBLE_DEVICES) with `threads` CPU threads (0 = all) and, for the
 * CPU, `weights` (backend.h: AUTO keeps quantized weights quantized, F32 the
 * exact path). 0 with *out the caller's (be->ops->destroy), or an IFD_E*
 * code with a one-line reason in err and *out untouched: IFD_ENOTSUP a
 * build without CUDA, IFD_ENODEV no CUDA module, device or driver,
 * IFD_EINVAL an unknown name. */
int ifd_backend_factory_create(ifd_backend_t **out, const char *name, int threads,
                               ifd_weights_dtype_t weights, char *err, size_t errlen);

/* A backend's device as READY and the log name it: "cpu (N threads)" for
 * "cpu" (threads <= 0: the online CPUs), else the CUDA device's description
 * followed by "(GPU gpu)" and ", exact f32" for "cuda-f32". Call after a
 * successful ifd_backend_factory_create(name): it reads the module that
 * create loaded and never fails (a CUDA device it cannot describe is
 * "cuda"). */
void ifd_backend_factory_describe(const char *name, int threads, int gpu, char *out,
                                  size_t outlen);

/* The device check of a GPU worker's start: 0 when this build can open its
 * CUDA module and the runtime sees a device; else IFD_ENODEV / IFD_ENOTSUP
 * with the one-line reason ("no CUDA device: CUDA driver version is
 * insufficient ...") that `inferd --gpus` prints as "GPU i: ...". */
int ifd_backend_factory_gpu_check(char *err, size_t errlen);

/* Sizes the KV pool of the GPU m was loaded on (device 0 of
 * CUDA_VISIBLE_DEVICES): reads the device's memory, runs ifd_kvprobe_size
 * with warm (max_ctx <= 0 or beyond the model's: the model's context) and
 * fraction, and writes the device's description into desc. Used by
 * `--kv-probe` and by serve.c's POOL step, so both count alike. Returns
 * ifd_kvprobe_size's codes (IFD_ENOMEM: no block fits, *out still filled),
 * IFD_ENODEV without the CUDA module, IFD_ENOTSUP in a build without CUDA.
 * Borrows be, m and draft (speculative decoding's draft model on the same
 * backend, or NULL: ifd_kvprobe_size_params_t) for the call (their buffers
 * stay grown, for the engine to reuse). */
int ifd_backend_factory_gpu_size(ifd_backend_t *be, ifd_model_t *m, ifd_model_t *draft,
                                 const ifd_kvprobe_params_t *warm, double fraction,
                                 ifd_kvprobe_size_t *out, char *desc, size_t desclen, char *err,
                                 size_t errlen);

#endif
