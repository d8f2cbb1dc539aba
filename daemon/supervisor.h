/*
 * supervisor.h — the worker processes: started with uv_spawn, one
 * socketpair each (the worker's end becomes its fd 3), handed the KV pool's
 * fds and their configuration in the HELLO frame, watched, restarted.
 *
 * Life of a worker slot:
 *   SIZING    (the POOL step, GPU workers' first start only, while the pool
 *             does not exist yet: params.size_pool) spawned with a size_pool
 *             HELLO, loading the weights and measuring what is left, then
 *             POOL_SIZE sent and waiting for POOL. When every worker has
 *             reported, on_pool_sizes gets their reports; the owner creates
 *             the pool and calls ifd_sup_set_pool, which sends each one POOL
 *             with the pool's fds (→ STARTING). Any failure before that — an
 *             ERROR frame, an exit, broken frames, no POOL_SIZE within
 *             worker_start_timeout — is not restarted: on_pool_failed gets
 *             one line ("GPU 0: no CUDA device: ...") and the supervisor
 *             logs nothing of its own about it (the owner gives up the
 *             start: ifd_sup_destroy). While sizing, no other callback
 *             fires;
 *   STARTING  spawned, HELLO sent (or POOL), waiting for READY
 *             (worker_start_timeout, then it is killed);
 *   READY     serving; pinged with STATS_REQ every worker_ping_interval; a
 *             worker whose ping is unanswered after two intervals is marked
 *             unresponsive (/health: degraded) until it answers; one that
 *             leaves a ping unanswered for worker_timeout is SIGKILLed (a
 *             hung worker is a crashed worker);
 *   DOWN      died unexpectedly (exit, signal, broken frames, EOF): its
 *             pool references are reclaimed (ifd_kvpool_reclaim) once the
 *             process is gone, the owner is told (on_lost) so it can move
 *             the worker's sequences, and a restart is scheduled after a
 *             back-off that doubles per crash in a row (restart_backoff …
 *             restart_backoff_max);
 *   FAILED    crash_loop_limit crashes within crash_loop_window: a crash
 *             loop (reported by /health and the log). The worker is tried
 *             again after crash_loop_backoff, doubling per loop in a row up
 *             to crash_loop_backoff_max; a run longer than the window resets
 *             the count. (At start-up, when every worker fails before any
 *             was ever ready, the daemon gives up instead: see main.c.)
 *   STOPPING / STOPPED  on shutdown (SHUTDOWN frame, SIGKILL after a grace).
 *
 * Frames from workers are read eagerly (a worker writes with blocking
 * writes, so the router must never stop reading). TOKENS, FINISHED and
 * ERROR frames with a request id go to on_message; READY, STATS and worker
 * errors are handled here.
 *
 * Ownership: the supervisor owns its handles and frees itself in the close
 * callbacks after ifd_sup_destroy. Borrowed: the loop, the pool, the
 * metrics, the strings in the params (kept by copy). Threading: loop only.
 * The POOL step's frames are in proto/wire.h (HELLO's size_pool,
 * POOL_SIZE, POOL); docs/gpu-status.md tells the whole start.
 */
#ifndef IFD_DAEMON_SUPERVISOR_H
#define IFD_DAEMON_SUPERVISOR_H

#include "kvpool/kvpool.h"
#include "metrics.h"
#include "proto/wire.h"
#include "router.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

typedef enum {
    IFD_W_STARTING = 0,
    IFD_W_SIZING,
    IFD_W_READY,
    IFD_W_DOWN,
    IFD_W_FAILED,
    IFD_W_STOPPING,
    IFD_W_STOPPED,
} ifd_worker_state_t;

const char *ifd_worker_state_name(ifd_worker_state_t s);

/* What the supervisor knows of a worker; read by the router and /health. */
typedef struct {
    int slot;
    ifd_worker_state_t state;
    int pid;           /* 0 when no process */
    uint32_t max_seqs; /* from READY */
    uint32_t n_ctx;
    int kv_device;
    uint64_t starts;
    uint64_t crashes;
    bool crash_loop;      /* FAILED by a crash loop: retried after crash_loop_backoff */
    bool unresponsive;    /* READY but a ping has gone unanswered for 2 intervals */
    uint64_t crash_loops; /* crash loops in a row (reset by a run longer than the window) */
    double retry_in_s;    /* FAILED: seconds until the next try (at the time of the loop) */
    char last_exit[96]; /* "signal 9", "status 1", "" */
    char device_name[64];
    ifd_wire_vision_t vision; /* from READY: the model's vision tower (tokens_per_image 0: none) */
    bool has_stats;
    /* the last STATS answer; its spec_accepted_per_pos (decoded into the
     * frame's memory) is copied into spec_per_pos and the pointer cleared */
    ifd_wire_stats_t stats;
    uint64_t spec_per_pos[IFD_WIRE_MAX_SPEC_TOKENS];
    /* its draft_tier likewise (n_draft_tier of them; 0: no draft tier) */
    uint64_t draft_tier[IFD_WIRE_MAX_TIER_CTRS];
    uint32_t n_draft_tier;
} ifd_worker_info_t;

