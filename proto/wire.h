/*
 * wire.h — the router↔worker protocol: message structs, their msgpack
 * encoding inside fixed-header frames, and a streaming frame reader.
 *
 * Pure functions, no I/O: the caller moves the bytes (a socketpair per
 * worker; file descriptors travel beside a frame through SCM_RIGHTS, see
 * common/fdpass.h). proto/README.md documents the schema as a table.
 *
 * Frame = header (IFD_WIRE_HEADER_SIZE bytes, big-endian) + body:
 *
 *     offset 0  u32  magic    IFD_WIRE_MAGIC ("IFDW")
 *     offset 4  u16  version  IFD_WIRE_VERSION
 *     offset 6  u16  type     an ifd_wire_type_t
 *     offset 8  u32  length   body bytes, <= IFD_WIRE_MAX_BODY
 *
 * The body is one msgpack array holding the message's fields in the order
 * of its table (wire.c), exactly that many elements; nested structs are
 * nested arrays; strings are msgpack str; integer fields take any msgpack
 * integer encoding that fits; float fields take float32 or float64. Nothing
 * may follow the array inside the body.
 *
 * Invariants the decoder enforces before it allocates anything: magic,
 * version, a known type, length <= the cap, and for every array a count no
 * larger than its field's limit and than the bytes left in the body. It
 * never reads outside the bytes it is given. Every failure returns a
 * negative IFD_E* code (IFD_ETRUNC, IFD_EFORMAT, IFD_ETYPE, IFD_ERANGE,
 * IFD_ETOOBIG, IFD_EVERSION, IFD_ENOMEM) and, when the caller passes a
 * buffer, a message naming the field ("add.sampling.logit_bias[3].bias:
 * expected float, got str").
 *
 * Ownership: a message being encoded is only read (its pointers are
 * borrowed for the call). A decoded message owns every string and array it
 * points to (malloc'ed); free them all with ifd_wire_msg_free. A failed
 * decode leaves nothing allocated and the message zeroed.
 *
 * Threading: every function here is reentrant; a reader belongs to one
 * thread at a time.
 */
#ifndef IFD_WIRE_H
#define IFD_WIRE_H

#include "arena.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define IFD_WIRE_MAGIC       0x49464457u /* "IFDW" */
#define IFD_WIRE_VERSION     15
#define IFD_WIRE_HEADER_SIZE 12

/* Limits, checked by encoder and decoder alike. */
#define IFD_WIRE_MAX_BODY       (32u << 20) /* bytes of one frame body */
#define IFD_WIRE_MAX_TOKENS     (1u << 22)  /* token ids in one add request */
#define IFD_WIRE_MAX_STR        4096u       /* bytes of one string (paths, messages) */
#define IFD_WIRE_MAX_EVENTS     (1u << 16)  /* token events in one TOKENS frame */
#define IFD_WIRE_MAX_STOP_IDS   1024u       /* stop token ids of one request */
#define IFD_WIRE_MAX_LOGIT_BIAS (1u << 20)  /* logit_bias entries of one request */
#define IFD_WIRE_MAX_ALLOWED    (1u << 20)  /* allowed_token_ids of one request */
#define IFD_WIRE_MAX_TOP        (1u << 20)  /* top logprobs of one token: a vocabulary (v13) */
#define IFD_WIRE_MAX_LP_IDS     (1u << 20)  /* logprob_token_ids of one request (v14) */
#define IFD_WIRE_TOP_BYTES      11u         /* the most one encoded ifd_wire_top_t takes */
#define IFD_WIRE_MAX_GRAMMAR    (1u << 22)  /* words of one request's compiled grammar */
#define IFD_WIRE_MAX_SPEC_TOKENS 16u         /* proposed tokens per step (speculative decoding) */
#define IFD_WIRE_MAX_SPEC_NGRAM  16u         /* the n-gram proposer's longest n */
#define IFD_WIRE_MAX_TIER_CTRS   64u         /* counters of a KV pool's lower tiers (STATS, v15) */
#define IFD_WIRE_MAX_IMAGES      64u         /* images (pictures) of one add request */
#define IFD_WIRE_MAX_IMAGE_SIDE  4096u       /* a picture's width or height */

