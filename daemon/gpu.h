/*
 * gpu.h — the router's side of GPU workers (`inferd --gpus`), without CUDA:
 * the router never links it. It parses the GPU list and sizes the KV pool
 * by asking the worker program: once per GPU at start-up, before the pool
 * exists, it runs `inferd-worker --kv-probe` with CUDA_VISIBLE_DEVICES set
 * to that GPU. The probe loads the weights onto the device, runs the
 * engine's largest steps and records its decode graphs (worker/kvprobe.h),
 * reads cudaMemGetInfo and prints one JSON line with the KV blocks that fit
 * in gpu_memory_fraction of the device after the weights, the measured
 * activations and graphs and a margin (worker/kvsize.h). The pool then gets
 * the smallest count over the GPUs (one geometry for every device). A probe that fails (no GPU, no
 * driver, a build without CUDA, nothing fits) gives its reason as one
 * message, which the daemon logs as its one error line before exiting 1.
 * The probes of several GPUs run in parallel.
 *
 * Cost: the weights are loaded twice at start-up (probe, then the worker);
 * a POOL frame sent after the worker's load (docs/gpu-status.md, next
 * steps) would remove the first.
 *
 * Blocking (fork + exec + wait), for start-up before the event loop only.
 * Not thread-safe (environ).
 */
#ifndef IFD_DAEMON_GPU_H
#define IFD_DAEMON_GPU_H

#include <stddef.h>
#include <stdint.h>

#define IFD_GPU_MAX 16 /* = IFD_KVPOOL_MAX_DEVICES */

/* "0,1,3" → ids[0..*n-1] (each 0..1023, no repeats, at most max). 0, or
 * IFD_EINVAL with the reason in err. */
int ifd_gpu_parse_list(const char *s, int *ids, int max, int *n, char *err, size_t errlen);

/* The daemon's environment with CUDA_VISIBLE_DEVICES=gpu, the variable
 * written into var (≥ 32 bytes): an array to free() whose strings are
 * environ's and var (borrowed: use it before either changes, e.g. for one
 * spawn). NULL when out of memory. */
char **ifd_gpu_env(int gpu, char *var, size_t varlen);

typedef struct {
    const char *worker_binary;
    const char *backend;        /* "cuda" or "cuda-f32" */
    const char *model_path;     /* the model, or the tokenizer's with random_weights */
    const char *random_weights; /* NULL or "": the model's own weights */
    uint64_t weights_seed;
    double fraction;
    const char *kv_dtype;
    int block_size;
    int max_seqs;           /* 0: the worker's default */
    int max_batched_tokens; /* 0: the worker's default */
    int max_model_len;      /* 0: the model's context */
    double timeout_s;       /* the probe is killed after this */
} ifd_gpu_probe_params_t;

typedef struct {
    int64_t n_blocks;
    /* free_bytes: after the weights and the warm-up (its scratch KV freed) */
    uint64_t total_bytes, free_bytes, weight_bytes, block_bytes;
    uint64_t activation_bytes, graph_bytes, margin_bytes; /* measured; kept beyond */
    int n_graphs;
    char device[128];
} ifd_gpu_probe_t;

/* Runs the probe on each of gpus[0..n-1], all at once (the loads overlap),
 * within one timeout. 0 with out[0..n-1] filled, or a negative code with
 * the first failure's one-line reason in err ("GPU 0: no CUDA device: ...");
 * the other probes are then killed. */
int ifd_gpu_probe_all(const ifd_gpu_probe_params_t *p, const int *gpus, int n,
                      ifd_gpu_probe_t *out, char *err, size_t errlen);

#endif