typedef struct {
    const char *worker_binary;
    const char *model_path;
    const char *log_level; /* passed to the workers' --log-level */
    const char *weights_dtype; /* passed to the workers' --weights-dtype (NULL: theirs) */
    int n_workers;
    int n_threads; /* per worker; 0: the worker decides */
    /* GPU workers: NULL / "cpu" for CPU workers, else "cuda" or "cuda-f32"
     * (HELLO's backend). Worker i then runs on GPU gpus[i] (n_workers
     * entries): CUDA_VISIBLE_DEVICES=gpus[i] in its environment, HELLO's
     * device gpus[i], and the pool's device i as its kv_device. */
    const char *backend;
    const int *gpus;
    /* Random weights in this shape file (NULL: the model's own), passed to
     * the workers as --random-weights / --weights-seed. */
    const char *random_weights;
    uint64_t weights_seed;
    /* The KV pool's disk tier (docs/kvpool.md), passed to the workers as
     * --kv-cache-dir / --kv-cache-disk-bytes; NULL or "": none. */
    const char *kv_cache_dir;
    uint64_t kv_cache_disk_bytes;
    /* The host-RAM tier of GPU workers (docs/kvpool.md, "Host tier"),
     * passed as --kv-cache-host-bytes when > 0. */
    uint64_t kv_cache_host_bytes;
    /* The tiers' pinned ring of a GPU worker (docs/kvpool.md, "Host tier"),
     * passed as --kv-cache-pin-slots N when >= 0 (0: synchronous copies);
     * < 0: not passed (the worker's default, 32). */
    int32_t kv_cache_pin_slots;
    uint32_t max_seqs;
    uint32_t max_batched_tokens;
    int32_t prefill_cap; /* 0 the engine's adaptive cap, < 0 off, > 0 fixed (engine.h) */
    ifd_wire_spec_t spec; /* speculative decoding for requests that do not choose (HELLO) */
    const char *draft_model_path; /* the draft model (HELLO), or NULL */
    uint32_t draft_step_tokens;   /* the workers' --draft-step-tokens; 0: theirs */
    const char *mmproj_path;      /* the vision tower's mmproj GGUF (HELLO), or NULL */
    uint32_t image_cache_mb;      /* the workers' --image-cache-mb; 0: theirs */
    uint32_t vision_step_ms;      /* the workers' --vision-step-ms; 0: theirs */
    int64_t max_logprobs; /* the workers' --max-logprobs (their pool sizing's warm-up); 0: theirs */
    /* the pool's geometry; while sizing, n_blocks is 0 (set by ifd_sup_set_pool) */
    ifd_wire_kv_geometry_t kv;
    /* NULL until ifd_sup_set_pool (which must come before ifd_sup_start
     * unless size_pool) */
    ifd_kvpool_t *pool;
    /* The POOL step (GPU workers): the first start of every worker is a
     * size_pool HELLO with these sizing inputs (max_seqs, max_batched_tokens
     * and kv above too) */
    bool size_pool;
    double gpu_memory_fraction;
    uint32_t max_model_len; /* 0: the model's context */
    /* the local (sliding-window) layers' pool, host memory, or NULL: sent
     * with HELLO after the pool's fds and reclaimed with it */
    ifd_kvpool_t *local_pool;
    double ping_interval_s;
    double timeout_s;
    double start_timeout_s;
    double backoff_s;
    double backoff_max_s;
    int crash_loop_limit;
    double crash_loop_window_s;
    double crash_loop_backoff_s;     /* first retry of a worker in a crash loop */
    double crash_loop_backoff_max_s; /* the retry delay doubles per loop up to this */
} ifd_sup_params_t;

