/*
 * backend_cuda.c — the CUDA backend: device memory, one stream, the kernels
 * of kernels/cuda and cuBLASLt bf16 GEMMs with f32 accumulation.
 *
 * Storage: projection matrices and the embedding table are bf16 on the
 * device, dequantized there once at load (ifd_cuda_dequantize_bf16 on the
 * file's raw blocks; types it lacks go through ifd_cpu_dequantize on the
 * host first); a projection's parts are one merged [Σ rows, cols] bf16
 * matrix, so QKV and gate|up are one GEMM each. Norm weights, biases and
 * rope factors are f32. Activations: the residual stream and projection
 * outputs f32, projection inputs bf16 (mm_in_dtype).
 *
 * Ops: embed, rmsnorm (+ residual add), rope_kv (RoPE + KV write; QK-norm
 * first), glu and gather_rows (the embedding gather on an f32 table) are one
 * kernel each, and so are the vision tower's layernorm (+ residual add),
 * add_rows, gelu, dense_attention and avg_pool2d (kernels/cuda/vision.h);
 * attention runs the decode kernel (split-K with the caller's
 * workspace) when every sequence brings one token or the batch is not
 * varlen, else the prefill kernel, into an f32 buffer converted to bf16.
 * GEMM: row-major y[m, N] = x[m, K] · W[N, K]ᵀ is, column-major,
 * yᵀ (N × m) = op_T(W as K × N) · xᵀ (K × m); a bias is cuBLASLt's BIAS
 * epilogue. Logits come back to the host (download).
 *
 * GEMM algorithms: cublasLtMatmulAlgoGetHeuristic once per problem shape
 * (N, K, m, bias or not), kept with the shape's matrix layouts in a small
 * open-addressed table (cleared whole when full: shapes are few — the
 * projections times the step sizes seen), never per call.
 *
 * Staging: uploads of up to IFD__STAGE_BYTES are copied into one pinned
 * buffer (cudaHostAlloc at create) and go up with cudaMemcpyAsync from
 * there; the buffer fills front to back and is reused after the next
 * synchronisation (sync, download, or a full buffer, which synchronises
 * first). Larger copies (weights at load, big logits downloads) go from
 * pageable memory directly. Downloads of up to that size land in the
 * staging buffer and are copied out after the stream synchronises.
 *
 * Asynchronous downloads (download_async, the KV host tier's copies): a
 * second, lowest-priority stream made on first use; each copy waits on an
 * event recorded on the compute stream (so it reads what the steps before
 * wrote) and copy_fence records one of a ring of IFD__FENCES events behind
 * the copies. The compute stream never waits on the copy stream for a
 * download: the caller keeps the source blocks from being written until
 * copy_done. Asynchronous uploads (upload_async, a tier hit's block) go
 * on the same stream behind the same fences; copy_wait makes the compute
 * stream wait (cudaStreamWaitEvent) for one before the blocks are read.
 *
 * Scratch (rope_kv's contiguous K, attention's f32 output, the sampler's
 * arrays) grows geometrically and is then reused: once the largest batch
 * has run no step allocates (tests/gpu/test_cuda_step.c counts cudaMalloc
 * calls on the emulator). A buffer that grows is not freed but retired
 * (freed at destroy): a graph recorded earlier may still use it, and the
 * retired ones add up to less than the buffer they were replaced by.
 *
 * Sampling (ops->sample): steps 1-3 of sampler.h (bias, penalties) by
 * ifd_cuda_apply_penalties, steps 4-7 by ifd_cuda_sample, on the logits in
 * place; the host builds, per row, the bias entries and the DISTINCT
 * history ids with their counts (a vocab-sized counter array that is all
 * zeros between calls, as in the CPU sampler); only the token ids come
 * back. Rows that need a grammar mask or logprobs never get here (the
 * model samples them on the host).
 *
 * Graphs (ops->graph_*): stream capture on the one stream, graph_end
 * instantiates; kept per key until replaced or destroy.
 *
 * Every CUDA and cuBLASLt call is checked and logged where it fails
 * (IFD_ECUDA). Threading: as backend.h — one thread at a time; the device
 * is made current in create and in every op that could run on another
 * thread's context (none today: the engine thread only).
 *
 * Exact mode (f32 = true at create): f32 weights, activations and GEMMs
 * (CUBLAS_COMPUTE_32F, no TF32), twice the memory, for checking the
 * backend against the CPU to f32 rounding rather than bf16's.
 */
#include "backend.h"

#include "cuda/cuda_kernels.h"
#include "cuda/kvseg_cuda.h"
#include "error.h"
#include "log.h"

/* cuBLASLt's header has a K&R-style declaration (strict-prototypes). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#pragma GCC diagnostic pop
#include <cuda_runtime_api.h>

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { IFD__LT_WORKSPACE = 32 << 20, IFD__STAGE_BYTES = 4 << 20, IFD__MM_CACHE = 256 };

/* A GEMM problem (row-major y[m, N] = x[m, K] · W[N, K]ᵀ (+ bias)) with its
 * layouts and the algorithm the heuristic chose. */
typedef struct {
    uint64_t n, k;
    int m;
    bool bias, used;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
} ifd__mm_entry_t;

/* The sampler's arrays, host (h_) and device (d_), grown geometrically. */
typedef struct {
    ifd_cuda_sample_params_t *h_sp, *d_sp;
    ifd_cuda_penalty_row_t *h_pr, *d_pr;
    size_t sp_cap, pr_cap;
    ifd_cuda_logit_bias_t *h_lb, *d_lb;
    size_t bias_cap;
    ifd_cuda_hist_t *h_hh, *d_hh;
    size_t h_hist_cap, d_hist_bytes; /* host: before dedup; device: distinct ids */
    uint32_t *counts; /* [vocab] zero between calls */
    int32_t vocab;
    /* grammar masks: the logits row of each, and the packed bits */
    int32_t *h_mrow, *d_mrow;
    size_t mrow_cap;
    uint32_t *d_mask;
    size_t mask_bytes;
    /* logprobs: one request per scored row; raw rows copied before bias,
     * penalties and masks change them */
    ifd_cuda_logprob_req_t *h_lq, *d_lq;
    size_t lq_cap;
    float *d_raw;
    size_t raw_bytes;
    /* logprob_token_ids of the scored rows, one after another */
    int32_t *h_lpid, *d_lpid;
    size_t lpid_cap;
    /* what comes back: the tokens [n_rows], then the logprobs [n_lp], then
     * at more_off the entries of the rows with more than
     * IFD_CUDA_MAX_LOGPROBS (ifd_cuda_lp_entry_t, each row's in turn) */
    unsigned char *h_out, *d_out;
    size_t out_cap, more_off;
} ifd__samp_t;

#define IFD__FENCES 64 /* copy fences in flight at most (an older one is waited for) */

typedef struct {
    ifd_backend_t base;
    int device;
    bool f32; /* exact mode: f32 weights and activations, f32 GEMMs */
    cudaStream_t stream;
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t mm;      /* W^T · x, no epilogue */
    cublasLtMatmulDesc_t mm_bias; /* the same + bias */
    void *lt_ws;
    cublasLtMatmulPreference_t pref;
    ifd__mm_entry_t mm_cache[IFD__MM_CACHE];
    int mm_cached;
    /* pinned staging */
    unsigned char *stage;
    size_t stage_used;
    /* asynchronous downloads (download_async, made on first use): a copy
     * stream joined to the compute stream by an event before each copy,
     * and a ring of fence events; tickets below fence_done have landed */
    cudaStream_t copy_stream;
    cudaEvent_t join;
    cudaEvent_t fence[IFD__FENCES];
    uint64_t fence_next, fence_done;
    bool joined; /* the copy stream waits for the compute stream's work so far (until a fence) */
    /* scratch, grown on demand (old buffers retired) */
    float *k_tmp;
    size_t k_tmp_bytes;
    float *attn_f32;
    size_t attn_f32_bytes;
    ifd__samp_t samp;
    void **retired; /* grown-out-of scratch, freed at destroy */
    int n_retired;
    /* graphs */
    bool capturing;
    cudaGraphExec_t graph[IFD_BACKEND_MAX_GRAPHS];
    /* the KV pool's device segments (kv_provider), made on first use */
    ifd_cuda_kvseg_t *kvseg;
} ifd__cuda_backend_t;

static ifd__cuda_backend_t *ifd__cu(ifd_backend_t *be)
{
    return (ifd__cuda_backend_t *)be;
}

static cudaStream_t ifd__st(ifd_backend_t *be)
{
    return ifd__cu(be)->stream;
}

