/*
 * backend.h — the compute backend interface the model code is written
 * against, once for every device: the CPU backend (backend_cpu.c) and the
 * CUDA backend (backend_cuda.c) implement the same table of operations. The
 * model code in worker/ never calls a device API directly.
 *
 * The interface is made of FUSED operations, the granularity a GPU wants (one
 * kernel or one GEMM each, no round trip through memory between the parts):
 *   load_weight / load_proj   weights from the file's bytes, stored as the
 *                             backend likes (f32 + packed on the CPU today,
 *                             bf16 on CUDA, quantized blocks later);
 *   embed                     token rows → residual stream;
 *   rmsnorm                   residual += delta, then y = RMSNorm(residual);
 *   proj                      y = x · Wᵀ (+ bias) for a projection made of
 *                             one or more parts (QKV, gate|up) over all
 *                             tokens of the step;
 *   rope_kv                   QKV output → (QK-norm) → RoPE on q and k → k and
 *                             v written into their KV-pool slots, q out;
 *   attention                 paged attention over a ragged batch; the
 *                             backend picks decode or prefill kernels;
 *   glu                       act(gate) * up from a fused gate|up output;
 *   gather_rows               the rows that need logits;
 *   layernorm, add_rows, gelu, dense_attention, avg_pool2d
 *                             the vision tower's (optional).
 *
 * Memory: every buffer handed to a compute op is backend memory (host memory
 * for the CPU backend, device memory for CUDA): activations are ifd_act_t
 * (pointer + dtype + shape) allocated with act_alloc; index arrays (tokens,
 * positions, slots, block tables) come from ops->alloc and are filled with
 * ops->upload. Weights are ifd_weight_t / ifd_proj_t made by load_weight /
 * load_proj from HOST bytes (the mapped GGUF, or generated random weights)
 * and freed with weight_free / proj_free. Ops are enqueued in order on one
 * stream; ops->sync waits for them; download is synchronous.
 *
 * Activation dtypes: the backend chooses them. The residual stream and
 * every projection output are f32 on every backend (ops->f32 role); the
 * inputs of a projection — the normed residual, the attention output, the
 * GLU output — have ops->mm_in_dtype (f32 on the CPU, bf16 on CUDA, where
 * the GEMMs read bf16 and accumulate in f32). The model code never reads or
 * writes activation memory itself.
 *
 * Batch invariance: for every op, the value of one output element must not
 * depend on the other rows of the batch (one summation order per output
 * element for every batch size). The engine's "batched equals alone" rests
 * on it; the CPU backend keeps it bit for bit.
 *
 * Threading: a backend is used by one thread at a time (the worker's engine
 * thread); it may use its own threads internally (the CPU thread pool).
 * Errors: ops return 0 or a negative IFD_E* code (IFD_ENOTSUP for a weight
 * type or shape the backend cannot handle, with a log line naming it).
 */
#ifndef IFD_BACKEND_H
#define IFD_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu/cpu_kernels.h"
#include "kvpool/kvpool.h"
#include "modelfile/ggml_types.h"
#include "sampler.h"

/* An activation buffer: backend memory holding rows × cols elements of
 * dtype, row-major, rows contiguous. `rows` is the capacity; ops take the
 * number of rows they use. */
typedef struct {
    void *data;
    ifd_dtype_t dtype;
    int64_t rows;
    int64_t cols;
} ifd_act_t;

/* A weight as stored by a backend: a matrix [rows, cols] (row-major: `rows`
 * outputs of `cols` inputs, the GGUF/PyTorch [out, in] convention) or a
 * vector (rows = 1). dtype is the ggml type of what the backend keeps
 * (F32, BF16, or a quantized block type such as Q4_K); `layout` and `aux`
 * are the backend's own (e.g. pre-packed panels). Only the backend that
 * made it reads data. */
typedef struct {
    void *data;            /* backend memory */
    ifd_ggml_type_t dtype; /* what is stored */
    int64_t rows;
    int64_t cols;
    int layout;            /* backend-private: 0 = plain row-major */
    void *aux;             /* backend-private, or NULL */
    uint64_t bytes;        /* backend memory held (for accounting) */
} ifd_weight_t;

