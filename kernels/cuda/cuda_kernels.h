/*
 * cuda_kernels.h — every CUDA kernel launcher of kernels/cuda, for the CUDA
 * backend: one header to include. Each launcher lives in its own header
 * next to its .cu file (one operation per file); cuda_types.h states the
 * conventions they share (device pointers, stream order, error codes,
 * threading). Built only with the CUDA backend (IFD_HAVE_CUDA).
 */
#ifndef IFD_CUDA_KERNELS_H
#define IFD_CUDA_KERNELS_H

#include "cuda_types.h"

#include "attn_decode.h"
#include "attn_prefill.h"
#include "convert.h"
#include "dequant.h"
#include "embed.h"
#include "glu.h"
#include "rmsnorm.h"
#include "rope_kv.h"
#include "sample.h"
#include "vision.h"

#endif
