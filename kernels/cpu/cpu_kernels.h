/*
 * cpu_kernels.h — the CPU kernels: the CPU backend's compute and the
 * reference the CUDA kernels are tested against.
 *
 * Conventions (STYLE.md "Kernels"): outputs first, the caller allocates,
 * every pointer carries its shape, offsets into the KV pool are 64-bit.
 * Return 0, IFD_EINVAL for bad shapes, IFD_ENOTSUP for an unsupported
 * dtype/specialization. Matrices are row-major. Each kernel picks its SIMD
 * path at run time (ifd_cpu_features(): AVX-512, AVX2+FMA, scalar).
 *
 * Threading: a kernel that takes an ifd_threadpool_t splits its work over
 * the pool (tp may be NULL: run on the calling thread). Kernels are
 * reentrant; the pool itself runs one parallel job at a time (see
 * threadpool.h).
 */
#ifndef IFD_CPU_KERNELS_H
#define IFD_CPU_KERNELS_H

#include <stdint.h>

#include "threadpool.h"

/* Element type of the KV pool and of weights handed to kernels. Q8_0 and
 * Q4_0 are KV-only block types (32 values share one f16 scale, rows laid out
 * as ifd_kv_row_bytes says), FP8 a KV-only row type (e4m3 with one f32 scale
 * per row: the CUDA kernels' type; the CPU attention reads it through an f32
 * copy per chunk); everything else takes F32/F16/BF16. */
typedef enum {
    IFD_DTYPE_F32 = 0,
    IFD_DTYPE_F16 = 1,
    IFD_DTYPE_BF16 = 2,
    IFD_DTYPE_Q8_0 = 3,
    IFD_DTYPE_Q4_0 = 4,
    IFD_DTYPE_FP8 = 5,
} ifd_dtype_t;

/* Bytes per element of a dtype (4, 2, 2); IFD_EINVAL for the block types. */
int ifd_dtype_size(ifd_dtype_t t);

/*
 * Bytes of one K or V row (one token of one KV head, head_dim values) in the
 * KV pool: head_dim · 4 / 2 / 2 for F32/F16/BF16; for the block types the
 * row's quants followed by its scales (head_dim a multiple of 32):
 *   Q8_0: int8 q[head_dim], then f16 d[head_dim / 32]       x[i] = q[i] · d[i / 32]
 *   Q4_0: uint8 nib[head_dim / 2], then f16 d[head_dim / 32]; in the 16 bytes
 *         of 32-value block b, byte j holds value 32b + j in its low nibble and
 *         32b + 16 + j in its high one (GGML's q4_0 order); x = (nib − 8) · d
 *   FP8:  uint8 e[head_dim] (e4m3, cpu/kv_fp8.h), then f32 s        x[i] = e4m3(e[i]) · s
 *         (s = the row's max |x| / 448: one scale per token and KV head)
 * The values are GGML's block_q8_0 / block_q4_0 (round to nearest as GGML's
 * reference quantizers), with the scales moved after the quants so the
 * quants of a row start at the row (docs/kvpool.md, "Quantized K/V").
 * 0 for another dtype or a head_dim the type cannot hold.
 */
int64_t ifd_kv_row_bytes(ifd_dtype_t t, int head_dim);

/* RoPE pairing: NORM = interleaved pairs (x[2i], x[2i+1]) — GGUF llama;
 * NEOX = halves (x[i], x[i + n_rot/2]) — HF, Gemma. */
typedef enum {
    IFD_ROPE_NORM = 0,
    IFD_ROPE_NEOX = 2,
} ifd_rope_mode_t;

/* y = x · wᵀ: y[m,n] = Σ_k x[m,k] w[n,k] (w is a PyTorch/GGUF [out, in]
 * weight). f32 accumulate. Multi-threaded over n. The result does not depend
 * on the thread count, but it does on m (small m take a dot-product path,
 * larger m pack w on the fly): use the packed API below where a row must not
 * depend on its batch. */
int ifd_cpu_matmul_f32(float *restrict y,       /* [m, n] */
                       const float *restrict x, /* [m, k] */
                       const float *restrict w, /* [n, k] */
                       int m, int n, int k, ifd_threadpool_t *tp);

