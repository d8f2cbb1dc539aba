/*
 * gpu.h — the router's side of GPU workers (`inferd --gpus`), without CUDA:
 * the router never links it. It parses the GPU list and builds each GPU
 * worker's environment (CUDA_VISIBLE_DEVICES naming its GPU, which the
 * worker sees as its device 0).
 *
 * The KV pool's size per GPU comes from the POOL step (supervisor.h,
 * proto/wire.h): the first worker of each GPU is started before the pool
 * exists, loads the weights, measures what its largest steps and decode
 * graphs take (worker/kvprobe.h) and reports the blocks that fit in
 * gpu_memory_fraction of the device (POOL_SIZE); the pool gets the
 * smallest count over the GPUs. One load of the weights per GPU.
 *
 * Not thread-safe (environ).
 */
#ifndef IFD_DAEMON_GPU_H
#define IFD_DAEMON_GPU_H

#include <stddef.h>

#define IFD_GPU_MAX 16 /* = IFD_KVPOOL_MAX_DEVICES */

/* "0,1,3" → ids[0..*n-1] (each 0..1023, no repeats, at most max). 0, or
 * IFD_EINVAL with the reason in err. */
int ifd_gpu_parse_list(const char *s, int *ids, int max, int *n, char *err, size_t errlen);

/* The daemon's environment with CUDA_VISIBLE_DEVICES=gpu, the variable
 * written into var (≥ 32 bytes): an array to free() whose strings are
 * environ's and var (borrowed: use it before either changes, e.g. for one
 * spawn). NULL when out of memory. */
char **ifd_gpu_env(int gpu, char *var, size_t varlen);

#endif