#define IFD__CK(call)                                                                       \
    do {                                                                                    \
        cudaError_t ifd__e = (call);                                                        \
        if (ifd__e != cudaSuccess) {                                                        \
            IFD_ERROR("cuda backend: %s: %s", #call, cudaGetErrorString(ifd__e));           \
            return IFD_ECUDA;                                                               \
        }                                                                                   \
    } while (0)

#define IFD__LT(call)                                                                       \
    do {                                                                                    \
        cublasStatus_t ifd__s = (call);                                                     \
        if (ifd__s != CUBLAS_STATUS_SUCCESS) {                                              \
            IFD_ERROR("cuda backend: %s: %s", #call, cublasLtGetStatusString(ifd__s));      \
            return IFD_ECUDA;                                                               \
        }                                                                                   \
    } while (0)

static void ifd__mm_cache_clear(ifd__cuda_backend_t *c)
{
    for (int i = 0; i < IFD__MM_CACHE; i++) {
        ifd__mm_entry_t *e = &c->mm_cache[i];
        if (!e->used)
            continue;
        (void)cublasLtMatrixLayoutDestroy(e->la);
        (void)cublasLtMatrixLayoutDestroy(e->lb);
        (void)cublasLtMatrixLayoutDestroy(e->ld);
        memset(e, 0, sizeof *e);
    }
    c->mm_cached = 0;
}

static void ifd__samp_free(ifd__samp_t *sp)
{
    free(sp->h_sp);
    free(sp->h_pr);
    free(sp->h_lb);
    free(sp->h_hh);
    free(sp->counts);
    free(sp->h_mrow);
    free(sp->h_lq);
    free(sp->h_lpid);
    free(sp->h_out);
    (void)cudaFree(sp->d_sp);
    (void)cudaFree(sp->d_pr);
    (void)cudaFree(sp->d_lb);
    (void)cudaFree(sp->d_hh);
    (void)cudaFree(sp->d_mrow);
    (void)cudaFree(sp->d_mask);
    (void)cudaFree(sp->d_lq);
    (void)cudaFree(sp->d_lpid);
    (void)cudaFree(sp->d_raw);
    (void)cudaFree(sp->d_out);
    memset(sp, 0, sizeof *sp);
}

static void ifd__cuda_destroy(ifd_backend_t *be)
{
    ifd__cuda_backend_t *c = ifd__cu(be);
    if (c->capturing) {
        cudaGraph_t g = NULL;
        (void)cudaStreamEndCapture(c->stream, &g);
        if (g)
            (void)cudaGraphDestroy(g);
    }
    if (c->stream)
        (void)cudaStreamSynchronize(c->stream);
    if (c->copy_stream) {
        (void)cudaStreamSynchronize(c->copy_stream);
        (void)cudaStreamDestroy(c->copy_stream);
        (void)cudaEventDestroy(c->join);
        for (int i = 0; i < IFD__FENCES; i++)
            (void)cudaEventDestroy(c->fence[i]);
    }
    for (int i = 0; i < IFD_BACKEND_MAX_GRAPHS; i++)
        if (c->graph[i])
            (void)cudaGraphExecDestroy(c->graph[i]);
    ifd__mm_cache_clear(c);
    if (c->pref)
        (void)cublasLtMatmulPreferenceDestroy(c->pref);
    ifd__samp_free(&c->samp);
    for (int i = 0; i < c->n_retired; i++)
        (void)cudaFree(c->retired[i]);
    free(c->retired);
    if (c->stage)
        (void)cudaFreeHost(c->stage);
    if (c->mm)
        (void)cublasLtMatmulDescDestroy(c->mm);
    if (c->mm_bias)
        (void)cublasLtMatmulDescDestroy(c->mm_bias);
    if (c->lt)
        (void)cublasLtDestroy(c->lt);
    (void)cudaFree(c->lt_ws);
    (void)cudaFree(c->k_tmp);
    (void)cudaFree(c->attn_f32);
    if (c->stream)
        (void)cudaStreamDestroy(c->stream);
    ifd_cuda_kvseg_destroy(c->kvseg);
    free(c);
}

/* The KV pool's device memory: VMM with a POSIX-fd handle (what the router
 * holds for the daemon's life), else the IPC fallback. $IFD_KVSEG_FORCE_IPC=1
 * forces the fallback (to test and diagnose it on a device with VMM). */
static const ifd_kvseg_provider_t *ifd__cuda_kv_provider(ifd_backend_t *be)
{
    ifd__cuda_backend_t *c = ifd__cu(be);
    if (!c->kvseg) {
        const char *f = getenv("IFD_KVSEG_FORCE_IPC");
        /* on this backend's device, whichever pool device it serves */
        if (ifd_cuda_kvseg_create(f && *f && strcmp(f, "0") != 0, c->device, &c->kvseg))
            return NULL;
    }
    return ifd_cuda_kvseg_provider(c->kvseg);
}

static int ifd__cuda_alloc(ifd_backend_t *be, size_t bytes, void **out)
{
    (void)be;
    *out = NULL;
    cudaError_t e = cudaMalloc(out, bytes ? bytes : 16);
    if (e != cudaSuccess) {
        IFD_ERROR("cuda backend: cudaMalloc(%zu): %s", bytes, cudaGetErrorString(e));
        *out = NULL;
        return e == cudaErrorMemoryAllocation ? IFD_ENOMEM : IFD_ECUDA;
    }
    return 0;
}

static void ifd__cuda_free(ifd_backend_t *be, void *p)
{
    (void)be;
    if (p)
        (void)cudaFree(p);
}

/* Host-side operations that a graph recording cannot hold. */
static int ifd__not_capturing(ifd__cuda_backend_t *c, const char *what)
{
    if (!c->capturing)
        return 0;
    IFD_ERROR("cuda backend: %s while recording a graph", what);
    return IFD_EINVAL;
}

static int ifd__cuda_sync(ifd_backend_t *be)
{
    ifd__cuda_backend_t *c = ifd__cu(be);
    int rc = ifd__not_capturing(c, "sync");
    if (rc)
        return rc;
    IFD__CK(cudaStreamSynchronize(c->stream));
    c->stage_used = 0; /* every staged copy has landed */
    return 0;
}

/* bytes (<= IFD__STAGE_BYTES) of the staging buffer, 256-byte aligned;
 * synchronises first when the buffer is full. */
static int ifd__stage(ifd_backend_t *be, size_t bytes, unsigned char **out)
{
    ifd__cuda_backend_t *c = ifd__cu(be);
    const size_t b = (bytes + 255) & ~(size_t)255;
    int rc;
    if (c->stage_used + b > IFD__STAGE_BYTES && (rc = ifd__cuda_sync(be)))
        return rc;
    *out = c->stage + c->stage_used;
    c->stage_used += b;
    return 0;
}

static int ifd__cuda_upload(ifd_backend_t *be, void *dst, const void *src, size_t bytes)
{
    ifd__cuda_backend_t *c = ifd__cu(be);
    int rc = ifd__not_capturing(c, "upload");
    if (rc || !bytes)
        return rc;
    if (bytes > IFD__STAGE_BYTES) {
        IFD__CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
        return 0;
    }
    unsigned char *st;
    if ((rc = ifd__stage(be, bytes, &st)))
        return rc;
    memcpy(st, src, bytes);
    IFD__CK(cudaMemcpyAsync(dst, st, bytes, cudaMemcpyHostToDevice, c->stream));
    return 0;
}

static int ifd__cuda_download(ifd_backend_t *be, void *dst, const void *src, size_t bytes)
{
    ifd__cuda_backend_t *c = ifd__cu(be);
    int rc = ifd__not_capturing(c, "download");
    if (rc)
        return rc;
    if (bytes > IFD__STAGE_BYTES || !bytes) {
        if (bytes)
            IFD__CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
        return ifd__cuda_sync(be);
    }
    unsigned char *st;
    if ((rc = ifd__stage(be, bytes, &st)))
        return rc;
    IFD__CK(cudaMemcpyAsync(st, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    if ((rc = ifd__cuda_sync(be)))
        return rc;
    memcpy(dst, st, bytes);
    return 0;
}

static int ifd__cuda_host_alloc(ifd_backend_t *be, size_t bytes, void **out)
{
    (void)be;
    IFD__CK(cudaHostAlloc(out, bytes ? bytes : 1, cudaHostAllocDefault));
    return 0;
}

static void ifd__cuda_host_free(ifd_backend_t *be, void *p)
{
    (void)be;
    if (p)
        (void)cudaFreeHost(p);
}

/* The copy stream and its events, on the first asynchronous download. The
 * stream has the lowest priority: a copy never delays a step's kernels. */
static int ifd__copy_stream(ifd__cuda_backend_t *c)
{
    if (c->copy_stream)
        return 0;
    IFD__CK(cudaEventCreateWithFlags(&c->join, cudaEventDisableTiming));
    for (int i = 0; i < IFD__FENCES; i++)
        IFD__CK(cudaEventCreateWithFlags(&c->fence[i], cudaEventDisableTiming));
    IFD__CK(cudaStreamCreateWithPriority(&c->copy_stream, cudaStreamNonBlocking, 0));
    return 0;
}

static int ifd__cuda_download_async(ifd_backend_t *be, void *dst, const void *src, size_t bytes)
{
    ifd__cuda_backend_t *c = ifd__cu(be);
    int rc = ifd__not_capturing(c, "download_async");
    if (rc || (rc = ifd__copy_stream(c)))
        return rc;
    /* after the compute stream's work so far (the step that wrote src): one
     * join per batch of copies, the first after a fence */
    if (!c->joined) {
        IFD__CK(cudaEventRecord(c->join, c->stream));
        IFD__CK(cudaStreamWaitEvent(c->copy_stream, c->join, 0));
        c->joined = true;
    }
    IFD__CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->copy_stream));
    return 0;
}

/* backend.h, upload_async: download_async's other direction (same join,
 * stream and fences). */
static int ifd__cuda_upload_async(ifd_backend_t *be, void *dst, const void *src, size_t bytes)
{
    ifd__cuda_backend_t *c = ifd__cu(be);
    int rc = ifd__not_capturing(c, "upload_async");
    if (rc || (rc = ifd__copy_stream(c)))
        return rc;
    if (!c->joined) { /* after the compute stream's work so far (dst's last readers) */
        IFD__CK(cudaEventRecord(c->join, c->stream));
        IFD__CK(cudaStreamWaitEvent(c->copy_stream, c->join, 0));
        c->joined = true;
    }
    IFD__CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->copy_stream));
    return 0;
}

/* backend.h, copy_wait: the compute stream waits for ticket's fence. */
static int ifd__cuda_copy_wait(ifd_backend_t *be, uint64_t ticket)
{
    ifd__cuda_backend_t *c = ifd__cu(be);
    int rc = ifd__not_capturing(c, "copy_wait");
    if (rc)
        return rc;
    if (ticket >= c->fence_next)
        return IFD_EINVAL;
    if (ticket < c->fence_done)
        return 0; /* landed (and its event may have been reused since) */
    IFD__CK(cudaStreamWaitEvent(c->stream, c->fence[ticket % IFD__FENCES], 0));
    return 0;
}