/* Where a weight comes from: host bytes of `type` holding rows × cols
 * elements (packed ggml blocks along each row, as in a GGUF file). `name`
 * is for messages. Valid only for the duration of the load call. */
typedef struct {
    const char *name;
    const void *data;
    ifd_ggml_type_t type;
    int64_t rows;
    int64_t cols;
} ifd_weight_src_t;

/* What a loaded vector or matrix is for (the backend may store each kind
 * differently). */
typedef enum {
    IFD_WEIGHT_VECTOR = 0,    /* f32 vector used as is (rope frequency factors) */
    IFD_WEIGHT_NORM = 1,      /* RMSNorm weight w, applied as y = x̂ · w */
    IFD_WEIGHT_NORM_ADD1 = 2, /* RMSNorm weight applied as x̂ · (1 + w): Gemma in HF
                               * checkpoints. GGUF files store 1 + w already: their
                               * Gemma norms load as IFD_WEIGHT_NORM. */
    IFD_WEIGHT_EMBED = 3,     /* [vocab, dim] embedding table read by row */
} ifd_weight_use_t;

/*
 * A projection y = x · Wᵀ (+ b) whose output is the concatenation, in order,
 * of up to IFD_PROJ_MAX_PARTS parts (Q|K|V, gate|up; one part otherwise).
 * The backend decides at load how to keep it: one merged matrix when it can
 * (same stored type: one GEMM), or the parts side by side (e.g. a Q4_K_M
 * file's Q4_K attn_q next to a Q6_K attn_v) computed into their column
 * ranges of y. Biases are optional per part (Qwen 2's Q/K/V biases); a
 * projection without any has bias.data == NULL.
 */
#define IFD_PROJ_MAX_PARTS 3
typedef struct {
    int n_parts;                             /* as stored (after any merge) */
    ifd_weight_t part[IFD_PROJ_MAX_PARTS];   /* outputs part_row0[i] .. + part[i].rows */
    int64_t part_row0[IFD_PROJ_MAX_PARTS];
    ifd_weight_t bias;                       /* f32 [rows] or data NULL */
    int64_t rows;                            /* Σ part rows: columns of y */
    int64_t cols;                            /* inputs */
} ifd_proj_t;

/* The rotation of rope_kv: as ifd_cpu_rope's parameters. */
typedef struct {
    int n_rot;                 /* rotated dims per head: even, <= head_dim */
    float base;                /* theta base */
    float freq_scale;          /* 1 = none */
    const float *freq_factors; /* [n_rot / 2] backend memory, or NULL */
    ifd_rope_mode_t mode;      /* NORM (GGUF llama) or NEOX (Gemma, HF) */
} ifd_rope_t;

/*
 * The step's batch as attention sees it. Per token (backend memory):
 * seq[t] (index into block_tables rows; < 0 = padding) and pos[t]. When the
 * batch is "varlen" — tokens grouped by sequence in order 0..n_seqs-1, each
 * sequence's tokens consecutive positions ending at its last one (what the
 * engine builds) — cu_q and ctx_len describe it per sequence: sequence s
 * has query rows cu_q[s] .. cu_q[s + 1] - 1 and a context of ctx_len[s]
 * positions after the step; otherwise cu_q and ctx_len are NULL and a
 * backend must treat every token on its own (decode-style). Host scalars:
 * max_q_len (longest q run: 1 = decode only), max_ctx (most positions any
 * token attends to, before any window). workspace: backend memory of at
 * least ops->attn_workspace(...) bytes for split-K partials (NULL if 0).
 * last (backend memory, [n_tok], or NULL = pos): the last position each
 * token attends to — Gemma 3's image mask. Within a sequence, a token of an
 * image (a span of positions whose tokens attend to each other both ways)
 * has last = the image's last position, every other token its own; the
 * window (local layers) still starts from pos (docs/vision.md). The K/V of
 * positions up to last[t] must be written (the whole image is in this step
 * or earlier), and last is non-decreasing along a sequence's positions. A
 * batch with any last[t] > pos[t] is varlen with max_q_len > 1 (an image
 * never splits across steps, and a lone token's last is its pos).
 */