/*
 * Pre-packed weights. ifd_cpu_matmul_pack rearranges w [n, k] once (at model
 * load) into panels of NR rows (NR = 32 with AVX-512, else 16; zero padded)
 * split in k-blocks, each block [kc][NR]: the layout the packed kernels
 * stream. ifd_cpu_matmul_packed then computes y = x · wᵀ from it for any m
 * with ONE summation order per output element, so a row's result is bitwise
 * the same whatever the batch size, the thread count or the rows around it
 * (the engine's "batched equals alone" rests on this). The layout depends on
 * the ISA picked at run time: pack and multiply in the same process.
 * ifd_cpu_matmul_packed_floats gives the packed size in floats (or
 * IFD_EINVAL); wp must be 64-byte aligned.
 */
int64_t ifd_cpu_matmul_packed_floats(int n, int k);
int ifd_cpu_matmul_pack(float *restrict wp, /* [packed_floats(n, k)] */
                        const float *restrict w, /* [n, k] */
                        int n, int k);
int ifd_cpu_matmul_packed(float *restrict y,        /* [m, n] */
                          const float *restrict x,  /* [m, k] */
                          const float *restrict wp, /* packed [n, k] */
                          int m, int n, int k, ifd_threadpool_t *tp);

/* y[r] = x[r] / rms(x[r]) * w, rms = sqrt(mean(x²) + eps). y may equal x.
 * Σx² in double, then (x · scale) · w in float, as ggml. IFD_EINVAL: dim ≤ 0, eps < 0. */
int ifd_cpu_rmsnorm(float *y,       /* [rows, dim] */
                    const float *x, /* [rows, dim] */
                    const float *w, /* [dim] */
                    int rows, int dim, float eps);

/* Rotates the first n_rot dims of every head in place.
 * θ_i = pos · freq_scale · base^(−2i/n_rot) / (freq_factors ? freq_factors[i] : 1),
 * with base^(−2i/n_rot)·pos accumulated by repeated float multiplication
 * exactly as llama.cpp does (rope.c). IFD_EINVAL: n_rot odd, ≤ 0 or > head_dim;
 * IFD_ENOTSUP: another mode or n_rot > 1024. */
int ifd_cpu_rope(float *x,             /* [n_tok, n_heads, head_dim] */
                 const int32_t *pos,   /* [n_tok] */
                 int n_tok, int n_heads, int head_dim, int n_rot, float base, float freq_scale,
                 const float *freq_factors, /* [n_rot/2] or NULL */
                 ifd_rope_mode_t mode);

/* Numerically stable softmax of each row, in place (row sums in double). */
int ifd_cpu_softmax(float *x, /* [rows, n] */ int rows, int n);

/* The gated activations (the CPU functions below, ifd_cuda_glu, the
 * backends' glu op). */
typedef enum {
    IFD_GLU_SWIGLU = 0,     /* silu(g) * u, silu(g) = g / (1 + e^-g) (Llama) */
    IFD_GLU_GEGLU_TANH = 1, /* gelu_tanh(g) * u (Gemma) */
} ifd_glu_t;

/* out = silu(gate) · up (SwiGLU) / gelu_tanh(gate) · up (GeGLU). out may
 * equal gate or up. */
int ifd_cpu_swiglu(float *out, const float *gate, const float *up, /* [n] each */ int64_t n);
int ifd_cpu_geglu_tanh(float *out, const float *gate, const float *up, /* [n] */ int64_t n);

/* out = gelu_tanh(x) elementwise (SigLIP's MLP; the gelu of
 * ifd_cpu_geglu_tanh). out may equal x. */
int ifd_cpu_gelu_tanh(float *out, const float *x, /* [n] */ int64_t n);

/* ---- vision (vision.c: the ViT encoder's kernels) ---- */

/* y[r] = (x[r] − mean) / sqrt(var + eps) · w + b (b NULL: no bias; mean and
 * biased var in double). y may equal x. IFD_EINVAL: dim ≤ 0, rows < 0,
 * eps < 0 or NaN. */
int ifd_cpu_layernorm(float *y,       /* [rows, dim] */
                      const float *x, /* [rows, dim] */
                      const float *w, /* [dim] */
                      const float *b, /* [dim] or NULL */
                      int rows, int dim, float eps);

/* Average pooling of a rows × side grid of channel vectors (row-major: x[i ·
 * side + j]) over k × k windows with stride k: out[pi · (side / k) + pj] =
 * mean of the window (Gemma 3's projector: torch AvgPool2d over the square
 * grid, rows = side; fewer rows pool a band of it, the same bits as the
 * band's part of the whole). IFD_EINVAL when k does not divide rows and
 * side, or a size ≤ 0. */
int ifd_cpu_avg_pool2d(float *out,     /* [(rows / k) · (side / k), channels] */
                       const float *x, /* [rows · side, channels] */
                       int rows, int side, int k, int channels);