static int ifd__cuda_copy_fence(ifd_backend_t *be, uint64_t *out)
{
    ifd__cuda_backend_t *c = ifd__cu(be);
    int rc = ifd__not_capturing(c, "copy_fence");
    if (rc || (rc = ifd__copy_stream(c)))
        return rc;
    const uint64_t t = c->fence_next;
    cudaEvent_t ev = c->fence[t % IFD__FENCES];
    if (t >= IFD__FENCES && c->fence_done <= t - IFD__FENCES) { /* its event is reused */
        IFD__CK(cudaEventSynchronize(ev));
        c->fence_done = t - IFD__FENCES + 1;
    }
    IFD__CK(cudaEventRecord(ev, c->copy_stream));
    c->fence_next = t + 1;
    c->joined = false;
    *out = t;
    return 0;
}

static int ifd__cuda_copy_done(ifd_backend_t *be, uint64_t ticket, bool wait)
{
    ifd__cuda_backend_t *c = ifd__cu(be);
    if (ticket >= c->fence_next)
        return IFD_EINVAL;
    if (ticket < c->fence_done)
        return 1;
    cudaEvent_t ev = c->fence[ticket % IFD__FENCES];
    if (wait) {
        IFD__CK(cudaEventSynchronize(ev));
    } else {
        cudaError_t e = cudaEventQuery(ev);
        if (e == cudaErrorNotReady) {
            if (cudaPeekAtLastError() == cudaErrorNotReady)
                (void)cudaGetLastError(); /* not an error: not yet */
            return 0;
        }
        IFD__CK(e);
    }
    c->fence_done = ticket + 1; /* one stream: the fences complete in order */
    return 1;
}

/* Grows a device scratch buffer to at least `bytes` (1.5x what is asked,
 * so that slowly growing sizes reallocate rarely); the old buffer is
 * retired, not freed (a graph may use it). */
static int ifd__grow(ifd_backend_t *be, void **p, size_t *cap, size_t bytes)
{
    if (bytes <= *cap)
        return 0;
    ifd__cuda_backend_t *c = ifd__cu(be);
    int rc = ifd__not_capturing(c, "a scratch allocation");
    if (rc)
        return rc;
    if (*p) {
        void **r = realloc(c->retired, (size_t)(c->n_retired + 1) * sizeof *r);
        if (!r)
            return IFD_ENOMEM;
        c->retired = r;
        c->retired[c->n_retired++] = *p;
    }
    *p = NULL;
    *cap = 0;
    bytes += bytes / 2;
    rc = ifd__cuda_alloc(be, bytes, p);
    if (rc == 0)
        *cap = bytes;
    return rc;
}

/* ---- weights ------------------------------------------------------------- */

static bool ifd__cuda_can_load(ifd_backend_t *be, ifd_ggml_type_t type)
{
    (void)be;
    /* everything the host dequantizer knows (the fallback path) */
    uint32_t n = ifd_ggml_block_elems(type), bb = ifd_ggml_block_bytes(type);
    uint8_t zero[512] = {0};
    float y[256];
    return n && bb && n <= 256 && bb <= sizeof zero && ifd_cpu_dequantize(y, zero, type, n) == 0;
}

/* src dequantized on the host into malloc'ed f32 (*out). */
static int ifd__host_f32(const ifd_weight_src_t *src, float **out)
{
    size_t n = (size_t)(src->rows * src->cols);
    float *h = malloc(n * sizeof(float) + 1);
    if (!h)
        return IFD_ENOMEM;
    int rc = ifd_cpu_dequantize(h, src->data, src->type, (int64_t)n);
    if (rc) {
        IFD_ERROR("cuda backend: tensor '%s' (%s): %s", src->name,
                  ifd_ggml_type_name(src->type), ifd_strerror(rc));
        free(h);
        return rc;
    }
    *out = h;
    return 0;
}

/* src's elements as bf16 into device memory dst (16-byte aligned). BF16 is
 * copied; types the device dequantizer has go up raw and are converted
 * there; the rest go through the host dequantizer as f32. Synchronous. */
static int ifd__to_bf16(ifd_backend_t *be, uint16_t *dst, const ifd_weight_src_t *src)
{
    const int64_t n = src->rows * src->cols;
    uint64_t row_bytes;
    int rc = ifd_ggml_row_bytes(src->type, (uint64_t)src->cols, &row_bytes);
    if (rc)
        return rc;
    const size_t raw_bytes = (size_t)(row_bytes * (uint64_t)src->rows);
    if (src->type == IFD_GGML_BF16)
        return ifd__cuda_upload(be, dst, src->data, raw_bytes) ? IFD_ECUDA : ifd__cuda_sync(be);
    void *tmp;
    if ((rc = ifd__cuda_alloc(be, raw_bytes, &tmp)))
        return rc;
    if ((rc = ifd__cuda_upload(be, tmp, src->data, raw_bytes)) == 0) {
        rc = ifd_cuda_dequantize_bf16(dst, tmp, src->type, n, ifd__st(be));
        if (rc == IFD_ENOTSUP) {
            float *h = NULL;
            void *tf;
            rc = ifd__host_f32(src, &h);
            if (rc == 0 && (rc = ifd__cuda_alloc(be, (size_t)n * 4, &tf)) == 0) {
                if ((rc = ifd__cuda_upload(be, tf, h, (size_t)n * 4)) == 0)
                    rc = ifd_cuda_dequantize_bf16(dst, tf, IFD_GGML_F32, n, ifd__st(be));
                int rs = ifd__cuda_sync(be);
                rc = rc ? rc : rs;
                ifd__cuda_free(be, tf);
            }
            free(h);
        }
    }
    int rs = ifd__cuda_sync(be);
    ifd__cuda_free(be, tmp);
    return rc ? rc : rs;
}

static int ifd__cuda_load_weight(ifd_backend_t *be, ifd_weight_t *out,
                                 const ifd_weight_src_t *src, ifd_weight_use_t use)
{
    memset(out, 0, sizeof *out);
    const size_t n = (size_t)(src->rows * src->cols);
    void *d;
    int rc;
    if (use == IFD_WEIGHT_EMBED && !ifd__cu(be)->f32) {
        if ((rc = ifd__cuda_alloc(be, n * 2, &d)))
            return rc;
        if ((rc = ifd__to_bf16(be, d, src))) {
            ifd__cuda_free(be, d);
            return rc;
        }
        *out = (ifd_weight_t){.data = d, .dtype = IFD_GGML_BF16, .rows = src->rows,
                              .cols = src->cols, .bytes = n * 2};
        return 0;
    }
    float *h;
    if ((rc = ifd__host_f32(src, &h)))
        return rc;
    if (use == IFD_WEIGHT_NORM_ADD1)
        for (size_t i = 0; i < n; i++)
            h[i] = 1.0f + h[i];
    if ((rc = ifd__cuda_alloc(be, n * 4, &d)) == 0 &&
        ((rc = ifd__cuda_upload(be, d, h, n * 4)) || (rc = ifd__cuda_sync(be)))) {
        ifd__cuda_free(be, d);
    }
    free(h);
    if (rc)
        return rc;
    *out = (ifd_weight_t){.data = d, .dtype = IFD_GGML_F32, .rows = src->rows,
                          .cols = src->cols, .bytes = n * 4};
    return 0;
}

static void ifd__cuda_weight_free(ifd_backend_t *be, ifd_weight_t *w)
{
    ifd__cuda_free(be, w->data);
    memset(w, 0, sizeof *w);
}

static void ifd__cuda_proj_free(ifd_backend_t *be, ifd_proj_t *p)
{
    for (int i = 0; i < p->n_parts; i++)
        ifd__cuda_weight_free(be, &p->part[i]);
    ifd__cuda_weight_free(be, &p->bias);
    memset(p, 0, sizeof *p);
}

/* All parts into one bf16 [Σ rows, cols] matrix; biases into one f32
 * vector (zeros for parts without). */