/* Who sends a message. */
typedef enum {
    IFD_WIRE_TO_WORKER = 1, /* router → worker */
    IFD_WIRE_TO_ROUTER = 2, /* worker → router */
} ifd_wire_dir_t;

/*
 * The message types, defined once: X(NAME, code, direction, union member).
 * Codes are part of the protocol: never renumber, only add (and bump
 * IFD_WIRE_VERSION when a body changes).
 */
#define IFD_WIRE_MESSAGES(X)                                                                       \
    X(HELLO, 1, IFD_WIRE_TO_WORKER, hello)                                                         \
    X(ADD, 2, IFD_WIRE_TO_WORKER, add)                                                             \
    X(CANCEL, 3, IFD_WIRE_TO_WORKER, cancel)                                                       \
    X(STATS_REQ, 4, IFD_WIRE_TO_WORKER, stats_req)                                                 \
    X(DRAIN, 5, IFD_WIRE_TO_WORKER, drain)                                                         \
    X(SHUTDOWN, 6, IFD_WIRE_TO_WORKER, shutdown)                                                   \
    X(LOG_LEVEL, 7, IFD_WIRE_TO_WORKER, log_level)                                                 \
    X(POOL, 8, IFD_WIRE_TO_WORKER, pool)                                                           \
    X(READY, 65, IFD_WIRE_TO_ROUTER, ready)                                                        \
    X(TOKENS, 66, IFD_WIRE_TO_ROUTER, tokens)                                                      \
    X(FINISHED, 67, IFD_WIRE_TO_ROUTER, finished)                                                  \
    X(ERROR, 68, IFD_WIRE_TO_ROUTER, error)                                                        \
    X(STATS, 69, IFD_WIRE_TO_ROUTER, stats)                                                        \
    X(PROMPT_LOGPROBS, 70, IFD_WIRE_TO_ROUTER, prompt_logprobs)                                    \
    X(POOL_SIZE, 71, IFD_WIRE_TO_ROUTER, pool_size)

typedef enum {
#define IFD__WIRE_ENUM(name, code, dir, member) IFD_WIRE_##name = (code),
    IFD_WIRE_MESSAGES(IFD__WIRE_ENUM)
#undef IFD__WIRE_ENUM
} ifd_wire_type_t;

/* KV pool geometry as both sides must agree on it (common/kvpool/kvpool.h). */
typedef struct {
    uint32_t n_layers;
    uint32_t n_kv_heads;
    uint32_t head_dim;
    uint32_t dtype;      /* ifd_kv_dtype_t: 0 f32, 1 f16, 2 bf16, 3 q8_0, 4 q4_0, 5 fp8 */
    uint32_t block_size; /* tokens per block */
    uint64_t n_blocks;   /* blocks per device */
    uint64_t fingerprint;
} ifd_wire_kv_geometry_t;

/* Speculative decoding (docs/speculative.md; the engine's
 * ifd_spec_params_t): method 0 the worker's setting (in an ADD), 1 off,
 * 2 n-gram, 3 the draft model (HELLO's draft_model_path); num_tokens (k),
 * ngram_min, ngram_max 0: the worker's. Version 10 (3: version 11). */
typedef struct {
    uint32_t method;
    uint32_t num_tokens;
    uint32_t ngram_min;
    uint32_t ngram_max;
} ifd_wire_spec_t;

/* HELLO (router → worker, first frame): the worker's configuration. The
 * pool's fds travel with this frame (SCM_RIGHTS): the metadata fd first,
 * then the data fd of kv_device when the router has one (a host memfd, or a
 * CUDA VMM segment's fd adopted from an earlier worker's READY); n_fds says
 * how many were sent in all. The last n_local_fds (0, 1 or 2) of them are
 * the local (sliding-window) layers' pool's, in the same order (its
 * metadata fd, then its data fd of kv_device when the router has one): the
 * pool then holds the model's global layers only (docs/models.md, "Gemma 3
 * local layers"). */
