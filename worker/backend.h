/*
 * backend.h — the compute backend interface the model code is written
 * against, once for every device: the CPU backend (backend_cpu.c) and the
 * CUDA backend implement the same table of operations. The model code in
 * worker/ never calls a device API directly.
 *
 * Memory: every float/int pointer handed to a compute op is backend memory
 * (host memory for the CPU backend, device memory for CUDA), obtained from
 * ops->alloc and filled with ops->upload. Weights are ifd_weight_t views of
 * backend memory. Ops are enqueued in order; ops->sync waits for them.
 *
 * Threading: a backend is used by one thread at a time (the worker's engine
 * thread); it may use its own threads internally (the CPU thread pool).
 * Errors: ops return 0 or a negative IFD_E* code.
 */
#ifndef IFD_BACKEND_H
#define IFD_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu/cpu_kernels.h"

/* A weight matrix [rows, cols] (row-major: `rows` outputs of `cols` inputs,
 * the GGUF/PyTorch [out, in] convention) or a vector (rows = 1). */
typedef struct {
    void *data;        /* backend memory */
    ifd_dtype_t dtype; /* F32 today; quantized kinds later */
    int64_t rows;
    int64_t cols;
    bool packed;       /* data is in the backend's matmul layout (prepare_matmul) */
} ifd_weight_t;

typedef enum {
    IFD_GLU_SWIGLU = 0, /* silu(gate) * up — Llama */
    IFD_GLU_GEGLU_TANH = 1, /* gelu_tanh(gate) * up — Gemma */
} ifd_glu_t;

typedef struct ifd_backend ifd_backend_t;

typedef struct {
    const char *name;
    bool host_memory; /* backend memory is directly addressable by the host */
    void (*destroy)(ifd_backend_t *be);

    int (*alloc)(ifd_backend_t *be, size_t bytes, void **out);
    void (*free)(ifd_backend_t *be, void *p);
    int (*upload)(ifd_backend_t *be, void *dst, const void *src, size_t bytes);
    int (*download)(ifd_backend_t *be, void *dst, const void *src, size_t bytes);
    int (*sync)(ifd_backend_t *be);
    /* Optional (may be NULL): converts a row-major matrix used only by
     * matmul into the backend's preferred layout, in place (w->data is
     * replaced and the old memory freed; w->packed set). */
    int (*prepare_matmul)(ifd_backend_t *be, ifd_weight_t *w);

    /* out[i] = emb[tokens[i]] * scale */
    int (*embed)(ifd_backend_t *be, float *out /* [n, cols] */, const ifd_weight_t *emb,
                 const int32_t *tokens /* [n] */, int n, float scale);
    /* y = x · wᵀ */
    int (*matmul)(ifd_backend_t *be, float *y /* [m, w->rows] */, const float *x /* [m, w->cols] */,
                  const ifd_weight_t *w, int m);
    int (*rmsnorm)(ifd_backend_t *be, float *y /* [rows, w->cols] */, const float *x,
                   const ifd_weight_t *w, int rows, float eps);
    /* y += x */
    int (*add)(ifd_backend_t *be, float *y, const float *x, int64_t n);
    int (*rope)(ifd_backend_t *be, float *x /* [n_tok, n_heads, head_dim] */,
                const int32_t *pos /* [n_tok] */, int n_tok, int n_heads, int head_dim, int n_rot,
                float base, float freq_scale, const float *freq_factors /* [n_rot/2] or NULL */,
                ifd_rope_mode_t mode);
    int (*kv_write)(ifd_backend_t *be, const ifd_kv_layer_t *kv, const float *k, const float *v,
                    const int64_t *slot /* [n_tok] */, int n_tok);
    int (*attention)(ifd_backend_t *be, float *out /* [n_tok, n_heads, head_dim] */,
                     const float *q, const ifd_kv_layer_t *kv, const int32_t *seq,
                     const int32_t *pos, const int32_t *block_tables, int max_blocks, int n_tok,
                     int n_heads, float scale, int window);
    int (*glu)(ifd_backend_t *be, float *out, const float *gate, const float *up, int64_t n,
               ifd_glu_t kind);
    /* out[i] = x[rows[i]] */
    int (*gather_rows)(ifd_backend_t *be, float *out /* [n_rows, dim] */,
                       const float *x /* [*, dim] */, const int32_t *rows /* [n_rows] */,
                       int n_rows, int dim);
} ifd_backend_ops_t;

struct ifd_backend {
    const ifd_backend_ops_t *ops;
};

/* The CPU backend with n_threads compute threads (0 = all online CPUs).
 * 0 or IFD_ENOMEM. Destroy with be->ops->destroy(be). */
int ifd_backend_cpu_create(ifd_backend_t **out, int n_threads);

#endif