static int ifd__cuda_load_proj(ifd_backend_t *be, ifd_proj_t *out, const ifd_weight_src_t *parts,
                               const ifd_weight_src_t *const *bias, int n)
{
    memset(out, 0, sizeof *out);
    if (n < 1 || n > IFD_PROJ_MAX_PARTS)
        return IFD_EINVAL;
    int64_t rows = 0, cols = parts[0].cols;
    bool any_bias = false;
    for (int i = 0; i < n; i++) {
        if (parts[i].cols != cols)
            return IFD_EINVAL;
        rows += parts[i].rows;
        any_bias |= bias && bias[i] && bias[i]->data;
    }
    const bool f32 = ifd__cu(be)->f32;
    const size_t esz = f32 ? 4 : 2;
    uint8_t *w;
    int rc = ifd__cuda_alloc(be, (size_t)(rows * cols) * esz, (void **)&w);
    if (rc)
        return rc;
    int64_t r0 = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        uint8_t *dst = w + (size_t)(r0 * cols) * esz;
        if (f32) {
            float *h;
            if ((rc = ifd__host_f32(&parts[i], &h)) == 0) {
                size_t b = (size_t)(parts[i].rows * cols) * 4;
                if ((rc = ifd__cuda_upload(be, dst, h, b)) == 0)
                    rc = ifd__cuda_sync(be);
                free(h);
            }
        } else if (((uintptr_t)dst & 15) == 0) {
            rc = ifd__to_bf16(be, (uint16_t *)dst, &parts[i]);
        } else { /* a part starting mid-vector: convert aside, then copy */
            void *tmp;
            size_t b = (size_t)(parts[i].rows * cols) * 2;
            if ((rc = ifd__cuda_alloc(be, b, &tmp)) == 0) {
                if ((rc = ifd__to_bf16(be, tmp, &parts[i])) == 0) {
                    cudaError_t e = cudaMemcpy(dst, tmp, b, cudaMemcpyDeviceToDevice);
                    if (e != cudaSuccess) {
                        IFD_ERROR("cuda backend: cudaMemcpy: %s", cudaGetErrorString(e));
                        rc = IFD_ECUDA;
                    }
                }
                ifd__cuda_free(be, tmp);
            }
        }
        r0 += parts[i].rows;
    }
    float *bh = NULL;
    void *bd = NULL;
    if (rc == 0 && any_bias) {
        bh = calloc((size_t)rows, sizeof(float));
        rc = bh ? 0 : IFD_ENOMEM;
        r0 = 0;
        for (int i = 0; i < n && rc == 0; i++) {
            if (bias[i] && bias[i]->data) {
                float *h;
                if ((rc = ifd__host_f32(bias[i], &h)) == 0) {
                    memcpy(bh + r0, h, (size_t)parts[i].rows * sizeof(float));
                    free(h);
                }
            }
            r0 += parts[i].rows;
        }
        if (rc == 0 && (rc = ifd__cuda_alloc(be, (size_t)rows * 4, &bd)) == 0 &&
            ((rc = ifd__cuda_upload(be, bd, bh, (size_t)rows * 4)) || (rc = ifd__cuda_sync(be))))
            ifd__cuda_free(be, bd), bd = NULL;
    }
    free(bh);
    if (rc) {
        ifd__cuda_free(be, w);
        return rc;
    }
    out->n_parts = 1;
    out->part[0] = (ifd_weight_t){.data = w, .dtype = f32 ? IFD_GGML_F32 : IFD_GGML_BF16,
                                  .rows = rows, .cols = cols,
                                  .bytes = (uint64_t)(rows * cols) * esz};
    if (bd)
        out->bias = (ifd_weight_t){.data = bd, .dtype = IFD_GGML_F32, .rows = 1, .cols = rows,
                                   .bytes = (uint64_t)rows * 4};
    out->rows = rows;
    out->cols = cols;
    return 0;
}

/* ---- activations ---------------------------------------------------------- */

static int ifd__cuda_act_alloc(ifd_backend_t *be, ifd_act_t *out, ifd_dtype_t dtype,
                               int64_t rows, int64_t cols)
{
    memset(out, 0, sizeof *out);
    if ((dtype != IFD_DTYPE_F32 && dtype != IFD_DTYPE_BF16) || rows < 0 || cols <= 0)
        return IFD_EINVAL;
    int rc = ifd__cuda_alloc(be, (size_t)(rows * cols) * (size_t)ifd_dtype_size(dtype),
                             &out->data);
    if (rc)
        return rc;
    out->dtype = dtype;
    out->rows = rows;
    out->cols = cols;
    return 0;
}

static void ifd__cuda_act_free(ifd_backend_t *be, ifd_act_t *a)
{
    ifd__cuda_free(be, a->data);
    memset(a, 0, sizeof *a);
}

/* ---- compute -------------------------------------------------------------- */

static int ifd__cuda_embed(ifd_backend_t *be, ifd_act_t *x, const ifd_weight_t *emb,
                           const int32_t *tokens, int n, float scale)
{
    if ((emb->dtype != IFD_GGML_BF16 && emb->dtype != IFD_GGML_F32) ||
        x->dtype != IFD_DTYPE_F32 || x->cols != emb->cols || n > x->rows)
        return IFD_EINVAL;
    return ifd_cuda_embed(x->data, emb->data, tokens, n, (int)emb->cols, (int)emb->rows,
                          emb->dtype == IFD_GGML_F32 ? IFD_DTYPE_F32 : IFD_DTYPE_BF16, scale,
                          ifd__st(be));
}

static int ifd__cuda_rmsnorm(ifd_backend_t *be, ifd_act_t *y, ifd_act_t *residual,
                             const ifd_act_t *delta, const ifd_weight_t *w, int rows, float eps)
{
    if (rows > residual->rows || rows > y->rows || residual->cols != w->cols ||
        y->cols != w->cols || (delta && delta->cols != w->cols) ||
        residual->dtype != IFD_DTYPE_F32)
        return IFD_EINVAL;
    return ifd_cuda_rmsnorm(y->data, residual->data, delta ? delta->data : NULL, w->data, rows,
                            (int)w->cols, eps, 0, y->dtype, ifd__st(be));
}

/* The cached layouts and algorithm of a GEMM problem, made (one heuristic
 * query) on first use. */
static int ifd__mm_lookup(ifd__cuda_backend_t *c, uint64_t N, uint64_t K, int m, bool bias,
                          cublasLtMatmulDesc_t desc, cudaDataType_t in_t,
                          const ifd__mm_entry_t **out)
{
    uint64_t h = (N * 0x9e3779b97f4a7c15ull) ^ (K * 0xc2b2ae3d27d4eb4full) ^
                 ((uint64_t)m * 0x165667b19e3779f9ull) ^ (uint64_t)bias;
    unsigned at = (unsigned)(h >> 40) % IFD__MM_CACHE;
    for (int probe = 0; probe < IFD__MM_CACHE; probe++, at = (at + 1) % IFD__MM_CACHE) {
        ifd__mm_entry_t *e = &c->mm_cache[at];
        if (!e->used)
            break;
        if (e->n == N && e->k == K && e->m == m && e->bias == bias) {
            *out = e;
            return 0;
        }
    }
    if (c->mm_cached >= IFD__MM_CACHE * 3 / 4) { /* full enough: start over */
        ifd__mm_cache_clear(c);
        at = (unsigned)(h >> 40) % IFD__MM_CACHE;
    }
    while (c->mm_cache[at].used)
        at = (at + 1) % IFD__MM_CACHE;
    ifd__mm_entry_t e = {.n = N, .k = K, .m = m, .bias = bias};
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    memset(&res, 0, sizeof res);
    if (cublasLtMatrixLayoutCreate(&e.la, in_t, K, N, (int64_t)K) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&e.lb, in_t, K, (uint64_t)m, (int64_t)K) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&e.ld, CUDA_R_32F, N, (uint64_t)m, (int64_t)N) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulAlgoGetHeuristic(c->lt, desc, e.la, e.lb, e.ld, e.ld, c->pref, 1, &res,
                                       &found) != CUBLAS_STATUS_SUCCESS ||
        found < 1 || res.state != CUBLAS_STATUS_SUCCESS) {
        IFD_ERROR("cuda backend: no cuBLASLt algorithm for %llu x %llu, m %d%s",
                  (unsigned long long)N, (unsigned long long)K, m, bias ? " + bias" : "");
        if (e.la)
            (void)cublasLtMatrixLayoutDestroy(e.la);
        if (e.lb)
            (void)cublasLtMatrixLayoutDestroy(e.lb);
        if (e.ld)
            (void)cublasLtMatrixLayoutDestroy(e.ld);
        return IFD_ECUDA;
    }
    e.algo = res.algo;
    e.used = true;
    c->mm_cache[at] = e;
    c->mm_cached++;
    *out = &c->mm_cache[at];
    return 0;
}

static int ifd__cuda_proj(ifd_backend_t *be, ifd_act_t *y, const ifd_act_t *x,
                          const ifd_proj_t *p, int m)
{
    ifd__cuda_backend_t *c = ifd__cu(be);
    const ifd_weight_t *w = &p->part[0];
    const cudaDataType_t in_t = c->f32 ? CUDA_R_32F : CUDA_R_16BF;
    if (p->n_parts != 1 || w->dtype != (c->f32 ? IFD_GGML_F32 : IFD_GGML_BF16) ||
        x->dtype != be->ops->mm_in_dtype || y->dtype != IFD_DTYPE_F32 || x->cols != p->cols ||
        y->cols != p->rows || m > x->rows || m > y->rows)
        return IFD_EINVAL;
    if (m == 0)
        return 0;
    const uint64_t N = (uint64_t)p->rows, K = (uint64_t)p->cols;
    cublasLtMatmulDesc_t desc = c->mm;
    if (p->bias.data) {
        desc = c->mm_bias;
        const void *bp = p->bias.data;
        IFD__LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp,
                                               sizeof bp));
    }
    const ifd__mm_entry_t *e;
    int rc = ifd__mm_lookup(c, N, K, m, p->bias.data != NULL, desc, in_t, &e);
    if (rc)
        return rc;
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t st = cublasLtMatmul(c->lt, desc, &one, w->data, e->la, x->data, e->lb, &zero,
                                       y->data, e->ld, y->data, e->ld, &e->algo, c->lt_ws,
                                       IFD__LT_WORKSPACE, c->stream);
    if (st != CUBLAS_STATUS_SUCCESS) {
        IFD_ERROR("cuda backend: cublasLtMatmul(%llu x %llu, m %d): %s", (unsigned long long)N,
                  (unsigned long long)K, m, cublasLtGetStatusString(st));
        return IFD_ECUDA;
    }
    return 0;
}