typedef struct {
    uint32_t slot; /* worker slot id: its ledger index in the pool */
    char *model_path;
    char *backend;               /* "cpu" | "cuda" | "cuda-f32" (exact f32 mode) */
    int32_t device;              /* the GPU's id (names, logs; the worker uses device 0 of
                                  * its CUDA_VISIBLE_DEVICES); -1 for the CPU backend */
    uint32_t kv_device;          /* the pool data segment this worker computes on */
    uint32_t n_threads;          /* CPU threads; 0: the worker decides */
    uint32_t max_seqs;           /* 0: the worker's default */
    uint32_t max_batched_tokens; /* 0: the worker's default */
    int32_t prefill_cap;         /* engine prefill_cap: 0 adaptive, < 0 off, > 0 fixed */
    uint32_t n_fds;
    uint32_t n_local_fds;
    ifd_wire_kv_geometry_t kv;
    /* The POOL step (version 6): true for the first worker of each GPU,
     * started before the pool exists. HELLO then has no fds (n_fds 0) and
     * kv.n_blocks 0 (the rest of kv is the pool's geometry); the worker
     * loads the weights, runs the sizing warm-up (worker/kvprobe.h) with
     * the engine's max_seqs / max_batched_tokens, contexts up to
     * max_model_len (0: the model's) and kv's dtype and block_size, answers
     * POOL_SIZE (or ERROR id 0 with the reason) and waits for POOL. */
    bool size_pool;
    double gpu_memory_fraction; /* (0, 1]: the share of the device for everything */
    uint32_t max_model_len;     /* 0: the model's context */
    ifd_wire_spec_t spec;       /* the daemon's speculation setting (method 0: off) */
    /* The draft model of speculative decoding (spec method 3; version 11):
     * loaded by the worker beside the model, its tokenizer checked against
     * the model's (worker/spec_draft.h). NULL or "": none. */
    char *draft_model_path;
    /* llama.cpp's mmproj GGUF beside a GGUF text model (issue 28; version
     * 12): the vision tower the worker loads (worker/vision.h). NULL or "":
     * none (a Hugging Face directory brings its tower itself). */
    char *mmproj_path;
} ifd_wire_hello_t;

/* POOL_SIZE (worker → router, after a size_pool HELLO): what the device
 * has left for KV after the weights and the measured warm-up (the fields of
 * `inferd-worker --kv-probe`'s JSON). usable_bytes = fraction × total −
 * (total − free) − margin; n_blocks = usable_bytes / block_bytes (≥ 1: a
 * worker that fits no block sends ERROR instead). A model with
 * sliding-window layers splits usable_bytes between its two pools
 * (daemon/main.c, ifd__size_local_pool). With a draft model (HELLO's
 * draft_model_path) weight_bytes and activation_bytes are both models',
 * n_blocks what fits of a block of each pool, and usable_bytes the model's
 * share, the draft's n_blocks blocks set aside (worker/kvprobe.h); the
 * encoding is unchanged. */
typedef struct {
    uint64_t n_blocks;
    uint64_t usable_bytes;
    uint64_t block_bytes; /* one block in every layer, K and V */
    uint64_t total_bytes;
    uint64_t free_bytes; /* after the weights and the warm-up (its scratch KV freed) */
    uint64_t weight_bytes;
    uint64_t activation_bytes;
    uint64_t graph_bytes;
    uint64_t margin_bytes;
    uint32_t n_graphs;
    char *device; /* the device's description, e.g. "NVIDIA H200 (…)" */
} ifd_wire_pool_size_t;

/* POOL (router → worker, answering POOL_SIZE): the pool exists. Its fds
 * travel with this frame as with HELLO (metadata fd first; n_fds of them,
 * the last n_local_fds the local layers' pool's); kv is the pool's geometry
 * with the n_blocks the router chose (the smallest over the GPUs). The
 * worker attaches, binds its device segments and answers READY as after a
 * plain HELLO. */
typedef struct {
    uint32_t n_fds;
    uint32_t n_local_fds;
    ifd_wire_kv_geometry_t kv;
} ifd_wire_pool_t;

/* One logit_bias entry (the worker's sampler uses this type too: ifd_logit_bias_t). */
typedef struct {
    int32_t id;
    float bias;
} ifd_wire_logit_bias_t;

