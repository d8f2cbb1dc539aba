/*
 * model_source.h — one view of a model's weights and metadata, whatever the
 * format: a GGUF file, or a Hugging Face directory (config.json,
 * generation_config.json, safetensors shards, tokenizer.json,
 * tokenizer_config.json). The model loader asks for tensors by their GGUF
 * names ("blk.3.attn_q.weight"); for a Hugging Face directory the source
 * maps them to the checkpoint's names (MODEL-FORMATS.md §2.1, §2.2:
 * "model.layers.3.self_attn.q_proj.weight", with the `language_model.`
 * prefixes of multimodal Gemma 3). A Gemma 3 directory with a vision tower
 * also maps llama.cpp's mmproj names onto its tower and projector:
 * "v.patch_embd.weight" → "vision_tower.vision_model.embeddings.
 * patch_embedding.weight", "v.blk.N.{attn_q,attn_k,attn_v,attn_out,ln1,ln2,
 * ffn_up,ffn_down}" → "encoder.layers.N.{self_attn.{q,k,v,out}_proj,
 * layer_norm1,2, mlp.fc1,fc2}", "v.position_embd", "v.post_ln",
 * "mm.soft_emb_norm.weight", "mm.input_projection.weight" (stored [vision
 * width, text width]: HF's orientation, the transpose of a projection) —
 * under whichever prefix the checkpoint uses (transformers 4.5x / hub
 * "vision_tower.vision_model.", 5.x saves "vision_tower.", either behind
 * "model."). Only mm.soft_emb_norm is add_one (the LayerNorms are not).
 *
 * What the source normalises, so the loader treats both formats alike:
 *   - shapes are reported innermost-first (GGUF's ne[]), HF shapes reversed;
 *   - Gemma 3's HF norm weights w are flagged `add_one` (the loader uses
 *     1 + w; GGUF's converter already stored 1 + w);
 *   - HF Llama 3 `rope_scaling` becomes a synthesized "rope_freqs.weight"
 *     (the factors llama.cpp's converter would have stored);
 *   - HF Q/K rows stay in rotate-half order: the config says rope_neox, and
 *     the forward pass pairs (i, i + d/2). GGUF llama Q/K are in interleaved
 *     order (rope_neox false). Nothing is permuted, so no copy is made.
 * Weight data points into the file mappings (no copy); the loader converts
 * tensor by tensor.
 *
 * Ownership: ifd_model_source_open returns an object freed with
 * ifd_model_source_close; tensor views and the GGUF handle live until then.
 * Threading: immutable after open; any thread may read it.
 */
#ifndef IFD_MODEL_SOURCE_H
#define IFD_MODEL_SOURCE_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf.h"
#include "model_config.h"
#include "vision_config.h"

typedef struct ifd_model_source ifd_model_source_t;

/* ggml_type of a tensor whose dtype no loader converts (safetensors I64, F64, F8, …). */
#define IFD_TENSOR_TYPE_UNSUPPORTED UINT32_MAX

/* One tensor as the loader sees it. */
typedef struct {
    const char *name;   /* the name in the file (HF name for a directory) */
    const char *file;   /* the file holding it (GGUF path or shard) */
    uint32_t ggml_type; /* ggml id (quantized kinds for GGUF; F32/F16/BF16 for HF) */
    const char *dtype;  /* HF: the safetensors dtype as the header spells it ("I64");
                           NULL for GGUF. Lives as long as the source. */
    uint32_t n_dims;
    uint64_t ne[4];   /* innermost first; unused dims 1 */
    const void *data; /* in the mapping; may be unaligned for HF */
    uint64_t nbytes;
    bool add_one; /* the value is 1 + stored (HF Gemma 3 RMSNorm weights) */
} ifd_tensor_view_t;

/*
 * Opens `path`: a file starting with the GGUF magic, or a directory holding
 * config.json (a path to a config.json also names its directory). Reads the
 * model config and checks the weights it needs exist with the right shapes
 * (token embedding, output when untied). Returns 0, or the config parser's,
 * GGUF reader's or safetensors reader's code with a one-line message naming
 * the file (and tensor) in errbuf; IFD_ENOTSUP for a directory that is not
 * a Hugging Face model (no config.json).
 */
int ifd_model_source_open(ifd_model_source_t **out, const char *path, char *errbuf, size_t errlen);
void ifd_model_source_close(ifd_model_source_t *s); /* NULL is a no-op */

/*
 * Opens a llama.cpp mmproj GGUF (general.architecture "clip", Gemma 3's
 * projector) as a source of vision weights only: ifd_model_source_vision
 * gives its config (ifd_vision_config_from_gguf), tensors are found by their
 * GGUF names as stored (mm.soft_emb_norm already 1 + w, add_one false;
 * mm.input_projection in HF's [vision width, text width] orientation, as
 * llama.cpp's clip.cpp transposes it), and the text config is empty (no
 * text model can load from it). 0; IFD_EFORMAT for a file that is not a
 * GGUF or not an mmproj; the GGUF reader's or the config's codes.
 */
int ifd_model_source_open_mmproj(ifd_model_source_t **out, const char *path, char *errbuf,
                                 size_t errlen);

const ifd_model_config_t *ifd_model_source_config(const ifd_model_source_t *s);
/* The path as given to open (the GGUF file or the directory). */
const char *ifd_model_source_path(const ifd_model_source_t *s);
/* The GGUF handle; NULL for a Hugging Face directory. */
const ifd_gguf_t *ifd_model_source_gguf(const ifd_model_source_t *s);
/* The safetensors shards; NULL for GGUF. */
struct ifd_safetensors;
const struct ifd_safetensors *ifd_model_source_safetensors(const ifd_model_source_t *s);
/* Total bytes of the weight files (GGUF file, or every shard). */
uint64_t ifd_model_source_bytes(const ifd_model_source_t *s);
/* Number of weight files (1 for GGUF, the shard count for HF). */
size_t ifd_model_source_n_files(const ifd_model_source_t *s);

/* The vision tower of a Gemma3ForConditionalGeneration directory, or NULL
 * (a text-only model or GGUF, or a tower that cannot be used); *why (may be
 * NULL) gets the reason a vision_config present is not usable (unsupported
 * hidden_act, an inconsistent shape, missing tensors), else NULL: such a
 * vision_config never fails the open — the text model still loads. Lives as
 * long as s. */
const ifd_vision_config_t *ifd_model_source_vision(const ifd_model_source_t *s, const char **why);

/* Looks up tensor `gguf_name`. 0 with *out filled, or IFD_ENOTFOUND. For an
 * HF directory with tied embeddings "output.weight" is IFD_ENOTFOUND even if
 * the checkpoint stores an lm_head (transformers ignores it too). */
int ifd_model_source_find(const ifd_model_source_t *s, const char *gguf_name,
                          ifd_tensor_view_t *out);

/* Gives back the resident file pages of tensor `gguf_name` (after the loader
 * copied it) / of every tensor: ifd_gguf_release_tensor(_pages) or
 * ifd_safetensors_release(_all). The data stays readable. NULL s: nothing. */
void ifd_model_source_release(const ifd_model_source_t *s, const char *gguf_name);
void ifd_model_source_release_all(const ifd_model_source_t *s);

/* The name `gguf_name` has in the file, for messages ("model.layers.0.self_attn.q_proj.weight"
 * for an HF directory; the GGUF name itself for GGUF, or when there is no mapping). */
void ifd_model_source_name(const ifd_model_source_t *s, const char *gguf_name, char *buf,
                           size_t len);

#endif
