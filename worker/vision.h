/*
 * vision.h — Gemma 3's image encoder: the SigLIP vision tower and the
 * multi-modal projector, written once against the backend (backend.h) like
 * the text model (model.h). One image's pixel_values (3 × S × S, normalized
 * as common/image/preprocess.h makes them) → tokens_per_image rows of the
 * text width, the rows that replace the image's soft tokens in the prompt.
 *
 * The computation is transformers' Gemma3Model.get_image_features:
 *   patch embedding    conv P × P stride P as a GEMM over im2col'd patches
 *                      (c, ky, kx order: the conv weight flattened), + bias;
 *   + learned position embeddings (one per patch, no CLS token);
 *   N encoder layers   x += out_proj(attn(LN1(x))), x += fc2(gelu_tanh(fc1(LN2(x))))
 *                      (LayerNorm with bias, dense bidirectional multi-head
 *                      attention with q/k/v/out biases, scale head_dim^-0.5);
 *   post_layernorm     → the tower's output ("last_hidden_state");
 *   projector          k × k average pooling of the patch grid to
 *                      tokens_per_image rows, RMSNorm with Gemma's (1 + w),
 *                      times mm_input_projection_weight [width, text width].
 *
 * Weights come from a model source (model_source.h) by llama.cpp's mmproj
 * names, loaded as the backend keeps weights (f32 / f16 / bf16 files; the
 * CPU backend keeps 16-bit matrices in 16 bits with f32 accumulation).
 * Backends without the vision ops (backend.h: the CUDA backend today)
 * get IFD_ENOTSUP from ifd_vision_load.
 *
 * Memory: an encode allocates its activations for the call and frees them:
 * patches × (3·P² + 7·width + 2·MLP width) floats (Gemma 3: 4096 × 17260 ×
 * 4 B ≈ 270 MiB on the CPU), plus the attention's 256-row score blocks
 * (4 MiB).
 * Ownership: the vision model does not keep the source (weights are copied
 * onto the backend at load); the backend must outlive it. Threading: one
 * thread at a time per ifd_vision_t (the engine thread), like the model.
 */
#ifndef IFD_VISION_H
#define IFD_VISION_H

#include <stdint.h>

#include "backend.h"
#include "modelfile/model_source.h"
#include "modelfile/vision_config.h"

typedef struct ifd_vision ifd_vision_t;

/* Loads the tower and projector of `src` (a Gemma3ForConditionalGeneration
 * directory) onto `be`. 0; IFD_ENOTFOUND when src has no usable vision tower
 * (the reason in errbuf); IFD_ENOTSUP on a backend without the vision ops
 * ("vision on <backend> not yet") or a weight type the backend cannot load;
 * IFD_EFORMAT for a missing tensor or a wrong shape (the file and tensor
 * named); IFD_ENOMEM. The source may be closed after the call. */
int ifd_vision_load(ifd_vision_t **out, const ifd_model_source_t *src, ifd_backend_t *be,
                    char *errbuf, size_t errlen);
/* A tower of shape cfg (as ifd_vision_config_check accepts; e.g.
 * ifd_vision_config_gemma3_4b) with random bf16 weights from seed (each
 * value a function of seed, tensor name and index, as
 * ifd_model_load_random's): for speed runs in real shapes without a file.
 * Errors as ifd_vision_load. */
int ifd_vision_load_random(ifd_vision_t **out, const ifd_vision_config_t *cfg, uint64_t seed,
                           ifd_backend_t *be, char *errbuf, size_t errlen);
void ifd_vision_destroy(ifd_vision_t *v); /* NULL is a no-op */

const ifd_vision_config_t *ifd_vision_config(const ifd_vision_t *v);
/* Rows of ifd_vision_encode's output (mm_tokens_per_image) and their width
 * (the text model's hidden size). */
int ifd_vision_tokens_per_image(const ifd_vision_t *v);
int ifd_vision_text_width(const ifd_vision_t *v);
/* The input side in pixels (pixel_values are 3 × side × side). */
int ifd_vision_image_size(const ifd_vision_t *v);
/* Bytes of weights held on the backend. */
uint64_t ifd_vision_weight_bytes(const ifd_vision_t *v);

/*
 * Encodes one image. pixel_values: host memory, 3 × side × side float32
 * (channels first, normalized). features: host memory, tokens_per_image ×
 * text_width floats (the projector's output). tower: NULL, or host memory
 * for the tower's output, n_patches × width floats (post_layernorm
 * included; for checks). 0, IFD_EINVAL for a non-finite pixel value (the
 * image path never makes one), or a backend error (IFD_ENOMEM).
 */