/* Mirrors ifd_sampling_params_t (worker/sampler.h), whose documentation
 * gives each field's meaning and range; the worker checks the ranges with
 * ifd_sampling_params_check, the decoder only the shapes. */
typedef struct {
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
    float repetition_penalty;
    float frequency_penalty;
    float presence_penalty;
    const ifd_wire_logit_bias_t *logit_bias; /* n_logit_bias entries */
    uint32_t n_logit_bias;
    int32_t n_logprobs;     /* -1 none, 0 the chosen token's, 1..20 also top ones */
    uint32_t logprobs_mode; /* ifd_logprobs_mode_t: 0 raw, 1 processed */
    uint64_t seed;
} ifd_wire_sampling_t;

/* One picture of an ADD (version 12; docs/vision.md): the image processor's
 * first half as the router ran it (common/image/preprocess.h,
 * ifd_image_prep_resize: one whole image or one pan-and-scan crop, resized
 * to the READY's vision height × width, RGB u8 row-major), and the prompt
 * tokens its embedding rows replace: tokens[pos .. pos + n_tokens) (the
 * model's image soft tokens, n_tokens = vision.tokens_per_image). hash is a
 * 128-bit content hash of the pixels (the router's): the worker's
 * embedding cache and the prefix cache's keys use it, so it must be the
 * same for the same pixels and differ for different ones. Images come in
 * prompt order and never overlap. */
typedef struct {
    uint32_t pos;
    uint32_t n_tokens;
    uint64_t hash_lo, hash_hi;
    uint32_t width, height;
    const uint8_t *pixels; /* n_pixels = width × height × 3 bytes */
    uint32_t n_pixels;
} ifd_wire_image_t;

/* ADD (router → worker): start (or resume) a request. tokens holds the
 * prompt followed by the n_generated tokens already streamed to the client
 * (a request re-dispatched after a worker crash); the worker treats those
 * as generated for penalties, positions and max_tokens. */
typedef struct {
    uint64_t id;     /* nonzero, unique per router */
    const int32_t *tokens; /* n_tokens >= 1 */
    uint32_t n_tokens;
    uint32_t n_generated; /* <= n_tokens - 1 */
    ifd_wire_sampling_t sampling;
    const int32_t *stop_ids; /* n_stop_ids extra stop tokens (EOS is implicit) */
    uint32_t n_stop_ids;
    uint32_t max_tokens; /* completion tokens in all, n_generated included; >= 1 */
    bool ignore_eos;
    /* Higher runs first, FCFS among equals, 0 normal: the engine's order, the
     * one convention past the API. The API's field (vLLM's: lower first) is
     * converted once, by ifd_wire_priority_from_api. */
    int32_t priority;
    bool use_cache;   /* false: no KV cache (recompute every step), no prefix cache */
    /* Structured output: the grammar the generated bytes must follow, as the
     * router compiled it (ifd_grammar_serialize's words: compiled once, off
     * the router's loop, and loaded — not compiled — by the worker); none
     * when n_grammar is 0. Up to IFD_WIRE_MAX_GRAMMAR words. Version 8
     * (grammar text before). */
    const int32_t *grammar;
    uint32_t n_grammar;
    /* vLLM's min_tokens: EOS and stop_ids are not sampled before this many
     * tokens were generated (n_generated included); 0 off. Version 3. */
    uint32_t min_tokens;
    /* vLLM's prompt_logprobs: 0 off; 1 + k (k <= IFD_WIRE_MAX_TOP, the
     * vocabulary's size at most since version 13): every
     * prompt token's logprob, rank and k top alternatives come back in
     * PROMPT_LOGPROBS frames before the request's first token. Version 5. */
    uint32_t prompt_logprobs;
    /* The client the request came from, as a number (daemon/gen.c,
     * ifd__client_id: a hash of who the client is — its uid on the Unix
     * socket): equal for every request of one client, and only compared.
     * The engine shares its running slots between clients by it (engine.h,
     * "Fairness"); every request of client 0 alone is today's engine.
     * Version 9. */
    uint32_t client;
    /* vLLM's allowed_token_ids: every draw among these ids only (the
     * worker masks the others out before sampling; an id outside the
     * vocabulary fails the request); none when n_allowed_ids is 0. Up to
     * IFD_WIRE_MAX_ALLOWED ids. Version 10. */
    const int32_t *allowed_ids;
    uint32_t n_allowed_ids;
    /* vLLM's logprob_token_ids: with sampling.n_logprobs >= 0, each token's
     * top logprobs are these ids' (in this order) instead of the top k; up
     * to IFD_WIRE_MAX_LP_IDS (20 before version 14). Version 10. */
    const int32_t *lp_ids;
    uint32_t n_lp_ids;
    /* The request's speculative decoding (method 0: the worker's setting).
     * Version 10. */
    ifd_wire_spec_t spec;
    /* The request's pictures (version 12), up to IFD_WIRE_MAX_IMAGES, and
     * in all below IFD_WIRE_MAX_BODY (an 896² picture is 2.3 MiB: at most
     * 13 fit one frame). The worker refuses images when it has no vision
     * tower or they do not fit its tower's size. */
    const ifd_wire_image_t *images;
    uint32_t n_images;
} ifd_wire_add_t;