static int ifd__cuda_rope_kv(ifd_backend_t *be, ifd_act_t *q_out, const ifd_act_t *qkv,
                             const ifd_weight_t *q_norm, const ifd_weight_t *k_norm, float eps,
                             const ifd_kv_layer_t *kv, const int32_t *pos, const int64_t *slot,
                             int n_tok, int n_heads, const ifd_rope_t *rope)
{
    ifd__cuda_backend_t *c = ifd__cu(be);
    const int hd = kv->head_dim, nkv = kv->n_kv_heads;
    const int64_t qd = (int64_t)n_heads * hd, kvd = (int64_t)nkv * hd, ld = qd + 2 * kvd;
    if (qkv->cols != ld || q_out->cols != qd || n_tok > qkv->rows || n_tok > q_out->rows ||
        qkv->dtype != IFD_DTYPE_F32 || q_out->dtype != IFD_DTYPE_F32)
        return IFD_EINVAL;
    if (n_tok == 0)
        return 0;
    const float *base = qkv->data;
    IFD__CK(cudaMemcpy2DAsync(q_out->data, (size_t)qd * 4, base, (size_t)ld * 4, (size_t)qd * 4,
                              (size_t)n_tok, cudaMemcpyDeviceToDevice, c->stream));
    int rc;
    if (q_norm && (rc = ifd_cuda_rmsnorm(q_out->data, q_out->data, NULL, q_norm->data,
                                         n_tok * n_heads, hd, eps, 0, IFD_DTYPE_F32, c->stream)))
        return rc;
    const float *k = base + qd;
    int64_t k_ld = ld;
    if (k_norm) {
        if ((rc = ifd__grow(be, (void **)&c->k_tmp, &c->k_tmp_bytes, (size_t)(n_tok * kvd) * 4)))
            return rc;
        IFD__CK(cudaMemcpy2DAsync(c->k_tmp, (size_t)kvd * 4, base + qd, (size_t)ld * 4,
                                  (size_t)kvd * 4, (size_t)n_tok, cudaMemcpyDeviceToDevice,
                                  c->stream));
        if ((rc = ifd_cuda_rmsnorm(c->k_tmp, c->k_tmp, NULL, k_norm->data, n_tok * nkv, hd, eps,
                                   0, IFD_DTYPE_F32, c->stream)))
            return rc;
        k = c->k_tmp;
        k_ld = kvd;
    }
    const ifd_cuda_rope_t r = {rope->n_rot, rope->base, rope->freq_scale, rope->freq_factors,
                               rope->mode};
    return ifd_cuda_rope_kv_write(q_out->data, kv, k, base + qd + kvd, pos, slot, n_tok, n_heads,
                                  qd, k_ld, ld, &r, c->stream);
}

/* Decode kernel unless the batch is varlen with a run longer than one. */
static bool ifd__use_decode(const ifd_attn_batch_t *ab)
{
    return !ab->cu_q || ab->max_q_len <= 1;
}

static int ifd__cuda_attn_workspace(ifd_backend_t *be, size_t *bytes, const ifd_attn_batch_t *ab,
                                    const ifd_kv_layer_t *kv, int n_heads)
{
    (void)be;
    *bytes = 0;
    if (!ifd__use_decode(ab))
        return 0;
    return ifd_cuda_paged_decode_workspace(bytes, ab->n_tok, n_heads, kv->n_kv_heads,
                                           kv->head_dim, ab->max_ctx);
}

static int ifd__cuda_attention(ifd_backend_t *be, ifd_act_t *out, const ifd_act_t *q,
                               const ifd_kv_layer_t *kv, const ifd_attn_batch_t *ab, int n_heads,
                               float scale, int window)
{
    ifd__cuda_backend_t *c = ifd__cu(be);
    const int64_t qd = (int64_t)n_heads * kv->head_dim;
    if (ab->n_tok > out->rows || ab->n_tok > q->rows || out->cols != qd || q->cols != qd ||
        q->dtype != IFD_DTYPE_F32)
        return IFD_EINVAL;
    float *o32 = out->data;
    int rc;
    if (out->dtype != IFD_DTYPE_F32) {
        if ((rc = ifd__grow(be, (void **)&c->attn_f32, &c->attn_f32_bytes,
                            (size_t)(ab->n_tok * qd) * 4)))
            return rc;
        o32 = c->attn_f32;
    }
    if (ifd__use_decode(ab))
        rc = ifd_cuda_paged_decode_attention(o32, q->data, kv, ab->seq, ab->pos,
                                             ab->block_tables, ab->max_blocks, ab->n_tok, n_heads,
                                             scale, window, ab->max_ctx, ab->workspace,
                                             ab->workspace_bytes, c->stream);
    else
        rc = ifd_cuda_paged_prefill_attention(
            o32, q->data, kv, ab->cu_q, ab->ctx_len, ab->last, ab->block_tables, ab->max_blocks,
            ab->n_seqs, ab->n_tok, ab->max_q_len, n_heads, scale, window, c->stream);
    if (rc || o32 == out->data)
        return rc;
    return ifd_cuda_convert_f32(out->data, o32, ab->n_tok * qd, out->dtype, c->stream);
}

static int ifd__cuda_glu(ifd_backend_t *be, ifd_act_t *out, const ifd_act_t *gate_up, int rows,
                         int n_ff, ifd_glu_t kind)
{
    if (gate_up->cols != 2 * (int64_t)n_ff || out->cols != n_ff || rows > out->rows ||
        rows > gate_up->rows || gate_up->dtype != IFD_DTYPE_F32)
        return IFD_EINVAL;
    return ifd_cuda_glu(out->data, gate_up->data, rows, n_ff, kind, out->dtype, ifd__st(be));
}

/* The embedding gather on an f32 table with scale 1 copies rows exactly. */
static int ifd__cuda_gather_rows(ifd_backend_t *be, ifd_act_t *out, const ifd_act_t *x,
                                 const int32_t *rows, int n_rows)
{
    if (out->cols != x->cols || n_rows > out->rows || x->dtype != IFD_DTYPE_F32 ||
        out->dtype != IFD_DTYPE_F32)
        return IFD_EINVAL;
    return ifd_cuda_embed(out->data, x->data, rows, n_rows, (int)x->cols, (int)x->rows,
                          IFD_DTYPE_F32, 1.0f, ifd__st(be));
}

/* ---- vision (worker/vision.c) --------------------------------------------- */

/* An f32 vector weight of cols n (LayerNorm weight or bias), or NULL. */
static bool ifd__vec_ok(const ifd_weight_t *w, int64_t n)
{
    return !w || (w->dtype == IFD_GGML_F32 && w->cols == n && w->rows == 1);
}

static int ifd__cuda_layernorm(ifd_backend_t *be, ifd_act_t *y, ifd_act_t *residual,
                               const ifd_act_t *delta, const ifd_weight_t *w,
                               const ifd_weight_t *b, int rows, float eps)
{
    const int64_t d = residual->cols;
    if (rows < 0 || rows > residual->rows || rows > y->rows || y->cols != d ||
        (delta && (delta->cols != d || rows > delta->rows || delta->dtype != IFD_DTYPE_F32)) ||
        residual->dtype != IFD_DTYPE_F32 || !ifd__vec_ok(w, d) || !ifd__vec_ok(b, d) ||
        (y->data == residual->data && y->dtype != IFD_DTYPE_F32))
        return IFD_EINVAL;
    return ifd_cuda_layernorm(y->data, residual->data, delta ? delta->data : NULL, w->data,
                              b ? b->data : NULL, rows, (int)d, eps, y->dtype, ifd__st(be));
}

static int ifd__cuda_add_rows(ifd_backend_t *be, ifd_act_t *x, const ifd_weight_t *t, int rows)
{
    if (rows < 0 || rows > x->rows || (int64_t)rows * x->cols > t->rows * t->cols ||
        t->cols != x->cols || t->dtype != IFD_GGML_F32 || x->dtype != IFD_DTYPE_F32)
        return IFD_EINVAL;
    return ifd_cuda_add_rows(x->data, t->data, rows, (int)x->cols, ifd__st(be));
}

static int ifd__cuda_gelu(ifd_backend_t *be, ifd_act_t *out, const ifd_act_t *x, int rows)
{
    if (rows < 0 || rows > x->rows || rows > out->rows || out->cols != x->cols ||
        x->dtype != IFD_DTYPE_F32 || out->data == x->data)
        return IFD_EINVAL;
    return ifd_cuda_gelu_tanh(out->data, x->data, (int64_t)rows * x->cols, out->dtype,
                              ifd__st(be));
}

static int ifd__cuda_dense_attention(ifd_backend_t *be, ifd_act_t *out, const ifd_act_t *qkv, int n,
                                     int q0, int q1, int n_heads, int head_dim, float scale)
{
    const int64_t w = (int64_t)n_heads * head_dim;
    if (n < 0 || n_heads <= 0 || head_dim <= 0 || n > qkv->rows || n > out->rows || q0 < 0 ||
        q1 < q0 || q1 > n || qkv->cols != 3 * w || out->cols != w || qkv->dtype != IFD_DTYPE_F32)
        return IFD_EINVAL;
    if (head_dim > IFD_CUDA_DENSE_MAX_HEAD_DIM) {
        IFD_ERROR("cuda backend: dense attention with head_dim %d (at most %d)", head_dim,
                  IFD_CUDA_DENSE_MAX_HEAD_DIM);
        return IFD_ENOTSUP;
    }
    return ifd_cuda_dense_attention(out->data, qkv->data, n, q0, q1, n_heads, head_dim, scale,
                                    out->dtype, ifd__st(be));
}

static int ifd__cuda_avg_pool2d(ifd_backend_t *be, ifd_act_t *out, const ifd_act_t *x, int rows,
                                int side, int k)
{
    if (side <= 0 || k <= 0 || rows <= 0 || side % k || rows % k ||
        x->rows < (int64_t)rows * side || out->rows < (int64_t)(rows / k) * (side / k) ||
        out->cols != x->cols || x->dtype != IFD_DTYPE_F32 || out->dtype != IFD_DTYPE_F32)
        return IFD_EINVAL;
    return ifd_cuda_avg_pool2d(out->data, x->data, rows, side, k, (int)x->cols, ifd__st(be));
}

/* ---- sampling ------------------------------------------------------------- */

/* The logprobs kernel writes ifd_sample_result_t's layout up to its
 * caller-owned more_* room (entries past IFD_SAMPLER_INLINE_LOGPROBS come
 * back as (id, logprob) pairs, copied into that room after the download). */
