/*
 * embed.h — the embedding gather on the GPU (embed.cu). See cuda_types.h
 * for the conventions every launcher follows.
 */
#ifndef IFD_CUDA_EMBED_H
#define IFD_CUDA_EMBED_H

#include "cuda_types.h"

IFD_CUDA_API_BEGIN

/*
 * out[t] = table[ids[t]] * scale, converted to f32 (the product is one f32
 * multiply; scale 1 gives the table's values exactly). Gemma passes
 * scale = sqrt(n_embd). An id outside [0, vocab) gives a row of NaN, so a
 * bad token id cannot pass unnoticed. table_dtype: F32, F16 or BF16 (a
 * quantized table is dequantized at load, see dequant.h).
 * Returns 0, IFD_EINVAL, IFD_ENOTSUP (table_dtype), IFD_ECUDA.
 */
int ifd_cuda_embed(float *IFD_CUDA_RESTRICT out,         /* [n_tok, dim] */
                   const void *IFD_CUDA_RESTRICT table,  /* [vocab, dim] of table_dtype */
                   const int32_t *IFD_CUDA_RESTRICT ids, /* [n_tok] */
                   int n_tok, int dim, int vocab, ifd_dtype_t table_dtype, float scale,
                   ifd_cuda_stream_t stream);

IFD_CUDA_API_END

#endif