/* The wire's priority (higher first) of an API request's vLLM priority
 * (lower first). Pure. */
static inline int32_t ifd_wire_priority_from_api(int32_t api_priority)
{
    return api_priority == INT32_MIN ? INT32_MAX : -api_priority;
}

/* CANCEL (router → worker): drop a request in any state. */
typedef struct {
    uint64_t id;
} ifd_wire_cancel_t;

/* STATS_REQ (router → worker): ask for a STATS frame echoing seq. */
typedef struct {
    uint64_t seq;
} ifd_wire_stats_req_t;

/* LOG_LEVEL (router → worker): the log level to use from now on (the
 * daemon's log_level after a SIGHUP): ifd_log_level_t, 0 error .. 3 debug. */
typedef struct {
    uint32_t level;
} ifd_wire_log_level_t;

/* DRAIN and SHUTDOWN carry no fields (an empty array). DRAIN: finish what
 * runs, admit nothing new. SHUTDOWN: exit now. */
typedef struct {
    uint8_t unused_;
} ifd_wire_empty_t;

/* What a worker's vision tower wants (READY, version 12): tokens_per_image
 * 0 means the model takes no images. The rest is what the router needs to
 * expand an image placeholder and to make the pictures: the special ids
 * (<start_of_image>, <end_of_image>, the image soft token) and the
 * processor's first half (preprocessor_config.json, or an mmproj's
 * metadata): the pictures' size, PIL's resample filter number, pan-and-scan.
 * Rescale, mean and std stay in the worker (it normalizes). */
typedef struct {
    uint32_t tokens_per_image;
    int32_t boi_id, eoi_id, image_id;
    uint32_t height, width;
    uint32_t resample;
    bool do_pan_and_scan;
    uint32_t pas_min_crop_size;
    uint32_t pas_max_num_crops;
    double pas_min_ratio;
} ifd_wire_vision_t;

/* READY (worker → router): the model is loaded and the pool attached. */
typedef struct {
    uint32_t slot;
    int32_t pid;
    char *model_name;
    char *arch; /* "llama", "gemma3", … */
    uint32_t n_vocab;
    uint32_t n_ctx;    /* context length the worker serves */
    char *backend;     /* as running: "cpu" | "cuda" */
    char *device_name; /* e.g. "NVIDIA H100", "cpu (16 threads)" */
    uint32_t max_seqs;
    uint32_t max_batched_tokens;
    ifd_wire_kv_geometry_t kv;
    ifd_wire_vision_t vision; /* version 12 */
} ifd_wire_ready_t;

/* One alternative in a token's top logprobs. */
typedef struct {
    int32_t token;
    float logprob;
} ifd_wire_top_t;

/* One sampled token of one request. */
typedef struct {
    uint64_t id;
    int32_t token;
    bool has_logprob;    /* logprob and top are meaningful */
    float logprob;       /* of token; may be -inf */
    /* n_top <= IFD_WIRE_MAX_TOP entries, most probable first (more than 20
     * since version 13: a sender keeps a frame under IFD_WIRE_MAX_BODY by
     * splitting the step's events over several TOKENS frames) */
    ifd_wire_top_t *top;
    uint32_t n_top;
} ifd_wire_token_t;

