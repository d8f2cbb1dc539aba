/*
 * model.h — a loaded model (weights on a backend) and its forward pass over
 * a ragged batch, written once against the backend interface (backend.h).
 *
 * Architectures: llama (SmolLM2, Llama 3.x, TinyLlama, Mistral), gemma3,
 * qwen2, qwen3, from GGUF or a Hugging Face directory. Weights are
 * dequantized to f32 once at load (MODEL-FORMATS.md §3); a tensor with an
 * unsupported type or a wrong shape fails the load with a message naming
 * the file and the tensor.
 *
 * Ownership: ifd_model_load keeps the model source (GGUF mapping or
 * safetensors shards) open for the model's lifetime (the tokenizer reads its
 * metadata); the backend must outlive the model. Threading: one thread at a time per model (the engine thread).
 */
#ifndef IFD_MODEL_H
#define IFD_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "modelfile/gguf.h"
#include "modelfile/model_config.h"
#include "modelfile/model_source.h"

typedef struct ifd_model ifd_model_t;

/*
 * One forward step: n_tok tokens from n_seqs sequences, prefill chunks and
 * single decode tokens mixed. Token i is tokens[i] at position pos[i] of
 * sequence seq[i]; its K/V are written to slot[i] (block * block_size +
 * offset; < 0 = do not write) before attention, and it attends to positions
 * 0..pos[i] of its sequence through block_tables[seq[i] * max_blocks + …].
 * Logits are computed only for the n_logits tokens listed in logit_rows.
 * All arrays are host memory.
 */
typedef struct {
    int n_tok;
    const int32_t *tokens;       /* [n_tok] */
    const int32_t *pos;          /* [n_tok] */
    const int32_t *seq;          /* [n_tok] */
    const int64_t *slot;         /* [n_tok] */
    int n_seqs;
    const int32_t *block_tables; /* [n_seqs, max_blocks] */
    int max_blocks;
    int n_logits;
    const int32_t *logit_rows;   /* [n_logits], indices into the batch */
    /* Sliding-window layers kept in a pool of their own (engine.h,
     * local_pool): their K/V go to local_slot[i] and are read through
     * local_block_tables (same shape and logical indexing as block_tables;
     * entries wholly before a sequence's window are never read and may hold
     * any valid block id). Both NULL: local layers use slot/block_tables. */
    const int32_t *local_block_tables; /* [n_seqs, max_blocks] or NULL */
    const int64_t *local_slot;         /* [n_tok] or NULL */
    /* Gemma 3's images (docs/vision.md). kv_last: token i attends to
     * positions up to kv_last[i] instead of pos[i] — an image token to its
     * image's last position (bidirectional inside one image), every other
     * token to its own; the window of local layers still starts from pos[i].
     * Where kv_last[i] > pos[i], the token at that position must be in this
     * batch: token i + kv_last[i] - pos[i], of the same sequence (an image is
     * never split across steps). NULL: causal. embd: token i's input
     * embedding (n_embd host floats, used as is: no embedding scale) in
     * place of tokens[i]'s scaled embedding row, or NULL for the token's
     * own; embd NULL: every token's own. Both only in eager steps. */
    const int32_t *kv_last;            /* [n_tok] or NULL */
    const float *const *embd;          /* [n_tok] or NULL */
} ifd_batch_t;

/* Loads the model at `path` — a GGUF file or a Hugging Face directory
 * (config.json + safetensors; common/modelfile/model_source.h) — onto `be`. 0, or an
 * IFD_E* code or -errno, with a one-line message in errbuf (file, tensor,
 * what was expected). */
int ifd_model_load(ifd_model_t **out, const char *path, ifd_backend_t *be, char *errbuf,
                   size_t errlen);
/* As ifd_model_load, from an open source, which the model takes (closed with
 * it, or at once on failure), for a tokenizer of n_tokens ids: when 0 <
 * n_tokens < the model's n_vocab (config vocab_size above the tokenizer's
 * size: Gemma 3 4B), cfg.n_vocab_valid = n_tokens and the logits of ids >=
 * n_tokens are -inf (model.c: a -inf bias on those rows of the output
 * projection), so no sampler, host or device, can produce them. n_tokens <=
 * 0: no limit (ifd_model_load). */
int ifd_model_load_source(ifd_model_t **out, ifd_model_source_t *src, int32_t n_tokens,
                          ifd_backend_t *be, char *errbuf, size_t errlen);
/*
 * A model of shape `cfg` (every field filled, as ifd_model_config_from_gguf
 * would; has_rope_freqs false; n_vocab_valid as ifd_model_load_source sets
 * it, or 0) with random bf16-exact weights from `seed`
 * (model.c: each value a function of seed, tensor name and index only), so
 * the same seed gives the same weights on every backend; the output matrix
 * is tied to token_embd. For speed runs and CPU-vs-GPU checks in real
 * shapes without a file. ifd_model_gguf returns NULL for it.
 * 0, IFD_EINVAL (inconsistent shape), or a backend error (message in errbuf).
 */