/* Dense bidirectional multi-head attention over ONE sequence of n tokens
 * (a ViT's; no KV pool, no mask): qkv row t holds q (n_heads · head_dim),
 * then k, then v; out[t, h] = Σ_u softmax_u(scale · q_t,h · k_u,h) v_u,h
 * for the query rows t in [q0, q1) only (other rows of out untouched),
 * over all n keys. f32 packed matmuls over blocks of 256 query rows
 * (threaded through tp): a row's bits do not depend on the range it is
 * computed in, so ranges that cover [0, n) equal one call over it.
 * IFD_EINVAL: a size ≤ 0, a range outside [0, n]; IFD_ENOMEM. */
int ifd_cpu_dense_attention(float *out,       /* [n, n_heads · head_dim] */
                            const float *qkv, /* [n, 3 · n_heads · head_dim] */
                            int n, int q0, int q1, int n_heads, int head_dim, float scale,
                            ifd_threadpool_t *tp);

/* The same in two halves, for a caller that computes the query rows in
 * pieces (the vision encode's budgeted steps): ifd_cpu_dense_kv_pack packs
 * every head's K and Vᵀ of qkv once into kv (the caller's, 64-byte aligned,
 * ifd_cpu_dense_kv_floats floats), and ifd_cpu_dense_attention_kv computes
 * rows [q0, q1) from those packs and qkv's q — the same bits as
 * ifd_cpu_dense_attention, which is the two with kv allocated per call.
 * kv stays valid while qkv's K and V rows do not change. IFD_EINVAL (sizes,
 * a range outside [0, n], kv NULL or misaligned), IFD_ENOMEM (the per-call
 * scratch: per thread, a head's K and Vᵀ to pack, or IFD__ATT_ROWS query
 * rows and their n scores). */
int64_t ifd_cpu_dense_kv_floats(int n, int n_heads, int head_dim);
int ifd_cpu_dense_kv_pack(float *kv, const float *qkv, int n, int n_heads, int head_dim,
                          ifd_threadpool_t *tp);
int ifd_cpu_dense_attention_kv(float *out, const float *qkv, const float *kv, int n, int q0,
                               int q1, int n_heads, int head_dim, float scale,
                               ifd_threadpool_t *tp);

/*
 * Paged KV cache, one layer. K and V each live in a region laid out
 * [block][kv_head][token_in_block] of rows of ifd_kv_row_bytes(dtype,
 * head_dim) bytes; the block id indexes the region (64-bit offsets).
 */
typedef struct {
    void *k;           /* layer's K region base */
    void *v;           /* layer's V region base */
    ifd_dtype_t dtype; /* F32, F16, BF16, Q8_0 or Q4_0 */
    int block_size;    /* tokens per block (16 by default) */
    int n_kv_heads;
    int head_dim;
} ifd_kv_layer_t;

/* Dequantizes (or converts) one K/V row of head_dim values in `dtype` to
 * f32: the values the attention kernels (CPU and CUDA) compute with.
 * IFD_ENOTSUP as ifd_kv_row_bytes gives 0. */
int ifd_cpu_kv_dequant_row(float *restrict y, /* [head_dim] */
                           const void *restrict row, ifd_dtype_t dtype, int head_dim);

/* Writes each token's K and V rows into its slot (slot = block * block_size
 * + offset); slot < 0 means padding and is skipped. F16/BF16 round to
 * nearest even; Q8_0/Q4_0 quantize each 32 values as GGML's reference
 * quantizers (q8_0: d = amax / 127, q = round(x / d); q4_0: d = −max / 8
 * with max the value of largest magnitude, q = min(15, (int)(x / d + 8.5)));
 * FP8 scales each row by s = amax / 448 (f32) and rounds x · (1 / s) to e4m3
 * (nearest even, saturating; s = 0 for a zero row): the bytes the CUDA
 * RoPE+KV write produces. Single-threaded. IFD_ENOTSUP for another dtype, or a block type with a
 * head_dim that is not a multiple of 32. */
int ifd_cpu_kv_write(const ifd_kv_layer_t *kv,
                     const float *k,       /* [n_tok, n_kv_heads, head_dim] */
                     const float *v,       /* [n_tok, n_kv_heads, head_dim] */
                     const int64_t *slot,  /* [n_tok] */
                     int n_tok);