typedef struct {
    void *ctx;
    void (*on_ready)(void *ctx, int w);
    /* TOKENS, FINISHED, ERROR (with an id). The message is freed after the call. */
    void (*on_message)(void *ctx, int w, const ifd_wire_msg_t *m);
    /* The worker's requests are gone (it died or is being killed). Called
     * once per run of the process, before any restart. */
    void (*on_lost)(void *ctx, int w);
    /* A worker reached FAILED (crash loop). */
    void (*on_failed)(void *ctx, int w);
    /* Every worker process has exited after ifd_sup_stop. */
    void (*on_stopped)(void *ctx);
    /* The POOL step: every worker's POOL_SIZE, sizes[w] for worker w
     * (n_workers of them; strings borrowed for the call). Once. */
    void (*on_pool_sizes)(void *ctx, const ifd_wire_pool_size_t *sizes, int n);
    /* The POOL step failed for worker w: why is the start's one error line
     * ("GPU 0: ..."). Once, and then neither callback again. */
    void (*on_pool_failed)(void *ctx, int w, const char *why);
} ifd_sup_callbacks_t;

typedef struct ifd_sup ifd_sup_t;

/* 0, IFD_EINVAL, IFD_ENOMEM. Starts nothing yet. */
int ifd_sup_create(ifd_sup_t **out, uv_loop_t *loop, const ifd_sup_params_t *p,
                   const ifd_sup_callbacks_t *cb, ifd_metrics_t *metrics);

/* Spawns every worker (with size_pool: for the POOL step). 0; a spawn
 * failure is handled like a crash (while sizing: on_pool_failed).
 * IFD_EINVAL without a pool and without size_pool. */
int ifd_sup_start(ifd_sup_t *s);

/* The pool exists: pool (and the local layers' pool, or NULL) for HELLO,
 * reclaims and fd adoption from now on, kv its geometry (the chosen
 * n_blocks). Workers waiting in SIZING get POOL with the pool's fds and
 * move to STARTING. Call once: before ifd_sup_start, or after
 * on_pool_sizes. 0, IFD_EINVAL (called twice, or before sizing ended); a
 * worker POOL cannot be sent to is killed (a crash, restarted). The pools
 * are borrowed for the supervisor's life. */
int ifd_sup_set_pool(ifd_sup_t *s, ifd_kvpool_t *pool, ifd_kvpool_t *local_pool,
                     const ifd_wire_kv_geometry_t *kv);

/* Sends one frame to worker w. 0, IFD_ECLOSED (not connected), IFD_EINVAL
 * (encoding refused; logged), IFD_ENOMEM. */
int ifd_sup_send(ifd_sup_t *s, int w, const ifd_wire_msg_t *m);

/* The router's way to the workers (router.h), over this supervisor: ctx is
 * s, n_workers its slots; worker reports READY as ready (with max_seqs,
 * unresponsive and kv_device from ifd_worker_info_t), send is ifd_sup_send,
 * kill ifd_sup_kill (which calls on_lost before it returns), all_failed
 * ifd_sup_all_failed. Valid while s lives. */
ifd_router_transport_t ifd_sup_transport(ifd_sup_t *s);

int ifd_sup_n_workers(const ifd_sup_t *s);
const ifd_worker_info_t *ifd_sup_worker(const ifd_sup_t *s, int w);

/* Counts by state (READY, STARTING + DOWN, FAILED). */
void ifd_sup_counts(const ifd_sup_t *s, int *ready, int *starting, int *down, int *failed);

/* True when no worker is READY, STARTING or DOWN (all FAILED/STOPPED). */
bool ifd_sup_all_failed(const ifd_sup_t *s);

/* New timings (SIGHUP): ping, timeouts, back-off, crash loop. */
void ifd_sup_set_timing(ifd_sup_t *s, const ifd_sup_params_t *p);

/* SIGHUP's log_level for the workers: running ones get a LOG_LEVEL frame,
 * later starts the --log-level flag. IFD_EINVAL for a bad name. */
int ifd_sup_set_log_level(ifd_sup_t *s, const char *level);

/* Shuts every worker down: SHUTDOWN, then SIGKILL after grace_s; no
 * restarts. on_stopped fires once all processes have exited. */
void ifd_sup_stop(ifd_sup_t *s, double grace_s);

/* SIGKILLs worker w now (tests and the liveness check). */
void ifd_sup_kill(ifd_sup_t *s, int w, const char *why);

/* Closes every handle; frees the supervisor once they are closed.
 * Processes still running are SIGKILLed. */
void ifd_sup_destroy(ifd_sup_t *s);

#endif