typedef struct {
    int n_tok;
    int n_seqs;
    const int32_t *seq;          /* [n_tok] */
    const int32_t *pos;          /* [n_tok] */
    const int32_t *block_tables; /* [n_seqs, max_blocks] */
    int max_blocks;
    const int32_t *cu_q;         /* [n_seqs + 1] or NULL */
    const int32_t *ctx_len;      /* [n_seqs] or NULL */
    int max_q_len;
    int max_ctx;
    void *workspace;
    size_t workspace_bytes;
    const int32_t *last;         /* [n_tok] or NULL */
} ifd_attn_batch_t;

/* One logits row to sample on the device (ops->sample): the request's
 * parameters, its history for the penalties and the grammar (NULL =
 * empty), and the position of the token to sample. A row with a
 * constraint has its mask computed on the host (ifd_constraint_mask, which
 * advances the constraint) and applied on the device; a row with
 * params->n_logprobs >= 0 (any top k, or its logprob_token_ids) needs
 * `result`, where its logprobs come back (the whole ifd_sample_result_t as
 * ifd_sampler_sample fills it; entries past IFD_SAMPLER_INLINE_LOGPROBS go
 * into the result's more_* room, which the caller sets to hold them — too
 * little: IFD_EINVAL). params NULL and result NULL: skip this row. params
 * NULL and result set: a scoring row (prompt logprobs): the raw logprobs of
 * score_token with score_top (>= 0; past IFD_SAMPLER_INLINE_LOGPROBS into
 * the more_* room likewise) alternatives into result, as
 * ifd_sampler_logprobs computes them; nothing is sampled. All borrowed for
 * the call. */
typedef struct {
    const ifd_sampling_params_t *params;
    const ifd_sampler_history_t *hist;
    uint64_t position;
    ifd_sample_result_t *result;
    int32_t score_token;
    int32_t score_top;
} ifd_sample_row_t;

/* Most graphs a backend keeps (keys 0 .. IFD_BACKEND_MAX_GRAPHS - 1): two
 * sets of 160 (model.h, ifd_model_set_graph_set: a model and its draft on
 * one backend). */
#define IFD_BACKEND_MAX_GRAPHS 320

typedef struct ifd_backend ifd_backend_t;

