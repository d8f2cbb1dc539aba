/*
 * cublaslt_emu.cc — the slice of cuBLASLt that worker/backend_cuda.c calls,
 * on the CPU, for the emulator build (tests/gpu/emu): handles, matmul and
 * matrix-layout descriptors, and cublasLtMatmul as a plain reference loop.
 * Test code only; never linked into inferd.
 *
 * Supported exactly what the backend uses, everything else answers
 * CUBLAS_STATUS_NOT_SUPPORTED (so a new use shows up here, not as silently
 * wrong numbers): column-major A, B, C, D without batching; A and B of
 * CUDA_R_16BF, CUDA_R_16F or CUDA_R_32F; C = D of CUDA_R_32F; compute
 * CUBLAS_COMPUTE_32F with f32 scalars on the host; op N or T on A and B;
 * epilogue DEFAULT or BIAS (f32 bias of D's rows). The sum runs over k in
 * order in double and is rounded once (the real library's order differs;
 * the backend's tolerance against the CPU covers it). The workspace is
 * ignored. cublasLtMatmulAlgoGetHeuristic returns one algorithm that names
 * the problem it was asked for (M, N, K, types, epilogue); cublasLtMatmul
 * refuses an algorithm from another problem, so a heuristic cache keyed
 * wrongly fails here. Heuristic queries and matmuls are counted
 * (cuda_emu_counters.h). On a capturing stream a matmul is recorded into
 * the graph with its descriptors' values copied, as the device captures
 * the kernel's parameters. Single-threaded, like the rest of the emulator.
 */
#include <cublasLt.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda_emu.h"

struct cublasLtContext {
    uint64_t magic;
};