/* One prompt token's logprob (PROMPT_LOGPROBS). */
typedef struct {
    int32_t token;       /* the prompt token */
    float logprob;       /* its raw logprob; may be -inf */
    uint32_t rank;       /* 1 + tokens at least as probable (vLLM's rank) */
    ifd_wire_top_t *top; /* n_top <= IFD_WIRE_MAX_TOP, most probable first (v13) */
    uint32_t n_top;
} ifd_wire_plp_t;

/* PROMPT_LOGPROBS (worker → router): prompt logprobs of request id (one
 * prefill chunk's, or a part of it when the chunk's top alternatives would
 * pass IFD_WIRE_MAX_BODY: version 13), for prompt positions
 * pos .. pos + n_entries - 1
 * (pos >= 1: position 0 has none). Every position comes once, in order,
 * before the request's first TOKENS event (a resumed request may repeat
 * them: the router keeps the first). Version 5. */
typedef struct {
    uint64_t id;
    uint32_t pos;
    ifd_wire_plp_t *entries; /* 1 .. IFD_WIRE_MAX_EVENTS */
    uint32_t n_entries;
} ifd_wire_prompt_logprobs_t;

/* TOKENS (worker → router): tokens one engine step produced (a step's
 * events may span several frames, each under IFD_WIRE_MAX_BODY). */
typedef struct {
    uint64_t step;
    ifd_wire_token_t *events; /* n_events >= 1 */
    uint32_t n_events;
} ifd_wire_tokens_t;

typedef enum {
    IFD_WIRE_FINISH_STOP = 0,      /* EOS or a stop token */
    IFD_WIRE_FINISH_LENGTH = 1,    /* max_tokens or the context length */
    IFD_WIRE_FINISH_CANCELLED = 2, /* a CANCEL arrived */
    IFD_WIRE_FINISH_ERROR = 3,     /* an ERROR frame with this id precedes it */
} ifd_wire_finish_t;
#define IFD_WIRE_FINISH_COUNT 4

/* FINISHED (worker → router): the request is over and its blocks released
 * (full ones published to the prefix cache). No event for it follows. */
typedef struct {
    uint64_t id;
    uint32_t reason;            /* ifd_wire_finish_t */
    int32_t stop_token;         /* the token that stopped it; -1 if none */
    uint32_t prompt_tokens;     /* prompt length (without resumed tokens) */
    uint32_t completion_tokens; /* all generated, resumed ones included */
    uint32_t cached_tokens;     /* prompt tokens served from the prefix cache */
} ifd_wire_finished_t;

/* ERROR (worker → router): id 0 concerns the worker, else that request. */
typedef struct {
    uint64_t id;
    int32_t code; /* IFD_E* or -errno */
    char *message;
} ifd_wire_error_t;

/* Steps by batched tokens (STATS.step_tokens), in the buckets of vLLM's
 * vllm:iteration_tokens_total without CUDA graphs (vllm/v1/metrics/
 * loggers.py, build_cudagraph_buckets with enforce_eager: its 8096 too):
 * upper bounds; n[i] counts the steps of at most bound i tokens and more
 * than bound i-1, the last one those above every bound. The worker counts,
 * the router renders: both read this one list. */
#define IFD_WIRE_STEP_TOKEN_BOUNDS 1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8096
#define IFD_WIRE_STEP_BUCKETS      13 /* the bounds and +Inf */

typedef struct {
    uint64_t n[IFD_WIRE_STEP_BUCKETS];
} ifd_wire_step_hist_t;
/* One counter of an array of them (STATS). */
typedef struct {
    uint64_t n;
} ifd_wire_count_t;

/* STATS (worker → router). Gauges are current values; counters run from the
 * worker's start; rates/averages are the worker's own recent window. */