_Static_assert(sizeof(ifd_cuda_logprob_t) == offsetof(ifd_sample_result_t, more_ids) &&
                   offsetof(ifd_cuda_logprob_t, top_ids) ==
                       offsetof(ifd_sample_result_t, top_ids) &&
                   offsetof(ifd_cuda_logprob_t, top_logprobs) ==
                       offsetof(ifd_sample_result_t, top_logprobs) &&
                   offsetof(ifd_cuda_logprob_t, rank) == offsetof(ifd_sample_result_t, rank) &&
                   IFD_CUDA_MAX_LOGPROBS == IFD_SAMPLER_INLINE_LOGPROBS,
               "ifd_cuda_logprob_t and ifd_sample_result_t differ");

/* Grows a host array and its device twin to at least n elements of esz. */
static int ifd__grow_pair(ifd_backend_t *be, void **h, void **d, size_t *cap, size_t n,
                          size_t esz)
{
    if (n <= *cap)
        return 0;
    size_t want = *cap ? *cap : 64;
    while (want < n)
        want *= 2;
    size_t dev_cap = *cap * esz;
    int rc = ifd__grow(be, d, &dev_cap, want * esz);
    *cap = 0;
    if (rc)
        return rc;
    void *nh = realloc(*h, dev_cap);
    if (!nh)
        return IFD_ENOMEM;
    *h = nh;
    *cap = dev_cap / esz;
    return 0;
}

static bool ifd__penalties_on(const ifd_sampling_params_t *p)
{
    return p->repetition_penalty != 1.0f || p->frequency_penalty != 0.0f ||
           p->presence_penalty != 0.0f;
}

/* Whether steps 1-3 change row p's logits (with history h). */
static bool ifd__row_modified(const ifd_sampling_params_t *p, const ifd_sampler_history_t *h)
{
    return p->n_logit_bias > 0 || p->constraint || p->allowed ||
           (ifd__penalties_on(p) && h && (h->n_prompt || h->n_generated));
}

/* The masks of the masked rows (sp->h_mrow[0..n_mask)): a grammar's,
 * computed by ifd_constraint_mask straight into the pinned staging buffer,
 * and/or an allowed set (ANDed in), as many rows per copy as fit, copied
 * into sp->d_mask. A history the grammar rejects (or any mask error) gets
 * an all-zero mask: nothing is allowed, the draw yields -1 and the request
 * fails, as on the host. */
static int ifd__upload_masks(ifd_backend_t *be, const ifd_sample_row_t *rows, int n_mask,
                             int32_t V)
{
    ifd__cuda_backend_t *c = ifd__cu(be);
    ifd__samp_t *sp = &c->samp;
    const size_t wbytes = (size_t)(V + 31) / 32 * 4;
    const int per = (int)(IFD__STAGE_BYTES / wbytes);
    int rc;
    for (int j0 = 0; j0 < n_mask; j0 += per) {
        const int nj = n_mask - j0 < per ? n_mask - j0 : per;
        unsigned char *st;
        if ((rc = ifd__stage(be, (size_t)nj * wbytes, &st)))
            return rc;
        for (int j = 0; j < nj; j++) {
            const ifd_sample_row_t *r = &rows[sp->h_mrow[j0 + j]];
            const ifd_sampler_history_t *h = r->hist;
            uint32_t *bits = (uint32_t *)(st + (size_t)j * wbytes);
            /* a tokenizer smaller than the logits rows writes fewer words:
             * the ids past it stay masked (their logits are -inf anyway) */
            const ifd_sampling_params_t *p = r->params;
            memset(bits, p->constraint ? 0 : 0xff, wbytes);
            int mrc = p->constraint ? ifd_constraint_mask(p->constraint, h ? h->generated : NULL,
                                                          h ? h->n_generated : 0, bits)
                                    : 0;
            if (mrc) {
                IFD_WARN("cuda backend: grammar constraint: %s", ifd_strerror(mrc));
                memset(bits, 0, wbytes);
            }
            for (size_t w = 0; p->allowed && w < wbytes / 4; w++)
                bits[w] &= p->allowed[w];
        }
        IFD__CK(cudaMemcpyAsync((unsigned char *)sp->d_mask + (size_t)j0 * wbytes, st,
                                (size_t)nj * wbytes, cudaMemcpyHostToDevice, c->stream));
    }
    return 0;
}

/* A sampling call's counts: what it needs (the first pass over the rows:
 * bias entries, history ids before dedup, masked rows, scored rows, raw
 * copies), then what the second pass filled in (history ids after dedup). */
typedef struct {
    size_t n_bias, n_hist;
    int n_mask, n_lp, n_raw;
    size_t n_more, n_ids; /* entries past the inline ones; logprob_token_ids */
    bool any_pen;         /* filled: some row has a bias or a penalty history */
} ifd__samp_count_t;

/* The entries of a scored row's result: its logprob_token_ids, or its top
 * min(k, V) (a scoring row's score_top, a sampled row's n_logprobs). */
static int64_t ifd__lp_count(const ifd_sample_row_t *r, int32_t V)
{
    const ifd_sampling_params_t *p = r->params;
    if (p && p->n_lp_ids)
        return p->n_lp_ids;
    const int64_t k = p ? p->n_logprobs : r->score_top;
    return k < V ? k : V;
}

/* The first pass: the sizes of every row's parts. IFD_EINVAL for a scored
 * row with a negative top count, a sampled row that wants logprobs and has
 * nowhere to put them, or one whose entries pass the inline ones with too
 * little more_* room in its result. */
static int ifd__samp_need(const ifd_sample_row_t *rows, int n_rows, int32_t V, ifd__samp_count_t *n)
{
    memset(n, 0, sizeof *n);
    for (int i = 0; i < n_rows; i++) {
        const ifd_sampling_params_t *p = rows[i].params;
        const ifd_sampler_history_t *h = rows[i].hist;
        if (p ? p->n_logprobs >= 0 : rows[i].result != NULL) {
            if (!rows[i].result) {
                IFD_ERROR("cuda backend: a row with logprobs and nowhere to put them");
                return IFD_EINVAL;
            }
            if (!p && rows[i].score_top < 0)
                return IFD_EINVAL;
            const int64_t c = ifd__lp_count(&rows[i], V);
            const ifd_sample_result_t *res = rows[i].result;
            if (c > IFD_CUDA_MAX_LOGPROBS &&
                (!res->more_ids || !res->more_logprobs || res->more_cap < c)) {
                IFD_ERROR("cuda backend: a row with %lld logprobs and room for %d", (long long)c,
                          (int)res->more_cap);
                return IFD_EINVAL;
            }
            n->n_more += c > IFD_CUDA_MAX_LOGPROBS ? (size_t)c : 0;
            n->n_ids += p ? p->n_lp_ids : 0;
        }
        if (!p) {
            n->n_lp += rows[i].result != NULL;
            continue;
        }
        n->n_bias += p->n_logit_bias;
        if (h && ifd__penalties_on(p))
            n->n_hist += h->n_prompt + h->n_generated;
        n->n_mask += p->constraint || p->allowed;
        if (p->n_logprobs >= 0) {
            n->n_lp++;
            n->n_raw += p->logprobs_mode == IFD_LOGPROBS_RAW && ifd__row_modified(p, h);
        }
    }
    return 0;
}

/* Grows the sampler's host and device arrays to what the first pass
 * counted (out_bytes: the tokens and logprobs that come back). */
static int ifd__samp_reserve(ifd_backend_t *be, int n_rows, int32_t V,
                             const ifd__samp_count_t *n, size_t out_bytes)
{
    ifd__samp_t *sp = &ifd__cu(be)->samp;
    const size_t wbytes = (size_t)(V + 31) / 32 * 4;
    int rc;
    if ((rc = ifd__grow_pair(be, (void **)&sp->h_sp, (void **)&sp->d_sp, &sp->sp_cap,
                             (size_t)n_rows, sizeof *sp->h_sp)) ||
        (rc = ifd__grow_pair(be, (void **)&sp->h_pr, (void **)&sp->d_pr, &sp->pr_cap,
                             (size_t)n_rows, sizeof *sp->h_pr)) ||
        (rc = ifd__grow_pair(be, (void **)&sp->h_out, (void **)&sp->d_out, &sp->out_cap, out_bytes,
                             1)) ||
        (rc = ifd__grow_pair(be, (void **)&sp->h_lb, (void **)&sp->d_lb, &sp->bias_cap,
                             n->n_bias ? n->n_bias : 1, sizeof *sp->h_lb)) ||
        (rc = ifd__grow_pair(be, (void **)&sp->h_mrow, (void **)&sp->d_mrow, &sp->mrow_cap,
                             (size_t)(n->n_mask ? n->n_mask : 1), sizeof *sp->h_mrow)) ||
        (rc = ifd__grow_pair(be, (void **)&sp->h_lq, (void **)&sp->d_lq, &sp->lq_cap,
                             (size_t)(n->n_lp ? n->n_lp : 1), sizeof *sp->h_lq)) ||
        (n->n_ids && (rc = ifd__grow_pair(be, (void **)&sp->h_lpid, (void **)&sp->d_lpid,
                                          &sp->lpid_cap, n->n_ids, sizeof *sp->h_lpid))) ||
        (n->n_mask &&
         (rc = ifd__grow(be, (void **)&sp->d_mask, &sp->mask_bytes, (size_t)n->n_mask * wbytes))) ||
        (n->n_raw && (rc = ifd__grow(be, (void **)&sp->d_raw, &sp->raw_bytes,
                                     (size_t)n->n_raw * (size_t)V * 4))))
        return rc;
    if (n->n_hist > sp->h_hist_cap) { /* host only: the device gets the distinct ids */
        ifd_cuda_hist_t *hh = realloc(sp->h_hh, n->n_hist * sizeof *hh);
        if (!hh)
            return IFD_ENOMEM;
        sp->h_hh = hh;
        sp->h_hist_cap = n->n_hist;
    }
    return 0;
}