typedef struct {
    const char *name;
    bool host_memory;        /* backend memory is directly addressable by the host */
    ifd_dtype_t mm_in_dtype; /* dtype of projection inputs (see the top) */
    void (*destroy)(ifd_backend_t *be);

    int (*alloc)(ifd_backend_t *be, size_t bytes, void **out);
    void (*free)(ifd_backend_t *be, void *p);
    int (*upload)(ifd_backend_t *be, void *dst, const void *src, size_t bytes);
    int (*download)(ifd_backend_t *be, void *dst, const void *src, size_t bytes);
    int (*sync)(ifd_backend_t *be);
    /* Asynchronous downloads (the KV host tier's copies overlapping the
     * steps, docs/kvpool.md "Host tier"); all NULL on a host-memory backend.
     * host_alloc / host_free: pinned host memory (download_async's dst).
     * download_async: a copy of bytes from device src to host dst, ordered
     * after everything enqueued on the backend's stream before the first
     * download_async since the last copy_fence (so enqueue no work between
     * the copies of one fence), on a copy stream of its own so the next
     * steps' kernels overlap it; returns at once. copy_fence: a ticket (*out) that completes once every
     * download_async before it has landed. copy_done: 1 when ticket has
     * completed (wait: blocks until it has), 0 not yet, or an error.
     * Until copy_done says 1 the caller must neither read dst nor let src
     * be written. Not while recording a graph (IFD_EINVAL).
     * upload_async: the other direction on the same copy stream and fences
     * (host src, pinned for the copy to be asynchronous, to device dst),
     * ordered like download_async; until its fence completes the caller
     * must neither write src nor let anything read dst, except through
     * copy_wait: the backend's stream waits (on the device; the host does
     * not) for ticket's fence, so the work enqueued after it sees what the
     * copies before the fence wrote. Optional (NULL: uploads synchronous). */
    int (*host_alloc)(ifd_backend_t *be, size_t bytes, void **out);
    void (*host_free)(ifd_backend_t *be, void *p);
    int (*download_async)(ifd_backend_t *be, void *dst, const void *src, size_t bytes);
    int (*copy_fence)(ifd_backend_t *be, uint64_t *out);
    int (*copy_done)(ifd_backend_t *be, uint64_t ticket, bool wait);
    int (*upload_async)(ifd_backend_t *be, void *dst, const void *src, size_t bytes);
    int (*copy_wait)(ifd_backend_t *be, uint64_t ticket);
    /* The KV pool's device segments: the provider that makes this backend's
     * memory for ifd_kvpool_bind_segment (CUDA: VMM with a POSIX-fd handle,
     * IPC fallback; kernels/cuda/kvseg_cuda.h), or NULL (or no op) for a
     * host-memory backend, which reads the pool's HOST segments. The
     * provider lives as long as the backend: destroy every pool handle bound
     * through it first. */
    const ifd_kvseg_provider_t *(*kv_provider)(ifd_backend_t *be);

    /* Whether load_weight / load_proj accept source data of this type. */
    bool (*can_load)(ifd_backend_t *be, ifd_ggml_type_t type);
    /* Weights. load_weight: a vector or table (src->rows = 1 for a vector).
     * load_proj: a projection from n parts with the same cols; bias[i] may
     * be NULL or have data NULL (no bias for that part), else [1, rows_i].
     * Both leave *out zeroed on failure. The free ops accept zeroed ones. */
    int (*load_weight)(ifd_backend_t *be, ifd_weight_t *out, const ifd_weight_src_t *src,
                       ifd_weight_use_t use);
    int (*load_proj)(ifd_backend_t *be, ifd_proj_t *out, const ifd_weight_src_t *parts,
                     const ifd_weight_src_t *const *bias, int n);
    void (*weight_free)(ifd_backend_t *be, ifd_weight_t *w);
    void (*proj_free)(ifd_backend_t *be, ifd_proj_t *p);

    /* Activation buffers of rows × cols of `dtype` (F32 or mm_in_dtype). */
    int (*act_alloc)(ifd_backend_t *be, ifd_act_t *out, ifd_dtype_t dtype, int64_t rows,
                     int64_t cols);
    void (*act_free)(ifd_backend_t *be, ifd_act_t *a);

    /* x[i] = emb[tokens[i]] * scale (x f32 [n, emb->cols]). IFD_ERANGE for
     * an id outside the table where the backend can check it. */
    int (*embed)(ifd_backend_t *be, ifd_act_t *x, const ifd_weight_t *emb,
                 const int32_t *tokens /* [n] */, int n, float scale);
    /* For each of `rows` rows: if delta: residual += delta; then
     * y = residual / rms(residual) * w (w from load_weight NORM/NORM_ADD1).
     * residual, delta f32 [rows, w->cols]; y F32 or mm_in_dtype. y may be
     * residual itself (in place, F32, delta NULL: Gemma's post-norms). */
    int (*rmsnorm)(ifd_backend_t *be, ifd_act_t *y, ifd_act_t *residual, const ifd_act_t *delta,
                   const ifd_weight_t *w, int rows, float eps);
    /* y[:m] = x[:m] · pᵀ (+ bias): x mm_in_dtype [m, p->cols], y f32 [m, p->rows]. */
    int (*proj)(ifd_backend_t *be, ifd_act_t *y, const ifd_act_t *x, const ifd_proj_t *p, int m);
    /*
     * From a fused QKV output qkv f32 [n_tok, (n_heads + 2 n_kv) · head_dim]
     * (Q heads, then K, then V): optional per-head RMSNorm of q and k
     * (q_norm/k_norm over head_dim; NULL = none; Gemma 3, Qwen 3), RoPE on
     * q and k at pos[t], k and v written into slot[t] of the layer's pool
     * (slot < 0: not written), rotated q into q_out f32 [n_tok, n_heads ·
     * head_dim]. n_kv and head_dim are kv's.
     */
    int (*rope_kv)(ifd_backend_t *be, ifd_act_t *q_out, const ifd_act_t *qkv,
                   const ifd_weight_t *q_norm, const ifd_weight_t *k_norm, float eps,
                   const ifd_kv_layer_t *kv, const int32_t *pos /* [n_tok] */,
                   const int64_t *slot /* [n_tok] */, int n_tok, int n_heads,
                   const ifd_rope_t *rope);
    /* Bytes of attention workspace for this batch shape (0 if none). */
    int (*attn_workspace)(ifd_backend_t *be, size_t *bytes, const ifd_attn_batch_t *ab,
                          const ifd_kv_layer_t *kv, int n_heads);
    /* out = paged causal GQA attention of q (f32 [n_tok, n_heads · head_dim])
     * over the pool (semantics of ifd_cpu_paged_attention); out has
     * mm_in_dtype. window 0 = unlimited. */
    int (*attention)(ifd_backend_t *be, ifd_act_t *out, const ifd_act_t *q,
                     const ifd_kv_layer_t *kv, const ifd_attn_batch_t *ab, int n_heads,
                     float scale, int window);
    /* out[r, i] = act(gate_up[r, i]) · gate_up[r, n_ff + i] for r < rows:
     * gate_up f32 [rows, 2 n_ff] (a fused gate|up proj), out mm_in_dtype. */
    int (*glu)(ifd_backend_t *be, ifd_act_t *out, const ifd_act_t *gate_up, int rows, int n_ff,
               ifd_glu_t kind);
    /* out[i] = x[rows[i]] (both f32, same cols). */
    int (*gather_rows)(ifd_backend_t *be, ifd_act_t *out, const ifd_act_t *x,
                       const int32_t *rows /* [n_rows] */, int n_rows);

    /* ---- optional (NULL when the backend lacks them) ---- */
    /* Device sampling: tokens[i] (host memory) = the token ifd_sampler_sample
     * would return for logits row i (f32 [>= n_rows, vocab]) with rows[i]'s
     * parameters, history and position — bit for bit, the same seeded draw,
     * grammar masks included — or -1 where it would fail (a NaN or +inf
     * logit, all -inf, a history the grammar rejects); with logprobs, the
     * row's result as ifd_sampler_sample's (the same ids, ranks and order,
     * values within float rounding; result->token = -1 when the row
     * failed). Scoring rows (params NULL, result set) get result only, with
     * result->token = -1 where ifd_sampler_logprobs fails. Rows with params
     * and result NULL are left alone (tokens[i] untouched). Applies bias,
     * penalties and masks to the logits in place. Synchronous: only the
     * token ids and the requested logprobs come back. */
    int (*sample)(ifd_backend_t *be, int32_t *tokens, ifd_act_t *logits,
                  const ifd_sample_row_t *rows, int n_rows);
    /* The final logit soft-cap in place on rows [0, n_rows) of f32 logits:
     * x = ifd_softcap(x, cap) (sampling_math.h), the host's bits exactly,
     * so that a soft-capped model samples on the device too. */
    int (*softcap)(ifd_backend_t *be, ifd_act_t *logits, int n_rows, float cap);
    /* Vision (worker/vision.c: a ViT encoder over one image; NULL on a
     * backend without them, where ifd_vision_load says so; both backends
     * have them: kernels/cpu/vision.c, kernels/cuda/vision.h).
     * layernorm: for each of `rows` rows, if delta: residual += delta; then
     * y = LayerNorm(residual) · w + b (w, b f32 vectors from load_weight
     * VECTOR; b may be NULL); residual, delta f32; y F32 or mm_in_dtype, or
     * residual itself (in place: the tower's post_layernorm).
     * add_rows: x[r] += t[r] for r < rows (t an f32 table of >= rows rows
     * of x->cols, loaded as VECTOR: position embeddings). gelu: out = gelu_tanh(x)
     * elementwise on rows × x->cols (x f32, out mm_in_dtype).
     * dense_attention: out (mm_in_dtype [n, n_heads · head_dim]) = dense
     * bidirectional attention of one sequence of n tokens from a fused
     * q|k|v projection output qkv f32 [n, 3 · n_heads · head_dim], for the
     * query rows [q0, q1) (0 <= q0 <= q1 <= n) over all n keys; out's other
     * rows untouched; a row's bits do not depend on the range
     * (ifd_cpu_dense_attention). A backend may keep what it derives from
     * qkv's K and V (the CPU backend: every head's packed K and Vᵀ) from a
     * call with q0 = 0 for the later calls on the same qkv buffer and
     * shape: a caller that changes qkv starts again at q0 = 0 (the vision
     * encode computes each layer's rows in order from 0). avg_pool2d: out f32 [(rows / k) · (side /
     * k), C] = k × k average pooling of x f32 [rows · side, C] (a row-major
     * patch grid side wide: rows = side the whole square grid, fewer a band
     * of it, whose output rows are the whole's bit for bit). */
    int (*layernorm)(ifd_backend_t *be, ifd_act_t *y, ifd_act_t *residual, const ifd_act_t *delta,
                     const ifd_weight_t *w, const ifd_weight_t *b, int rows, float eps);
    int (*add_rows)(ifd_backend_t *be, ifd_act_t *x, const ifd_weight_t *t, int rows);
    int (*gelu)(ifd_backend_t *be, ifd_act_t *out, const ifd_act_t *x, int rows);
    int (*dense_attention)(ifd_backend_t *be, ifd_act_t *out, const ifd_act_t *qkv, int n, int q0,
                           int q1, int n_heads, int head_dim, float scale);
    int (*avg_pool2d)(ifd_backend_t *be, ifd_act_t *out, const ifd_act_t *x, int rows, int side,
                      int k);
    /* Graphs: graph_begin records the ops enqueued after it instead of
     * running them, graph_end(key) stops recording and keeps them as graph
     * `key` (< IFD_BACKEND_MAX_GRAPHS; replacing an old one; on any error the
     * recording is dropped), graph_launch(key) enqueues a replay. Recorded
     * ops keep their arguments (pointers and scalars) as they were when
     * recorded: the caller updates the memory they point to (ops->upload
     * before the launch), never the arguments. No upload, download, sync or
     * allocation between begin and end (the op fails). graph_launch returns
     * IFD_ENOTFOUND for a key without a graph. The backend keeps every
     * buffer of its own that a graph uses alive while the graph lives; the
     * caller does the same for the buffers it passed. */
    int (*graph_begin)(ifd_backend_t *be);
    int (*graph_end)(ifd_backend_t *be, int key);
    int (*graph_launch)(ifd_backend_t *be, int key);
} ifd_backend_ops_t;