/* Rotates rows of head_dim values (q or K heads after RoPE) into the basis
 * the pool's K rows of `dtype` are kept in (kv_rot.h): for Q8_0/Q4_0 with
 * head_dim a multiple of 64, each run of n = ifd_kv_k_rot(dtype, head_dim)
 * values is multiplied by the orthonormal Walsh-Hadamard matrix; for any
 * other dtype or head_dim nothing changes. The RoPE+KV write applies it to
 * q and K alike (q·k is unchanged) before ifd_cpu_kv_write, whose rows are
 * then H·k. Single-threaded, in place. IFD_EINVAL for n_rows < 0 or
 * head_dim <= 0. */
int ifd_cpu_kv_rotate(float *x, /* [n_rows, head_dim] */
                      int64_t n_rows, int head_dim, ifd_dtype_t dtype);

/*
 * Causal grouped-query attention over the paged cache for a ragged batch of
 * query tokens. Token t belongs to sequence seq[t] and sits at position
 * pos[t]; it attends to that sequence's cached positions
 * [max(0, pos[t] − window + 1), last[t]] (window 0 = unlimited; last NULL:
 * last[t] = pos[t], causal), whose K/V must already be written. last[t] >
 * pos[t] is Gemma 3's image block: a token of an image also sees the later
 * tokens of its image (last[t] = the image's last position), while the
 * window still starts from pos[t] (transformers' AND(sliding window,
 * OR(causal, same image)); docs/vision.md). Position p of sequence s lives in block
 * block_tables[s * max_blocks + p / block_size] at offset p % block_size.
 * Query head h uses KV head h / (n_heads / n_kv_heads).
 * out[t, h] = Σ_p softmax_p(scale · q·k_p) v_p, f32 accumulation (online
 * softmax over runs of ≤ 16 positions inside partitions of 64 positions,
 * folded in order); only those positions are read, so other slots may hold
 * anything. seq[t] < 0 marks a padding row: its output is zeros and nothing
 * is read. Each output is computed in an order that depends only on the
 * token's own positions (a lone token's partitions may run on several
 * threads, folded in the same order), so a row's result does not depend on
 * the batch or the thread count. Allocates a small workspace when it splits
 * (falls back to one thread per item if that fails).
 * Q8_0/Q4_0 K/V are read in place, and the query is quantized first, once
 * per (token, head), as llama.cpp's q8_0 vec-dot does: int8 per value, one
 * f32 scale per 32 values (d = amax/127, q = round(x/d)); q·k is then an
 * integer dot product per 32-value block times the two scales, and p·v
 * runs on the unscaled V quants times p·(V's block scale). So over these
 * types the result is that of the f32 kernel on the dequantized K/V and
 * the dequantized query (up to f32 summation order; the same on every ISA
 * path up to that order, and batch-invariant as above). The quantized
 * queries live in a buffer allocated per call (n_tok · n_heads rows).
 * IFD_EINVAL: bad sizes, n_heads not a multiple of n_kv_heads, window < 0,
 * last[t] < pos[t], a needed block-table entry < 0 or last[t] / block_size
 * ≥ max_blocks
 * (checked before any work); IFD_ENOTSUP: head_dim > 256, more than 32
 * query heads per KV head, or another dtype; IFD_ENOMEM: no memory for the
 * quantized queries (Q8_0/Q4_0). FP8 K/V are dequantized a chunk at a time
 * into f32 (every ISA path), with the same result.
 */
int ifd_cpu_paged_attention(float *restrict out,       /* [n_tok, n_heads, head_dim] */
                            const float *restrict q,   /* [n_tok, n_heads, head_dim] */
                            const ifd_kv_layer_t *kv,
                            const int32_t *seq,          /* [n_tok] */
                            const int32_t *pos,          /* [n_tok] */
                            const int32_t *last,         /* [n_tok] or NULL */
                            const int32_t *block_tables, /* [n_seqs, max_blocks] */
                            int max_blocks, int n_tok, int n_heads, float scale, int window,
                            ifd_threadpool_t *tp);

/* fp16 / bf16 <-> f32 (round to nearest even; NaN stays NaN). */
float ifd_f16_to_f32(uint16_t h);
uint16_t ifd_f32_to_f16(float f);
float ifd_bf16_to_f32(uint16_t h);
uint16_t ifd_f32_to_bf16(float f);

/*
 * Dequantizes n elements (a multiple of the type's block size) of ggml type
 * `type` (ifd_ggml_type_t) at x into y. Supported: F32, F16, BF16, Q4_0,
 * Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL (others:
 * IFD_ENOTSUP; n not a block multiple: IFD_EINVAL).
 */
int ifd_cpu_dequantize(float *restrict y,       /* [n] */
                       const void *restrict x,  /* n elements of `type`, packed blocks */
                       uint32_t type, int64_t n);

#endif