/* A row's penalty history as distinct ids from sp->h_hh[*nh] on, each with
 * its generated count and prompt flag (sp->counts is zero again after). */
static void ifd__samp_hist(ifd__samp_t *sp, const ifd_sampler_history_t *h, int32_t V,
                           size_t *nh)
{
    uint32_t *counts = sp->counts;
    for (size_t j = 0; j < h->n_generated; j++)
        if (h->generated[j] >= 0 && h->generated[j] < V)
            counts[h->generated[j]] += 1;
    for (size_t j = 0; j < h->n_prompt; j++)
        if (h->prompt[j] >= 0 && h->prompt[j] < V)
            counts[h->prompt[j]] |= IFD_CUDA_HIST_PROMPT;
    const int32_t *lists[2] = {h->generated, h->prompt};
    const size_t lens[2] = {h->n_generated, h->n_prompt};
    for (int l = 0; l < 2; l++)
        for (size_t j = 0; j < lens[l]; j++) {
            int32_t t = lists[l][j];
            if (t < 0 || t >= V || !counts[t])
                continue;
            sp->h_hh[(*nh)++] = (ifd_cuda_hist_t){t, counts[t]};
            counts[t] = 0;
        }
}

/* Where a scored row's entries past the inline ones go on the device (the
 * next f->n_more of the download's tail), or NULL when they stay inline. */
static ifd_cuda_lp_entry_t *ifd__lp_more(ifd__samp_t *sp, const ifd_sample_row_t *r, int32_t V,
                                         ifd__samp_count_t *f)
{
    const int64_t c = ifd__lp_count(r, V);
    if (c <= IFD_CUDA_MAX_LOGPROBS)
        return NULL;
    ifd_cuda_lp_entry_t *m = (ifd_cuda_lp_entry_t *)(sp->d_out + sp->more_off) + f->n_more;
    f->n_more += (size_t)c;
    return m;
}

/* The second pass for row i: its kernel parameters, penalty row, bias
 * entries, history, mask index and logprob request (raw logprobs of a row
 * that bias, penalties or a mask change are scored from a copy made now,
 * before they do). Skipped rows stay greedy without penalties (cheap,
 * ignored). Counts what it fills into *f. */
static int ifd__samp_row(ifd_backend_t *be, const ifd_sample_row_t *rows, int i, int32_t V,
                         float *lg, ifd__samp_count_t *f)
{
    ifd__cuda_backend_t *c = ifd__cu(be);
    ifd__samp_t *sp = &c->samp;
    const ifd_sampling_params_t *p = rows[i].params;
    ifd_cuda_sample_params_t *q = &sp->h_sp[i];
    ifd_cuda_penalty_row_t *r = &sp->h_pr[i];
    memset(q, 0, sizeof *q);
    memset(r, 0, sizeof *r);
    r->repetition_penalty = 1.0f;
    q->top_p = 1.0f;
    if (!p) {
        if (rows[i].result) /* scoring: the raw row, not changed below */
            sp->h_lq[f->n_lp++] =
                (ifd_cuda_logprob_req_t){lg + (size_t)i * V,
                                         rows[i].score_token < 0 ? V : rows[i].score_token,
                                         i,
                                         rows[i].score_top,
                                         0,
                                         NULL,
                                         ifd__lp_more(sp, &rows[i], V, f)};
        return 0;
    }
    *q = (ifd_cuda_sample_params_t){p->temperature, p->top_k, p->top_p, p->min_p, p->seed,
                                    rows[i].position};
    r->repetition_penalty = p->repetition_penalty;
    r->frequency_penalty = p->frequency_penalty;
    r->presence_penalty = p->presence_penalty;
    r->bias0 = (int32_t)f->n_bias;
    r->n_bias = (int32_t)p->n_logit_bias;
    for (uint32_t j = 0; j < p->n_logit_bias; j++)
        sp->h_lb[f->n_bias++] =
            (ifd_cuda_logit_bias_t){p->logit_bias[j].id, p->logit_bias[j].bias};
    const ifd_sampler_history_t *h = rows[i].hist;
    r->hist0 = (int32_t)f->n_hist;
    if (h && ifd__penalties_on(p) && (h->n_prompt || h->n_generated))
        ifd__samp_hist(sp, h, V, &f->n_hist);
    r->n_hist = (int32_t)(f->n_hist - (size_t)r->hist0);
    f->any_pen |= r->n_bias > 0 || r->n_hist > 0;
    if (p->constraint || p->allowed)
        sp->h_mrow[f->n_mask++] = i;
    if (p->n_logprobs >= 0) {
        /* raw logprobs of a row that steps 1-3b change: from a copy */
        const float *x = lg + (size_t)i * V;
        if (p->logprobs_mode == IFD_LOGPROBS_RAW && ifd__row_modified(p, h)) {
            float *dst = sp->d_raw + (size_t)f->n_raw++ * V;
            IFD__CK(cudaMemcpyAsync(dst, x, (size_t)V * 4, cudaMemcpyDeviceToDevice,
                                    c->stream));
            x = dst;
        }
        const int32_t *ids = NULL;
        if (p->n_lp_ids) { /* logprob_token_ids: uploaded with the requests */
            memcpy(sp->h_lpid + f->n_ids, p->lp_ids, p->n_lp_ids * sizeof *p->lp_ids);
            ids = sp->d_lpid + f->n_ids;
            f->n_ids += p->n_lp_ids;
        }
        sp->h_lq[f->n_lp++] = (ifd_cuda_logprob_req_t){
            x, -1, i, p->n_logprobs, (int32_t)p->n_lp_ids, ids, ifd__lp_more(sp, &rows[i], V, f)};
    }
    return 0;
}

/* The device's work, in stream order: bias and penalties (when a row has
 * any), grammar masks, the draw into d_tok, then the logprobs of the
 * scored rows into d_lp. */
static int ifd__samp_launch(ifd_backend_t *be, const ifd_sample_row_t *rows, int n_rows,
                            int32_t V, float *lg, const ifd__samp_count_t *f, int32_t *d_tok,
                            ifd_cuda_logprob_t *d_lp)
{
    ifd__cuda_backend_t *c = ifd__cu(be);
    ifd__samp_t *sp = &c->samp;
    const size_t nb = f->n_bias, nh = f->n_hist;
    const int nm = f->n_mask, nl = f->n_lp;
    int rc;
    if ((rc = ifd__cuda_upload(be, sp->d_sp, sp->h_sp, (size_t)n_rows * sizeof *sp->h_sp)))
        return rc;
    if (f->any_pen &&
        ((rc = ifd__cuda_upload(be, sp->d_pr, sp->h_pr, (size_t)n_rows * sizeof *sp->h_pr)) ||
         (rc = ifd__cuda_upload(be, sp->d_lb, sp->h_lb, nb * sizeof *sp->h_lb)) ||
         (rc = ifd__cuda_upload(be, sp->d_hh, sp->h_hh, nh * sizeof *sp->h_hh)) ||
         (rc = ifd_cuda_apply_penalties(lg, sp->d_pr, sp->d_lb, sp->d_hh, n_rows, V,
                                        c->stream))))
        return rc;
    if (nm && ((rc = ifd__cuda_upload(be, sp->d_mrow, sp->h_mrow, (size_t)nm * 4)) ||
               (rc = ifd__upload_masks(be, rows, nm, V)) ||
               (rc = ifd_cuda_apply_mask(lg, sp->d_mask, sp->d_mrow, nm, n_rows, V, c->stream))))
        return rc;
    if ((rc = ifd_cuda_sample(d_tok, lg, sp->d_sp, n_rows, V, c->stream)))
        return rc;
    if (f->n_ids &&
        (rc = ifd__cuda_upload(be, sp->d_lpid, sp->h_lpid, f->n_ids * sizeof *sp->h_lpid)))
        return rc;
    if (nl && ((rc = ifd__cuda_upload(be, sp->d_lq, sp->h_lq, (size_t)nl * sizeof *sp->h_lq)) ||
               (rc = ifd_cuda_logprobs(d_lp, sp->d_lq, d_tok, nl, V, c->stream))))
        return rc;
    return 0;
}

