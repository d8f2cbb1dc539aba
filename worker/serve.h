/*
 * serve.h — the worker's serving loop (`inferd-worker --serve --fd N`): the
 * process the router spawns, one per device.
 *
 * Protocol (proto/wire.h): the router's first frame is HELLO with the KV
 * pool's fds attached (SCM_RIGHTS); the worker creates the backend HELLO
 * names ("cpu", or "cuda" / "cuda-f32" on device 0 of the
 * CUDA_VISIBLE_DEVICES the router set), loads the model (HELLO's path
 * unless overridden; or random weights in opts' shape with that path's
 * tokenizer, worker_model.h), attaches the pool, answers READY (backend and
 * device as running), then loops: it
 * reads frames without blocking between engine steps (sleeping in poll(2)
 * only when idle), runs one ifd_engine_step, and writes one TOKENS frame
 * per step followed by the FINISHED frames of that step. EOF on the socket
 * (the router is gone) or SHUTDOWN ends the loop; DRAIN refuses new
 * requests and ends the loop once the engine is idle.
 *
 * The POOL step (HELLO's size_pool, the first worker of each GPU, started
 * before the pool exists): HELLO has no fds; after loading the model the
 * worker sizes the pool (ifd_backend_factory_gpu_size, backend_factory.h:
 * the warm-up of kvprobe.h at the engine's limits, whose grown buffers the
 * engine then reuses), sends POOL_SIZE, and waits for POOL, which brings the pool's
 * fds and geometry; from there on as above. A failure before POOL_SIZE is
 * sent as ERROR id 0 only (not logged: the router prints it as the start's
 * one error line) and exits 1; SHUTDOWN or EOF while waiting exits 0.
 *
 * Disk tier: with kv_cache_dir the worker keeps the pool's blocks there too
 * (kvpool/kvdisk.h: files keyed by the model's fingerprint and the settings
 * that change K/V), handed to the engine; a tier that cannot start (a
 * directory it cannot make or open, device memory, a local-layer pool) is
 * one warning and the worker serves without it. A draft model (HELLO's
 * draft_model_path) gets tiers of its own (worker/spec_draft.h: a disk tier
 * in the same directory under a draft fingerprint; on a GPU worker with
 * kv_cache_host_bytes a host tier of as many blocks), and opts'
 * draft_step_tokens as its catch-up share of a step.
 *
 * Images (issue 28, serve_vision.h): the vision tower is loaded beside the
 * model (HELLO's mmproj_path, else the model directory's own) and READY
 * says what it takes; an ADD with pictures waits in serve_vision's queue
 * while its pictures are encoded, one bounded phase between engine steps
 * (so the running requests keep decoding), and enters the engine when all
 * have rows. A bad picture is an ERROR for that request only.
 *
 * Threading: single-threaded apart from the CPU backend's pool and the
 * disk tiers' I/O threads (the model's, the draft's).
 */
#ifndef IFD_SERVE_H
#define IFD_SERVE_H

#include "backend.h"

typedef struct {
    int fd;                 /* the socket to the router */
    const char *model_path; /* overrides HELLO's model_path when set */
    int n_threads;          /* overrides HELLO's n_threads when > 0 */
    ifd_weights_dtype_t weights; /* the CPU backend's weights (backend.h) */
    const char *shape;      /* random weights in this shape (worker_model.h); NULL: the model */
    uint64_t weights_seed;  /* their seed */
    const char *kv_cache_dir;     /* the pool's disk tier (kvpool/kvdisk.h); NULL: none */
    uint64_t kv_cache_disk_bytes; /* its size bound (> 0 with a dir) */
    const char *mmproj_path;      /* overrides HELLO's mmproj_path when set (serve_vision.h) */
    uint64_t image_cache_bytes;   /* the image embedding cache's bound; 0: the default */
    uint64_t kv_cache_host_bytes; /* the host-RAM tier's bound (kvpool/kvhost.h); 0: none */
    uint32_t vision_step_ms;      /* an encode's time per serve-loop iteration; 0: the default */
    double vision_step_flops;     /* > 0: a fixed FLOP budget per iteration instead */
    /* the router's max_logprobs (-1: the vocabulary; 0: OpenAI's 20): the
     * POOL step's warm-up grows the device sampler's buffers for it
     * (kvprobe.h) */
    int64_t max_logprobs;
    /* the draft model's catch-up tokens per engine step at most
     * (spec_draft.h step_tokens); 0: the engine's max_batched_tokens */
    int draft_step_tokens;
    int kv_copy_slots; /* the engine's copy_slots: the tiers' pinned ring (engine.h); 0: default */
} ifd_serve_opts_t;

/* Runs until shutdown. Returns the process exit status: 0 after SHUTDOWN,
 * DRAIN or the router closing the socket; 1 on a setup or protocol error
 * (logged, and reported to the router in an ERROR frame when possible). */
int ifd_worker_serve(const ifd_serve_opts_t *o);

#endif