typedef struct {
    uint64_t seq; /* from the STATS_REQ; 0 when unsolicited */
    uint32_t running;
    uint32_t waiting;
    uint64_t kv_blocks_in_use; /* held by this worker's sequences */
    uint64_t kv_blocks_total;  /* of its device */
    uint64_t steps;
    uint64_t prefill_tokens;
    uint64_t decode_tokens;
    double tokens_per_step; /* recent mean */
    double batch_occupancy; /* recent mean of step tokens / max_batched_tokens */
    uint64_t prefix_query_tokens;
    uint64_t prefix_hit_tokens;
    double prefix_hit_rate; /* hit / query tokens, 0 when none */
    uint64_t preemptions;
    uint64_t forward_ns; /* time split of all steps */
    uint64_t sampling_ns;
    uint64_t scheduling_ns;
    uint64_t kv_local_releasable_blocks; /* held blocks no sliding-window layer reads again */
    uint64_t kv_local_releasable_bytes;  /* their local-layer K/V (still allocated) */
    /* with a local-layer pool: held blocks whose local-layer K/V went back to
     * that pool, and those bytes (memory saved; version 5) */
    uint64_t kv_local_released_blocks;
    uint64_t kv_local_released_bytes;
    ifd_wire_step_hist_t step_tokens; /* steps by batched tokens (version 10) */
    /* Speculative decoding counters (version 10; the engine's spec_*):
     * verifications, proposed tokens, accepted ones, and per proposal
     * position how many verifications accepted it (n_spec_per_pos <=
     * IFD_WIRE_MAX_SPEC_TOKENS entries). */
    uint64_t spec_drafts;
    uint64_t spec_draft_tokens;
    uint64_t spec_accepted_tokens;
    ifd_wire_count_t *spec_accepted_per_pos;
    uint32_t n_spec_per_pos;
    /* The draft model's own KV pool's lower-tier counters (version 15;
     * docs/speculative.md, "The draft's tiers"): its disk and host-RAM
     * tiers', in the order of kvpool.h's ifd_kvtier_ctr_t (the worker's
     * ifd_kvpool_tier_get over the draft's private pool, which the router
     * cannot map); n_draft_tier <= IFD_WIRE_MAX_TIER_CTRS, 0 when the worker
     * has no draft tier. Counters run from the worker's start, gauges are
     * the worker's current values. */
    ifd_wire_count_t *draft_tier;
    uint32_t n_draft_tier;
} ifd_wire_stats_t;

typedef struct {
    ifd_wire_type_t type;
    union {
        ifd_wire_hello_t hello;
        ifd_wire_add_t add;
        ifd_wire_cancel_t cancel;
        ifd_wire_stats_req_t stats_req;
        ifd_wire_empty_t drain;
        ifd_wire_empty_t shutdown;
        ifd_wire_log_level_t log_level;
        ifd_wire_pool_t pool;
        ifd_wire_ready_t ready;
        ifd_wire_tokens_t tokens;
        ifd_wire_finished_t finished;
        ifd_wire_error_t error;
        ifd_wire_stats_t stats;
        ifd_wire_prompt_logprobs_t prompt_logprobs;
        ifd_wire_pool_size_t pool_size;
    } u;
} ifd_wire_msg_t;

typedef struct {
    uint16_t version;
    uint16_t type;
    uint32_t length; /* body bytes */
} ifd_wire_header_t;

/* "add", "tokens", …; NULL for an unknown type. */
const char *ifd_wire_type_name(int type);

/* The direction of a known type; 0 for an unknown one. */
int ifd_wire_type_dir(int type);

/* Sampling parameters with the defaults of ifd_sampling_default_params():
 * temperature 1, top_p 1, repetition_penalty 1, n_logprobs -1, rest 0. */
ifd_wire_sampling_t ifd_wire_default_sampling(void);

/*
 * Appends one whole frame for msg to out. Checks what the decoder would
 * reject (known type, limits, n_generated < n_tokens, enums in range, …)
 * and returns IFD_EINVAL / IFD_ETOOBIG instead of writing such a frame;
 * IFD_ENOMEM. On error out->len is restored.
 */
int ifd_wire_encode(ifd_buf_t *out, const ifd_wire_msg_t *msg);