namespace
{

const uint64_t DESC_MAGIC = 0x1fd0de5c, LAYOUT_MAGIC = 0x1fd01a70, PREF_MAGIC = 0x1fd0ef,
               ALGO_MAGIC = 0x1fd0a160;

enum { D_MAGIC, D_COMPUTE, D_SCALE, D_TRANSA, D_TRANSB, D_EPILOGUE, D_BIAS, D_BIAS_TYPE };
enum { L_MAGIC, L_TYPE, L_ROWS, L_COLS, L_LD };

float load(const void *p, int64_t i, uint64_t type)
{
    switch (type) {
    case CUDA_R_32F:
        return ((const float *)p)[i];
    case CUDA_R_16F:
        return ifd_emu_f16_to_f32(((const uint16_t *)p)[i]);
    default: { /* CUDA_R_16BF */
        uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    }
}

bool in_type_ok(uint64_t t)
{
    return t == CUDA_R_32F || t == CUDA_R_16F || t == CUDA_R_16BF;
}

/* What an algorithm is for: the problem's shape, types and epilogue. */
void problem_key(uint64_t out[7], cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A,
                 cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t D)
{
    out[0] = ALGO_MAGIC;
    out[1] = A->data[L_ROWS] << 32 | A->data[L_COLS];
    out[2] = B->data[L_ROWS] << 32 | B->data[L_COLS];
    out[3] = D->data[L_ROWS] << 32 | D->data[L_COLS];
    out[4] = A->data[L_TYPE] << 32 | D->data[L_TYPE];
    out[5] = d->data[D_TRANSA] << 32 | d->data[D_TRANSB];
    out[6] = d->data[D_EPILOGUE];
}

/* The problem's shapes and types are what this emulation supports. */
cublasStatus_t check(const cublasLtMatmulDescOpaque_t *d, const cublasLtMatrixLayoutOpaque_t *Ad,
                     const cublasLtMatrixLayoutOpaque_t *Bd,
                     const cublasLtMatrixLayoutOpaque_t *Cd,
                     const cublasLtMatrixLayoutOpaque_t *Dd)
{
    const bool ta = d->data[D_TRANSA] == CUBLAS_OP_T, tb = d->data[D_TRANSB] == CUBLAS_OP_T;
    const int64_t M = (int64_t)(ta ? Ad->data[L_COLS] : Ad->data[L_ROWS]);
    const int64_t K = (int64_t)(ta ? Ad->data[L_ROWS] : Ad->data[L_COLS]);
    const int64_t KB = (int64_t)(tb ? Bd->data[L_COLS] : Bd->data[L_ROWS]);
    const int64_t N = (int64_t)(tb ? Bd->data[L_ROWS] : Bd->data[L_COLS]);
    if (KB != K || (int64_t)Dd->data[L_ROWS] != M || (int64_t)Dd->data[L_COLS] != N ||
        Cd->data[L_ROWS] != Dd->data[L_ROWS] || Cd->data[L_COLS] != Dd->data[L_COLS])
        return CUBLAS_STATUS_INVALID_VALUE;
    if (Dd->data[L_TYPE] != CUDA_R_32F || Cd->data[L_TYPE] != CUDA_R_32F ||
        Ad->data[L_TYPE] != Bd->data[L_TYPE])
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (d->data[D_EPILOGUE] == CUBLASLT_EPILOGUE_BIAS && !d->data[D_BIAS])
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

/* D = alpha op(A) op(B) + beta C (+ bias per row of D), all column-major,
 * for a problem check() accepted. */
void compute(const cublasLtMatmulDescOpaque_t *d, float al, const void *A,
             const cublasLtMatrixLayoutOpaque_t *Ad, const void *B,
             const cublasLtMatrixLayoutOpaque_t *Bd, float be, const void *C,
             const cublasLtMatrixLayoutOpaque_t *Cd, void *D,
             const cublasLtMatrixLayoutOpaque_t *Dd)
{
    ifd_emu_count_lt(false);
    const bool ta = d->data[D_TRANSA] == CUBLAS_OP_T, tb = d->data[D_TRANSB] == CUBLAS_OP_T;
    const int64_t M = (int64_t)(ta ? Ad->data[L_COLS] : Ad->data[L_ROWS]);
    const int64_t K = (int64_t)(ta ? Ad->data[L_ROWS] : Ad->data[L_COLS]);
    const int64_t N = (int64_t)(tb ? Bd->data[L_ROWS] : Bd->data[L_COLS]);
    const float *bias = (const float *)(uintptr_t)d->data[D_BIAS];
    const bool use_bias = d->data[D_EPILOGUE] == CUBLASLT_EPILOGUE_BIAS;
    const int64_t lda = (int64_t)Ad->data[L_LD], ldb = (int64_t)Bd->data[L_LD];
    const int64_t ldc = (int64_t)Cd->data[L_LD], ldd = (int64_t)Dd->data[L_LD];
    const uint64_t at = Ad->data[L_TYPE], bt = Bd->data[L_TYPE];
    float *out = (float *)D;
    /* the operands converted to f32 once (A whole, B a column at a time):
     * the same products and the same order of the sums as element by element */
    std::vector<float> a((size_t)(M * K)), b((size_t)K);
    for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < K; k++)
            a[(size_t)(i * K + k)] = load(A, ta ? i * lda + k : k * lda + i, at);
    for (int64_t j = 0; j < N; j++) {
        for (int64_t k = 0; k < K; k++)
            b[(size_t)k] = load(B, tb ? k * ldb + j : j * ldb + k, bt);
        for (int64_t i = 0; i < M; i++) {
            const float *ar = a.data() + i * K;
            double s = 0;
            for (int64_t k = 0; k < K; k++)
                s += (double)ar[k] * b[(size_t)k];
            float v = al * (float)s;
            if (be != 0.0f)
                v += be * ((const float *)C)[j * ldc + i];
            if (use_bias)
                v += bias[i];
            out[j * ldd + i] = v;
        }
    }
}

} // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
    *h = new cublasLtContext{0x1fd0c7};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasLtGetStatusString(cublasStatus_t s)
{
    return s == CUBLAS_STATUS_SUCCESS ? "success (emulator)" : "failure (emulator)";
}

const char *cublasLtGetStatusName(cublasStatus_t s)
{
    return cublasLtGetStatusString(s);
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute,
                                        cudaDataType_t scale)
{
    if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    cublasLtMatmulDescOpaque_t *o = new cublasLtMatmulDescOpaque_t();
    o->data[D_MAGIC] = DESC_MAGIC;
    o->data[D_COMPUTE] = compute;
    o->data[D_SCALE] = scale;
    o->data[D_TRANSA] = CUBLAS_OP_N;
    o->data[D_TRANSB] = CUBLAS_OP_N;
    o->data[D_EPILOGUE] = CUBLASLT_EPILOGUE_DEFAULT;
    o->data[D_BIAS_TYPE] = CUDA_R_32F;
    *d = o;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
    delete d;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t size)
{
    if (!d || d->data[D_MAGIC] != DESC_MAGIC)
        return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB: {
        int32_t v;
        if (size != sizeof v)
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&v, buf, sizeof v);
        if (v != CUBLAS_OP_N && v != CUBLAS_OP_T)
            return CUBLAS_STATUS_NOT_SUPPORTED;
        d->data[attr == CUBLASLT_MATMUL_DESC_TRANSA ? D_TRANSA : D_TRANSB] = (uint64_t)v;
        return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_EPILOGUE: {
        uint32_t v;
        if (size != sizeof v)
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&v, buf, sizeof v);
        if (v != CUBLASLT_EPILOGUE_DEFAULT && v != CUBLASLT_EPILOGUE_BIAS)
            return CUBLAS_STATUS_NOT_SUPPORTED;
        d->data[D_EPILOGUE] = v;
        return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: {
        void *p;
        if (size != sizeof p)
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&p, buf, sizeof p);
        d->data[D_BIAS] = (uint64_t)(uintptr_t)p;
        return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: {
        int32_t v;
        if (size != sizeof v)
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&v, buf, sizeof v);
        if (v != CUDA_R_32F)
            return CUBLAS_STATUS_NOT_SUPPORTED;
        return CUBLAS_STATUS_SUCCESS;
    }
    default:
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld)
{
    if (!in_type_ok(type) || ld < (int64_t)rows || ld < 1)
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasLtMatrixLayoutOpaque_t *o = new cublasLtMatrixLayoutOpaque_t();
    o->data[L_MAGIC] = LAYOUT_MAGIC;
    o->data[L_TYPE] = type;
    o->data[L_ROWS] = rows;
    o->data[L_COLS] = cols;
    o->data[L_LD] = (uint64_t)ld;
    *l = o;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
    delete l;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
    cublasLtMatmulPreferenceOpaque_t *o = new cublasLtMatmulPreferenceOpaque_t();
    o->data[0] = PREF_MAGIC;
    *p = o;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t size)
{
    if (!p || p->data[0] != PREF_MAGIC)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (attr != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES || size != sizeof(uint64_t))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    memcpy(&p->data[1], buf, sizeof(uint64_t));
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                                              cublasLtMatrixLayout_t Ad,
                                              cublasLtMatrixLayout_t Bd,
                                              cublasLtMatrixLayout_t Cd,
                                              cublasLtMatrixLayout_t Dd,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int *returned)
{
    ifd_emu_count_lt(true);
    if (!h || !d || d->data[D_MAGIC] != DESC_MAGIC || !Ad || !Bd || !Cd || !Dd || !pref ||
        pref->data[0] != PREF_MAGIC || requested < 1 || !results || !returned)
        return CUBLAS_STATUS_INVALID_VALUE;
    memset(&results[0], 0, sizeof results[0]);
    problem_key(results[0].algo.data, d, Ad, Bd, Dd);
    results[0].workspaceSize = 0;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t Ad, const void *B,
                              cublasLtMatrixLayout_t Bd, const void *beta, const void *C,
                              cublasLtMatrixLayout_t Cd, void *D, cublasLtMatrixLayout_t Dd,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes,
                              cudaStream_t stream)
{
    (void)ws, (void)ws_bytes;
    if (!h || !d || d->data[D_MAGIC] != DESC_MAGIC || !Ad || !Bd || !Cd || !Dd ||
        Ad->data[L_MAGIC] != LAYOUT_MAGIC || Bd->data[L_MAGIC] != LAYOUT_MAGIC ||
        Cd->data[L_MAGIC] != LAYOUT_MAGIC || Dd->data[L_MAGIC] != LAYOUT_MAGIC)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (algo) {
        uint64_t key[7];
        problem_key(key, d, Ad, Bd, Dd);
        if (memcmp(key, algo->data, sizeof key) != 0)
            return CUBLAS_STATUS_INVALID_VALUE; /* an algorithm for another problem */
    }
    cublasStatus_t st = check(d, Ad, Bd, Cd, Dd);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    /* Values, not handles: the descriptors may change or go before a replay. */
    const cublasLtMatmulDescOpaque_t dv = *d;
    const cublasLtMatrixLayoutOpaque_t av = *Ad, bv = *Bd, cv = *Cd, ev = *Dd;
    const float al = *(const float *)alpha, bt = *(const float *)beta;
    auto op = [=]() { compute(&dv, al, A, &av, B, &bv, bt, C, &cv, D, &ev); };
    if (!ifd_emu_enqueue(stream, op))
        op();
    return CUBLAS_STATUS_SUCCESS;
}

} /* extern "C" */