static int ifd__cuda_sample(ifd_backend_t *be, int32_t *tokens, ifd_act_t *logits,
                            const ifd_sample_row_t *rows, int n_rows)
{
    ifd__cuda_backend_t *c = ifd__cu(be);
    ifd__samp_t *sp = &c->samp;
    const int32_t V = (int32_t)logits->cols;
    if (logits->dtype != IFD_DTYPE_F32 || n_rows > logits->rows || n_rows < 0)
        return IFD_EINVAL;
    if (n_rows == 0)
        return 0;
    int rc;
    if (sp->vocab != V) {
        free(sp->counts);
        sp->counts = calloc((size_t)V, sizeof *sp->counts);
        sp->vocab = sp->counts ? V : 0;
        if (!sp->counts)
            return IFD_ENOMEM;
    }
    /* sizes first: the bias entries and the history ids of every row, the
     * masks, the scored rows and the raw copies among them */
    ifd__samp_count_t need;
    if ((rc = ifd__samp_need(rows, n_rows, V, &need)))
        return rc;
    const size_t lp_off = ((size_t)n_rows * 4 + 15) & ~(size_t)15;
    const size_t more_off =
        (lp_off + (size_t)need.n_lp * sizeof(ifd_cuda_logprob_t) + 15) & ~(size_t)15;
    const size_t out_bytes = more_off + need.n_more * sizeof(ifd_cuda_lp_entry_t);
    if ((rc = ifd__samp_reserve(be, n_rows, V, &need, out_bytes)))
        return rc;
    sp->more_off = more_off;
    /* the rows */
    ifd__samp_count_t got;
    memset(&got, 0, sizeof got);
    float *const lg = logits->data;
    for (int i = 0; i < n_rows; i++)
        if ((rc = ifd__samp_row(be, rows, i, V, lg, &got)))
            return rc;
    /* the distinct ids of a batch are bounded by rows x vocab: this grows
     * while the batch's histories bring new ids, then no more */
    if ((rc = ifd__grow(be, (void **)&sp->d_hh, &sp->d_hist_bytes,
                        (got.n_hist ? got.n_hist : 1) * sizeof *sp->h_hh)))
        return rc;
    int32_t *d_tok = (int32_t *)sp->d_out;
    ifd_cuda_logprob_t *d_lp = (ifd_cuda_logprob_t *)(sp->d_out + lp_off);
    if ((rc = ifd__samp_launch(be, rows, n_rows, V, lg, &got, d_tok, d_lp)))
        return rc;
    const int nl = got.n_lp;
    if ((rc = ifd__cuda_download(be, sp->h_out, sp->d_out, nl ? out_bytes : (size_t)n_rows * 4)))
        return rc;
    const int32_t *h_tok = (const int32_t *)sp->h_out;
    const ifd_cuda_logprob_t *h_lp = (const ifd_cuda_logprob_t *)(sp->h_out + lp_off);
    const ifd_cuda_lp_entry_t *h_more = (const ifd_cuda_lp_entry_t *)(sp->h_out + more_off);
    for (int i = 0, j = 0; i < n_rows; i++) {
        const ifd_sample_row_t *r = &rows[i];
        if (r->params)
            tokens[i] = h_tok[i];
        if (!(r->params ? r->params->n_logprobs >= 0 : r->result != NULL))
            continue;
        /* the inline part (the result's more_* room stays the caller's) */
        memcpy(r->result, &h_lp[j++], sizeof h_lp[0]);
        const int64_t c = ifd__lp_count(r, V);
        if (c > IFD_CUDA_MAX_LOGPROBS) { /* the pairs into the caller's room */
            for (int64_t e = 0; r->result->token >= 0 && e < c; e++) {
                r->result->more_ids[e] = h_more[e].id;
                r->result->more_logprobs[e] = h_more[e].logprob;
            }
            h_more += c;
        }
        if (r->params && r->result->token >= 0 && r->result->token != h_tok[i])
            r->result->token = -1; /* cannot happen: the scored token is the drawn one */
    }
    return 0;
}

static int ifd__cuda_softcap(ifd_backend_t *be, ifd_act_t *logits, int n_rows, float cap)
{
    if (logits->dtype != IFD_DTYPE_F32 || n_rows < 0 || n_rows > logits->rows)
        return IFD_EINVAL;
    return ifd_cuda_softcap(logits->data, (int64_t)n_rows * logits->cols, cap, ifd__st(be));
}

/* ---- graphs --------------------------------------------------------------- */

static int ifd__cuda_graph_begin(ifd_backend_t *be)
{
    ifd__cuda_backend_t *c = ifd__cu(be);
    if (c->capturing)
        return IFD_EINVAL;
    /* thread-local: another thread of the worker may allocate meanwhile */
    IFD__CK(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
    c->capturing = true;
    return 0;
}

static int ifd__cuda_graph_end(ifd_backend_t *be, int key)
{
    ifd__cuda_backend_t *c = ifd__cu(be);
    if (!c->capturing)
        return IFD_EINVAL;
    c->capturing = false;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(c->stream, &g);
    if (e != cudaSuccess || !g) {
        IFD_ERROR("cuda backend: cudaStreamEndCapture: %s", cudaGetErrorString(e));
        (void)cudaGetLastError();
        if (g)
            (void)cudaGraphDestroy(g);
        return IFD_ECUDA;
    }
    if (key < 0 || key >= IFD_BACKEND_MAX_GRAPHS) {
        (void)cudaGraphDestroy(g);
        return IFD_EINVAL;
    }
    cudaGraphExec_t x = NULL;
    e = cudaGraphInstantiate(&x, g, 0);
    (void)cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        IFD_ERROR("cuda backend: cudaGraphInstantiate: %s", cudaGetErrorString(e));
        return IFD_ECUDA;
    }
    if (c->graph[key])
        (void)cudaGraphExecDestroy(c->graph[key]);
    c->graph[key] = x;
    return 0;
}

static int ifd__cuda_graph_launch(ifd_backend_t *be, int key)
{
    ifd__cuda_backend_t *c = ifd__cu(be);
    if (key < 0 || key >= IFD_BACKEND_MAX_GRAPHS || c->capturing)
        return IFD_EINVAL;
    if (!c->graph[key])
        return IFD_ENOTFOUND;
    IFD__CK(cudaGraphLaunch(c->graph[key], c->stream));
    return 0;
}

#define IFD__CUDA_OPS_COMMON \
    .host_memory = false, \
    .destroy = ifd__cuda_destroy, \
    .alloc = ifd__cuda_alloc, \
    .free = ifd__cuda_free, \
    .upload = ifd__cuda_upload, \
    .download = ifd__cuda_download, \
    .sync = ifd__cuda_sync, \
    .host_alloc = ifd__cuda_host_alloc, \
    .host_free = ifd__cuda_host_free, \
    .download_async = ifd__cuda_download_async, \
    .copy_fence = ifd__cuda_copy_fence, \
    .copy_done = ifd__cuda_copy_done, \
    .upload_async = ifd__cuda_upload_async, \
    .copy_wait = ifd__cuda_copy_wait, \
    .kv_provider = ifd__cuda_kv_provider, \
    .can_load = ifd__cuda_can_load, \
    .load_weight = ifd__cuda_load_weight, \
    .load_proj = ifd__cuda_load_proj, \
    .weight_free = ifd__cuda_weight_free, \
    .proj_free = ifd__cuda_proj_free, \
    .act_alloc = ifd__cuda_act_alloc, \
    .act_free = ifd__cuda_act_free, \
    .embed = ifd__cuda_embed, \
    .rmsnorm = ifd__cuda_rmsnorm, \
    .proj = ifd__cuda_proj, \
    .rope_kv = ifd__cuda_rope_kv, \
    .attn_workspace = ifd__cuda_attn_workspace, \
    .attention = ifd__cuda_attention, \
    .glu = ifd__cuda_glu, \
    .gather_rows = ifd__cuda_gather_rows, \
    .sample = ifd__cuda_sample, \
    .softcap = ifd__cuda_softcap, \
    .layernorm = ifd__cuda_layernorm, \
    .add_rows = ifd__cuda_add_rows, \
    .gelu = ifd__cuda_gelu, \
    .dense_attention = ifd__cuda_dense_attention, \
    .avg_pool2d = ifd__cuda_avg_pool2d, \
    .graph_begin = ifd__cuda_graph_begin, \
    .graph_end = ifd__cuda_graph_end, \
    .graph_launch = ifd__cuda_graph_launch,

static const ifd_backend_ops_t ifd__cuda_ops = {
    .name = "cuda",
    .mm_in_dtype = IFD_DTYPE_BF16,
    IFD__CUDA_OPS_COMMON
};

/* Exact mode (ifd_backend_cuda_create's f32): f32 everywhere. */
static const ifd_backend_ops_t ifd__cuda_ops_f32 = {
    .name = "cuda-f32",
    .mm_in_dtype = IFD_DTYPE_F32,
    IFD__CUDA_OPS_COMMON
};
#undef IFD__CUDA_OPS_COMMON

static int ifd__cuda_init(ifd__cuda_backend_t *c, char *errbuf, size_t errlen)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count <= c->device || c->device < 0) {
        snprintf(errbuf, errlen, "no CUDA device %d (%s)", c->device,
                 e != cudaSuccess ? cudaGetErrorString(e) : "not present");
        return IFD_ENODEV;
    }
    IFD__CK(cudaSetDevice(c->device));
    IFD__CK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    IFD__LT(cublasLtCreate(&c->lt));
    const int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
    IFD__LT(cublasLtMatmulDescCreate(&c->mm, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    IFD__LT(cublasLtMatmulDescCreate(&c->mm_bias, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasLtMatmulDesc_t ds[2] = {c->mm, c->mm_bias};
    for (int i = 0; i < 2; i++) {
        IFD__LT(cublasLtMatmulDescSetAttribute(ds[i], CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
        IFD__LT(cublasLtMatmulDescSetAttribute(ds[i], CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    }
    IFD__LT(cublasLtMatmulDescSetAttribute(c->mm_bias, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                           sizeof epi));
    const uint64_t ws = IFD__LT_WORKSPACE;
    IFD__LT(cublasLtMatmulPreferenceCreate(&c->pref));
    IFD__LT(cublasLtMatmulPreferenceSetAttribute(c->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &ws, sizeof ws));
    IFD__CK(cudaHostAlloc((void **)&c->stage, IFD__STAGE_BYTES, cudaHostAllocDefault));
    return ifd__cuda_alloc(&c->base, IFD__LT_WORKSPACE, &c->lt_ws);
}

int ifd_backend_cuda_create(ifd_backend_t **out, int device, bool f32, char *errbuf,
                            size_t errlen)
{
    ifd__cuda_backend_t *c = calloc(1, sizeof *c);
    if (!c)
        return IFD_ENOMEM;
    c->base.ops = f32 ? &ifd__cuda_ops_f32 : &ifd__cuda_ops;
    c->device = device;
    c->f32 = f32;
    char dummy[8];
    if (!errbuf || !errlen)
        errbuf = dummy, errlen = sizeof dummy;
    errbuf[0] = 0;
    int rc = ifd__cuda_init(c, errbuf, errlen);
    if (rc) {
        if (!errbuf[0])
            snprintf(errbuf, errlen, "CUDA backend setup failed: %s", ifd_strerror(rc));
        ifd__cuda_destroy(&c->base);
        return rc;
    }
    *out = &c->base;
    return 0;
}