/*
 * Parses and checks a header from the first n bytes at p: IFD_ETRUNC when
 * n < IFD_WIRE_HEADER_SIZE, IFD_EFORMAT (bad magic, unknown type),
 * IFD_EVERSION, IFD_ETOOBIG (length > max_body; 0 means IFD_WIRE_MAX_BODY).
 * err (errlen bytes, may be NULL) receives a message on failure.
 */
int ifd_wire_decode_header(const void *p, size_t n, uint32_t max_body, ifd_wire_header_t *h,
                           char *err, size_t errlen);

/* Decodes a body of h->length bytes (h from ifd_wire_decode_header) into
 * *out (zeroed first). Errors as described at the top of this file. */
int ifd_wire_decode_body(const ifd_wire_header_t *h, const void *body, ifd_wire_msg_t *out,
                         char *err, size_t errlen);

/* Header + body from a contiguous buffer: decodes the frame at p (n bytes
 * available) and sets *consumed (may be NULL) to its size. IFD_ETRUNC when
 * the frame is not complete. */
int ifd_wire_decode(const void *p, size_t n, ifd_wire_msg_t *out, size_t *consumed, char *err,
                    size_t errlen);

/* Frees everything a decoded message owns and zeroes it (type kept).
 * NULL and zeroed messages are fine. Never call it on a message whose
 * pointers you own yourself. */
void ifd_wire_msg_free(ifd_wire_msg_t *msg);

/* ---- streaming frame reader --------------------------------------------------
 *
 * Accumulates bytes as they arrive (read(2), uv_read_cb) and yields whole
 * frames. It checks each header as soon as its 12 bytes are in, so a bad or
 * oversized frame is refused before its body is buffered. Framing errors
 * are sticky: the stream cannot be resynchronised and the caller should
 * drop the connection (for a worker: kill and restart it).
 */
typedef struct {
    ifd_buf_t buf;
    size_t off;        /* first unconsumed byte of buf */
    uint32_t max_body; /* the cap for this stream */
    int err;           /* sticky framing error, 0 when healthy */
    char errmsg[160];
} ifd_wire_reader_t;

/* A frame inside the reader: body points into the reader's buffer and is
 * valid until the next call of any reader function. */
typedef struct {
    ifd_wire_header_t hdr;
    const uint8_t *body;
} ifd_wire_frame_t;

/* max_body 0 or above IFD_WIRE_MAX_BODY means IFD_WIRE_MAX_BODY. Never fails. */
void ifd_wire_reader_init(ifd_wire_reader_t *r, uint32_t max_body);

/* Frees the buffer. */
void ifd_wire_reader_close(ifd_wire_reader_t *r);

/* Copies n bytes in. Returns 0, IFD_ENOMEM, or the sticky framing error
 * (the bytes are then dropped). */
int ifd_wire_reader_feed(ifd_wire_reader_t *r, const void *p, size_t n);

/* Zero-copy alternative to feed: returns room for at least `want` bytes
 * (*avail set to the room there is) to read(2) into, then commit the count
 * actually read. NULL on IFD_ENOMEM. */
void *ifd_wire_reader_prepare(ifd_wire_reader_t *r, size_t want, size_t *avail);
int ifd_wire_reader_commit(ifd_wire_reader_t *r, size_t n);

/* Next complete frame: 1 and *f set; 0 when more bytes are needed; a
 * negative (sticky) framing error otherwise. */
int ifd_wire_reader_next(ifd_wire_reader_t *r, ifd_wire_frame_t *f);

/*
 * Next frame decoded: 1 with *msg filled (free it with ifd_wire_msg_free),
 * 0 for more bytes, or a negative error. A body that fails to decode is
 * skipped and its error returned without making the reader sticky (the
 * framing is intact), so the caller may choose to go on.
 */
int ifd_wire_reader_next_msg(ifd_wire_reader_t *r, ifd_wire_msg_t *msg);

/* The message of the last error (framing or body), "" if none. */
const char *ifd_wire_reader_error(const ifd_wire_reader_t *r);

/* Bytes buffered and not yet returned as frames. */
size_t ifd_wire_reader_pending(const ifd_wire_reader_t *r);

#endif