int ifd_vision_encode(ifd_vision_t *v, const float *pixel_values, float *features, float *tower);

/*
 * The same encode in bounded pieces, for a serving loop that must keep
 * decoding other requests meanwhile (worker/serve_vision.h): the work is
 * split into ifd_vision_encode_phases(v) phases — the patch embedding
 * (patch GEMM + positions), four per encoder layer (LN1 + q|k|v; the
 * attention; out_proj + LN2 + fc1 + gelu; fc2), and the tail
 * (post_layernorm, pooling, RMSNorm and the projector) — run in order by
 * _step. The patch embedding and every layer phase are row-local in the
 * patch rows (the attention per query row, over all keys), so _step_flops
 * runs them in pieces of patch rows: the same backend calls on row ranges;
 * the tail in pieces of pooled tokens, whole bands of them (a band: one
 * row of the pooled grid, whose windows cover `pool` whole rows of the
 * patch grid — post_layernorm runs on those rows, avg_pool2d on that band).
 * Where every op computes a row the same whatever the rows around it
 * (backend.h: batch invariance, dense_attention's ranges, avg_pool2d's
 * bands; the CPU backend and the CUDA kernels on the emulator, bit for bit)
 * that gives the bits of ifd_vision_encode (which is begin, one step of
 * every phase, end) however the encode is split; on a GPU the projections'
 * cuBLASLt algorithm is chosen per row count, so pieces agree with the
 * whole to rounding (whole phases, _step, keep the bits).
 *
 * Sizes (the 4B tower, ifd_vision_encode_flops ≈ 5.4 TFLOP): a whole phase
 * is up to one layer's attention (≈ 77 GFLOP: seconds on a few CPU cores);
 * a 16-row piece of it ≈ 0.3 GFLOP; of the patch embedding (≈ 5.5 GFLOP
 * whole) ≈ 22 MFLOP; a band of the tail (≈ 1.5 GFLOP whole, 16 bands of
 * 16 tokens) ≈ 94 MFLOP.
 *
 * _begin: checks the pixels (IFD_EINVAL for a non-finite one), allocates
 * the activations (ifd_vision_encode's, held until _end or _free) and
 * uploads the im2col'd patches (memory work: no FLOPs; the patch embedding
 * itself is the first phase); pixel_values need not outlive the call. 0
 * with *out set, or an error with *out NULL.
 * _step: runs up to max_phases (>= 1) more phases (the rest of a phase a
 * _step_flops left part-done counts as one) and waits for them
 * (ops->sync). 1 when the encode is complete, 0 when phases remain, or a
 * backend error (the state is then only good for _free).
 * _step_flops: as _step, bounded by work instead: runs pieces (the rest of
 * the current phase, else a multiple of 16 patch rows of it, or of one band
 * of the tail) while the FLOPs counted so far stay within max_flops, at
 * least one piece (the smallest: 16 rows, or one band) per call; *done
 * (may be NULL) gets the FLOPs run, counted as ifd_vision_encode_flops
 * counts them (matmuls and attention products, 2 per multiply-add; norms,
 * gelu, pooling and the position add left out).
 * _end: after _step returned 1, downloads features (and tower when not
 * NULL) as ifd_vision_encode does and frees e; IFD_EINVAL (e freed all the
 * same) when phases remained.
 * _free: abandons an encode (NULL is a no-op).
 * Threading: as ifd_vision_encode; several encodes of one tower may be
 * alive at once (each holds its own activations). The tower outlives them.
 */
typedef struct ifd_vision_enc ifd_vision_enc_t;
int ifd_vision_encode_phases(const ifd_vision_t *v);
int ifd_vision_encode_begin(ifd_vision_enc_t **out, ifd_vision_t *v, const float *pixel_values);
int ifd_vision_encode_step(ifd_vision_enc_t *e, int max_phases);
int ifd_vision_encode_step_flops(ifd_vision_enc_t *e, double max_flops, double *done);
/* The FLOPs _step and _step_flops run in one encode (after _begin). */
double ifd_vision_encode_flops(const ifd_vision_t *v);
int ifd_vision_encode_end(ifd_vision_enc_t *e, float *features, float *tower);
void ifd_vision_encode_free(ifd_vision_enc_t *e);

#endif