int ifd_model_load_random(ifd_model_t **out, const ifd_model_config_t *cfg, uint64_t seed,
                          ifd_backend_t *be, char *errbuf, size_t errlen);
void ifd_model_destroy(ifd_model_t *m);

const ifd_model_config_t *ifd_model_config(const ifd_model_t *m);
/* The GGUF handle, or NULL for a model loaded from a Hugging Face directory. */
const ifd_gguf_t *ifd_model_gguf(const ifd_model_t *m);
/* Where the model came from (format, path, tokenizer); lives as long as m. */
const ifd_model_source_t *ifd_model_source(const ifd_model_t *m);
/* The backend the model was loaded onto. */
ifd_backend_t *ifd_model_backend(const ifd_model_t *m);
/* Bytes of weights held on the backend. */
uint64_t ifd_model_weight_bytes(const ifd_model_t *m);

/*
 * Runs the batch. kv[l] is layer l's view of the paged KV cache
 * (n_kv_heads and head_dim must match the model; with b->local_block_tables
 * a local layer's view is of the local pool, the same block size). logits: host memory
 * [n_logits, n_vocab]. Returns 0, IFD_EINVAL for an inconsistent batch
 * (token id out of range, bad sequence index, a kv_last that breaks its
 * rule), or a backend error.
 */
int ifd_model_forward(ifd_model_t *m, const ifd_batch_t *b, const ifd_kv_layer_t *kv,
                      float *logits);

/* tokens[i] of ifd_model_forward_sample for a row sampled on the host. */
#define IFD_MODEL_SAMPLE_ON_HOST (-2)

/*
 * The forward pass with sampling on the device where the backend can
 * (ops->sample; model.c): rows[i] describes logits row i (b->n_logits of
 * them). A row with params and result NULL — the caller's choice for rows
 * it samples itself — and every row when the backend cannot sample (or
 * cannot soft-cap a model with a final soft-cap) gets tokens[i] =
 * IFD_MODEL_SAMPLE_ON_HOST and
 * its logits in logits + i * n_vocab (host memory, as ifd_model_forward
 * writes them); the caller samples (or scores) it. The other rows get
 * tokens[i] = the token ifd_sampler_sample would return for those logits
 * (bit for bit, grammar masks included), or -1 where it would fail, and
 * their logprobs in rows[i].result when asked; scoring rows (params NULL,
 * result set) get tokens[i] = 0 and their result. Their logits are not
 * copied. Returns 0 or ifd_model_forward's errors.
 */
int ifd_model_forward_sample(ifd_model_t *m, const ifd_batch_t *b, const ifd_kv_layer_t *kv,
                             const ifd_sample_row_t *rows, int32_t *tokens, float *logits);

/* Decode steps of at most this many tokens are graph-replayed (model.c). */
#define IFD_MODEL_MAX_GRAPH_BATCH 256

/* Graph use (model.c's file comment). On by default where the backend has
 * graphs; off: the same padded decode steps run eagerly. */
void ifd_model_set_graphs(ifd_model_t *m, bool on);

/* Decode graphs come in IFD_MODEL_GRAPH_SETS sets, each its own range of
 * the backend's graph keys (IFD_BACKEND_MAX_GRAPHS / IFD_MODEL_GRAPH_SETS
 * keys) and its own record of what each graph was recorded against. The
 * forwards after this call record and replay in set `set` (0 until
 * called): the engine's model uses 0, a draft model (spec_draft.h) 1, so
 * that a model and its draft on one backend never replay each other's
 * graphs, and a model drafting for itself (one model forwarded over two
 * KV pools) keeps a set per pool instead of recording again at every
 * switch. Two models forwarding on one backend in the same set would
 * replace each other's graphs: don't. set out of range: ignored. One
 * thread, between forwards. */
#define IFD_MODEL_GRAPH_SETS 2
void ifd_model_set_graph_set(ifd_model_t *m, int set);

/* The most sequences a decode step will hold (the engine's max_seqs): the
 * activation and logits buffers of decode steps are then sized for the
 * smallest batch bucket >= max_seqs rather than for 256 rows (on a 128k
 * vocabulary, 256 rows of f32 logits are 128 MiB). A larger decode step
 * still runs (its buffers grow). <= 0: back to 256. Call before the first
 * step; not thread-safe against a running step. */
void ifd_model_set_max_seqs(ifd_model_t *m, int max_seqs);

typedef struct {
    uint64_t captures;    /* graphs recorded */
    uint64_t replays;     /* steps run by replaying one */
    uint64_t eager_steps; /* steps run op by op */
    uint64_t set_replays[IFD_MODEL_GRAPH_SETS]; /* replays by set (ifd_model_set_graph_set) */
} ifd_model_graph_stats_t;

void ifd_model_graph_stats(const ifd_model_t *m, ifd_model_graph_stats_t *out);

#endif