struct ifd_backend {
    const ifd_backend_ops_t *ops;
};

/* How the CPU backend keeps matrices: AUTO = quantized types stay
 * quantized (8-bit activations; close to, not equal to, f32 results), F32 =
 * everything dequantized to f32 (the exact path, for exactness checks). */
typedef enum {
    IFD_WEIGHTS_AUTO = 0,
    IFD_WEIGHTS_F32 = 1,
} ifd_weights_dtype_t;

/* "auto" / "f32" → *out; IFD_EINVAL otherwise. */
int ifd_weights_dtype_parse(const char *s, ifd_weights_dtype_t *out);

/* The CPU backend with n_threads compute threads (0 = all online CPUs) and
 * weights AUTO (ifd_backend_cpu_create) or as given. 0, IFD_EINVAL (bad
 * weights value) or IFD_ENOMEM. Destroy with be->ops->destroy(be). */
int ifd_backend_cpu_create(ifd_backend_t **out, int n_threads);
int ifd_backend_cpu_create_ex(ifd_backend_t **out, int n_threads, ifd_weights_dtype_t weights);

/* The CUDA backend on device `device` (backend_cuda.c; built only with the
 * CUDA backend on, IFD_HAVE_CUDA, or against the emulator in tests/gpu/emu):
 * bf16 weights and GEMM inputs, one stream; f32 = true: f32 weights and
 * activations instead (an exact mode for checks, 2x the memory). IFD_ENODEV when there is no
 * such device or no driver, with the runtime's reason in errbuf; IFD_ECUDA
 * or IFD_ENOMEM when setting it up failed. Destroy with be->ops->destroy. */
int ifd_backend_cuda_create(ifd_backend_t **out, int device, bool f32, char *errbuf,
                            size_t errlen);

#endif
