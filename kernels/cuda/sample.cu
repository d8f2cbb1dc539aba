/*
 * sample.cu — greedy / top-k / top-p / min-p sampling (sample.h).
 *
 * One block per row, no sorting and no scratch memory: every pass re-reads
 * the row (it stays in L2) and recomputes s_i = l_i / T (IEEE division),
 * x_i = s_i == m ? 0 : s_i - m (float32) and the integer weight
 * q_i = ifd_sampling_weight(x_i), all with explicitly rounded operations, so
 * each value is bit-identical to the CPU sampler's. Then, as sampler.h
 * defines it:
 *   1. max, first argmax, and the NaN/+inf check (greedy rows stop here);
 *   2. min-p: A = {q_i >= qmin}, qmin = max(1, ceil(min_p * 2^43));
 *   3. top-k (0 < k < |A|): the k-th largest s over A by a 4-pass radix
 *      select over order-preserving 32-bit keys of s (-0 folded into +0,
 *      since the definition compares values); B = A with s at or above it;
 *   4. Q = sum of q over B, an exact uint64 sum;
 *   5. top-p (< 1): the smallest value v in B whose heavier members weigh
 *      (double) less than top_p * Q (or v == m), by a 4-pass radix descent
 *      over the same keys with uint64 weight sums per digit; it also yields
 *      Z, the weight of everything kept (C);
 *   6. the draw: t = ifd_sampling_target(seed, position, Z); each thread
 *      sums the kept weights of a contiguous run of ids, an exclusive scan
 *      orders the runs, and the one thread whose run contains t walks it in
 *      ascending id to the first id where the running sum exceeds t.
 * Integer sums do not depend on order, so the result is independent of the
 * block size and the GPU.
 *
 * Also here, for the same definition: the penalties (steps 1-3, one block
 * per row), the grammar mask (step 3b, one thread per logit, a row's mask
 * word read once per 32 ids) and the logprobs (one block per scored row:
 * a pass for the maximum, the bad-value check and the rank; a pass for the
 * exact integer normalizer; for k <= 20 a pass in which each thread keeps
 * its own sorted top-k of (value, -id) keys, then k block-wide maxima over
 * the threads' list heads give the top-k in order; for a larger k a radix
 * select of the k-th key, the k keys compacted into the request's room and
 * sorted there by a bitonic network; listed ids gathered as they are), and
 * the final soft-cap
 * (one thread per logit, sampling_math.h's ifd_softcap).
 */
#include "sample.h"

#include "cuda_check.h"
#include "cuda_prim.cuh"

#include "sampling_math.h"

namespace
{

constexpr int THREADS = 512;
constexpr int NWARPS = THREADS / 32;
constexpr float GREEDY_TEMP = 1e-5f; /* IFD_SAMPLER_GREEDY_TEMP */

/* Order-preserving key of a float (larger float = larger key), -0 == +0. */
IFD_DEV uint32_t fkey(float s)
{
    uint32_t u = ifd_f2u(s == 0.0f ? 0.0f : s);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

struct row_ctx {
    const float *l;
    int V;
    float T, m;
};

IFD_DEV float scaled(const row_ctx &c, int i)
{
    return __fdiv_rn(c.l[i], c.T);
}

IFD_DEV float xof(const row_ctx &c, float s)
{
    return s == c.m ? 0.0f : __fsub_rn(s, c.m);
}

/* ---- block-wide helpers (all threads call them) --------------------------- */

struct smem_t {
    union {
        uint32_t h32[256];
        unsigned long long h64[256];
    } hist;
    unsigned long long red64[NWARPS];
    float redf[NWARPS];
    int redi[NWARPS];
    uint32_t key, mask, cnt;
    int whole;
    unsigned long long acc, z, key64, mask64;
    int32_t token;
};

IFD_DEV unsigned long long block_sum_u64(unsigned long long v, smem_t &sm)
{
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if (lane == 0)
        sm.red64[w] = v;
    __syncthreads();
    unsigned long long t = 0;
    for (int i = 0; i < NWARPS; i++)
        t += sm.red64[i];
    return t;
}

/* Exclusive prefix sum over threads in thread order. */
IFD_DEV unsigned long long block_excl_scan_u64(unsigned long long v, smem_t &sm)
{
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    unsigned long long inc = v;
    for (int o = 1; o < 32; o <<= 1) {
        unsigned long long n = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o)
            inc += n;
    }
    __syncthreads();
    if (lane == 31)
        sm.red64[w] = inc;
    __syncthreads();
    unsigned long long before = 0;
    for (int i = 0; i < w; i++)
        before += sm.red64[i];
    return before + inc - v;
}

/* Max value with its lowest index (NaN excluded by the caller). */
IFD_DEV void block_argmax(float *v, int *idx, smem_t &sm)
{
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    float bv = *v;
    int bi = *idx;
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ov > bv || (ov == bv && oi < bi))
            bv = ov, bi = oi;
    }
    __syncthreads();
    if (lane == 0) {
        sm.redf[w] = bv;
        sm.redi[w] = bi;
    }
    __syncthreads();
    bv = sm.redf[0];
    bi = sm.redi[0];
    for (int i = 1; i < NWARPS; i++)
        if (sm.redf[i] > bv || (sm.redf[i] == bv && sm.redi[i] < bi))
            bv = sm.redf[i], bi = sm.redi[i];
    *v = bv;
    *idx = bi;
}

IFD_DEV int block_or(int v, smem_t &sm)
{
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1)
        v |= __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if (lane == 0)
        sm.redi[w] = v;
    __syncthreads();
    int r = 0;
    for (int i = 0; i < NWARPS; i++)
        r |= sm.redi[i];
    return r;
}

/* ---- the sampling kernel's steps (every thread of the block calls them) ---- */

/* Step 1: the row's maximum and its first index (the same in every thread
 * after the call). True when the row holds a NaN or +inf. */
IFD_DEV bool row_max(const float *l, int V, float *best, int *bidx, smem_t &sm)
{
    const int tid = threadIdx.x;
    float b = -INFINITY;
    int bi = 0x7fffffff, bad = 0;
    for (int i = tid; i < V; i += THREADS) {
        const float v = l[i];
        bad |= (v != v) | (v == INFINITY);
        if (v > b || (v == b && i < bi))
            b = v, bi = i;
    }
    bad = block_or(bad, sm);
    block_argmax(&b, &bi, sm);
    *best = b;
    *bidx = bi;
    return bad != 0;
}

/* What decides an id's weight once T and m are known: min-p's qmin, and the
 * top-k threshold key (0 = none: every key is >= 0). */
struct weights_t {
    row_ctx c;
    uint64_t qmin;
    uint32_t kkey;
};

/* Weight of id i if it is in A (else 0), and its key. */
IFD_DEV uint64_t weight_a(const weights_t &w, int i, uint32_t *key)
{
    const float s = scaled(w.c, i);
    const float x = xof(w.c, s);
    if (!(x >= IFD_SAMPLING_X_MIN))
        return 0; /* q = 0 < qmin */
    const uint64_t q = ifd_sampling_weight(x);
    if (q < w.qmin)
        return 0;
    *key = fkey(s);
    return q;
}

/* Weight of id i if it is in B (else 0), and its key. */
IFD_DEV uint64_t weight_b(const weights_t &w, int i, uint32_t *key)
{
    const uint64_t q = weight_a(w, i, key);
    return q && *key >= w.kkey ? q : 0;
}

/* Zeroes the radix histogram (all 256 64-bit counters, which cover the
 * 32-bit ones too) before a pass. */
IFD_DEV void hist_clear(smem_t &sm)
{
    for (int b = threadIdx.x; b < 256; b += THREADS)
        sm.hist.h64[b] = 0;
    __syncthreads();
}

/* A radix select's digit: the bucket of h[256] (counts per digit, the
 * largest digit first) that holds the *kk-th largest key, *kk becoming its
 * rank inside that bucket (bucket 0 takes whatever is left). */
IFD_DEV int hist_digit(const uint32_t *h, uint32_t *kk)
{
    int b = 255;
    for (; b > 0; b--) {
        if (*kk <= h[b])
            break;
        *kk -= h[b];
    }
    return b;
}

/* Step 3 (0 < k < V): the top-k threshold key over A, the k-th largest key
 * by a 4-pass radix select; 0 (no cut) when A has at most k members. */
IFD_DEV uint32_t topk_key(const weights_t &w, int top_k, smem_t &sm)
{
    const int tid = threadIdx.x, V = w.c.V;
    int na = 0;
    for (int i = tid; i < V; i += THREADS) {
        uint32_t key;
        na += weight_a(w, i, &key) != 0;
    }
    const unsigned long long nA = block_sum_u64((unsigned long long)na, sm);
    if (nA <= (unsigned long long)top_k)
        return 0;
    uint32_t prefix = 0, mask = 0;
    uint32_t kk = (uint32_t)top_k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        hist_clear(sm);
        for (int i = tid; i < V; i += THREADS) {
            uint32_t key;
            if (weight_a(w, i, &key) && (key & mask) == prefix)
                atomicAdd(&sm.hist.h32[(key >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (tid == 0) {
            const int b = hist_digit(sm.hist.h32, &kk);
            sm.key = prefix | ((uint32_t)b << shift);
            sm.mask = mask | (255u << shift);
            sm.hist.h32[0] = kk; /* carried in shared memory to all */
        }
        __syncthreads();
        prefix = sm.key;
        mask = sm.mask;
        kk = sm.hist.h32[0];
        __syncthreads();
    }
    return prefix;
}

/* Step 5 (top_p < 1): the cut key, the smallest key in B whose heavier
 * members weigh less than top_p * Q, by a 4-pass radix descent with uint64
 * weight sums per digit; *Z gets the weight of everything kept. */
IFD_DEV uint32_t topp_cut(const weights_t &w, float top_p, unsigned long long Q,
                          unsigned long long *Z, smem_t &sm)
{
    const int tid = threadIdx.x, V = w.c.V;
    const double thr = __dmul_rn((double)top_p, (double)Q);
    uint32_t prefix = 0, mask = 0;
    unsigned long long acc = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        hist_clear(sm);
        for (int i = tid; i < V; i += THREADS) {
            uint32_t key;
            const uint64_t q = weight_b(w, i, &key);
            if (q && (key & mask) == prefix)
                atomicAdd(&sm.hist.h64[(key >> shift) & 255u], (unsigned long long)q);
        }
        __syncthreads();
        if (tid == 0) {
            unsigned long long run = 0, best_run = 0;
            int bb = -1;
            for (int b = 255; b >= 0; b--) {
                const unsigned long long hw = sm.hist.h64[b];
                if (hw == 0)
                    continue;
                const unsigned long long above = acc + run;
                if (above == 0 || (double)above < thr) {
                    bb = b;
                    best_run = run;
                } else {
                    break;
                }
                run += hw;
            }
            /* bb >= 0: the maximum survives and is in the top bucket. */
            sm.acc = acc + best_run;
            sm.z = sm.acc + sm.hist.h64[bb];
            sm.key = prefix | ((uint32_t)bb << shift);
            sm.mask = mask | (255u << shift);
        }
        __syncthreads();
        prefix = sm.key;
        mask = sm.mask;
        acc = sm.acc;
        *Z = sm.z;
        __syncthreads();
    }
    return prefix;
}

/* Step 6: the drawn id (-1 when nothing is kept) for target t in [0, Z):
 * each thread sums the kept weights (B, keys >= cut) of a contiguous run of
 * ids, an exclusive scan orders the runs, and the thread whose run holds t
 * walks it in ascending id. Every thread gets the id. */
IFD_DEV int32_t draw(const weights_t &w, uint32_t cut, uint64_t target, smem_t &sm)
{
    const int tid = threadIdx.x, V = w.c.V;
    const int seg = (V + THREADS - 1) / THREADS;
    const int i0 = tid * seg, i1 = i0 + seg < V ? i0 + seg : V;
    unsigned long long mine = 0;
    for (int i = i0; i < i1; i++) {
        uint32_t key;
        const uint64_t q = weight_b(w, i, &key);
        if (q && key >= cut)
            mine += q;
    }
    if (tid == 0)
        sm.token = -1;
    const unsigned long long before = block_excl_scan_u64(mine, sm);
    if (mine && before <= target && target < before + mine) {
        unsigned long long run = before;
        for (int i = i0; i < i1; i++) {
            uint32_t key;
            const uint64_t q = weight_b(w, i, &key);
            if (!q || key < cut)
                continue;
            run += q;
            if (run > target) {
                sm.token = i;
                break;
            }
        }
    }
    __syncthreads();
    return sm.token;
}

__global__ void __launch_bounds__(THREADS)
    sample_kernel(int32_t *tokens, const float *logits, const ifd_cuda_sample_params_t *params,
                  int V)
{
    __shared__ smem_t sm;
    const int row = blockIdx.x, tid = threadIdx.x;
    const ifd_cuda_sample_params_t P = params[row];
    weights_t w;
    w.c.l = logits + (int64_t)row * V;
    w.c.V = V;

    /* 1. max, first argmax, bad values. */
    float best;
    int bidx;
    const bool bad = row_max(w.c.l, V, &best, &bidx, sm);
    const bool params_ok = P.temperature >= 0.0f && P.temperature <= 3.4e38f && P.top_p >= 0.0f &&
                           P.top_p <= 1.0f && P.min_p >= 0.0f && P.min_p <= 1.0f;
    if (bad || best == -INFINITY || !params_ok) {
        if (tid == 0)
            tokens[row] = -1;
        return;
    }
    if (P.temperature < GREEDY_TEMP) {
        if (tid == 0)
            tokens[row] = bidx < V ? bidx : 0;
        return;
    }
    w.c.T = P.temperature;
    w.c.m = __fdiv_rn(best, w.c.T); /* division by T > 0 is monotone: max(l / T) */
    /* 2. qmin = max(1, ceil(min_p * 2^43)); the product is exact. */
    const double qd = ceil((double)P.min_p * (double)(1ull << IFD_SAMPLING_WEIGHT_BITS));
    w.qmin = qd < 1.0 ? 1 : (uint64_t)qd;
    w.kkey = 0;

    /* 3. top-k threshold key over A (weight_a does not read it). */
    if (P.top_k > 0 && P.top_k < V)
        w.kkey = topk_key(w, P.top_k, sm);

    /* 4. Q. */
    unsigned long long part = 0;
    for (int i = tid; i < V; i += THREADS) {
        uint32_t key;
        part += weight_b(w, i, &key);
    }
    const unsigned long long Q = block_sum_u64(part, sm);

    /* 5. top-p: cut key and Z. */
    uint32_t cut = 0;
    unsigned long long Z = Q;
    if (P.top_p < 1.0f)
        cut = topp_cut(w, P.top_p, Q, &Z, sm);

    /* 6. the draw over contiguous runs of ids. */
    const int32_t token = draw(w, cut, ifd_sampling_target(P.seed, P.position, Z), sm);
    if (tid == 0)
        tokens[row] = token;
}

IFD_DEV unsigned long long block_max_u64(unsigned long long v, smem_t &sm)
{
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        const unsigned long long ov = __shfl_xor_sync(0xffffffffu, v, o);
        v = ov > v ? ov : v;
    }
    __syncthreads();
    if (lane == 0)
        sm.red64[w] = v;
    __syncthreads();
    unsigned long long t = 0;
    for (int i = 0; i < NWARPS; i++)
        t = sm.red64[i] > t ? sm.red64[i] : t;
    return t;
}

/* ---- logprobs --------------------------------------------------------------- */

/* A (value, id) pair as one key: larger value first, then lower id (ids are
 * below 2^20, so the low word is never 0 and 0 means "none"). */
IFD_DEV unsigned long long lp_key(float v, int i)
{
    return ((unsigned long long)fkey(v) << 32) | (unsigned long long)(0xffffffffu - (uint32_t)i);
}

/* A top k past IFD_CUDA_MAX_LOGPROBS (1 <= k < V): the k-th largest lp_key
 * of the row by a radix select, 8 bits a pass from the top; it stops once
 * the digit's bucket is taken whole. Exactly k keys are >= the result
 * (keys are distinct: the id is in them). */
IFD_DEV unsigned long long lp_select(const float *x, int V, int k, smem_t &sm)
{
    const int tid = threadIdx.x;
    unsigned long long prefix = 0, mask = 0;
    uint32_t kk = (uint32_t)k;
    for (int shift = 56; shift >= 0; shift -= 8) {
        hist_clear(sm);
        for (int i = tid; i < V; i += THREADS) {
            const unsigned long long key = lp_key(x[i], i);
            if ((key & mask) == prefix)
                atomicAdd(&sm.hist.h32[(uint32_t)(key >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (tid == 0) {
            const int b = hist_digit(sm.hist.h32, &kk);
            sm.key64 = prefix | ((unsigned long long)b << shift);
            sm.mask64 = mask | (255ull << shift);
            sm.whole = kk == sm.hist.h32[b]; /* every key of this prefix is in */
            sm.hist.h32[0] = kk;
        }
        __syncthreads();
        prefix = sm.key64;
        mask = sm.mask64;
        kk = sm.hist.h32[0];
        const int whole = sm.whole;
        __syncthreads();
        if (whole) /* the keys below the prefix's digits are 0: >= takes them all */
            break;
    }
    return prefix;
}

/* keys[a] and keys[b] (a < b) in descending order. */
IFD_DEV void lp_cmpx(unsigned long long *keys, int a, int b)
{
    const unsigned long long ka = keys[a], kb = keys[b];
    if (ka < kb)
        keys[a] = kb, keys[b] = ka;
}

/* keys[0 .. n) in descending order by a bitonic network over the next power
 * of two P >= n, in its flip form (every comparator sends the larger key to
 * the lower index), so the virtual keys past n would be the smallest and
 * never move: a comparator reaching past n is skipped. */
IFD_DEV void lp_sort(unsigned long long *keys, int n)
{
    int P = 1;
    while (P < n)
        P <<= 1;
    const int pairs = P >> 1;
    for (int size = 2; size <= P; size <<= 1) {
        const int half = size >> 1;
        for (int t = threadIdx.x; t < pairs; t += THREADS) {
            const int blk = t / half, off = t - blk * half;
            const int a = blk * size + off, b = blk * size + size - 1 - off;
            if (b < n)
                lp_cmpx(keys, a, b);
        }
        __syncthreads();
        for (int d = half >> 1; d > 0; d >>= 1) {
            for (int t = threadIdx.x; t < pairs; t += THREADS) {
                const int a = (t / d) * 2 * d + t % d, b = a + d;
                if (b < n)
                    lp_cmpx(keys, a, b);
            }
            __syncthreads();
        }
    }
}

__global__ void __launch_bounds__(THREADS)
    logprob_kernel(ifd_cuda_logprob_t *out, const ifd_cuda_logprob_req_t *reqs,
                   const int32_t *tokens, int V)
{
    __shared__ smem_t sm;
    const int tid = threadIdx.x;
    const ifd_cuda_logprob_req_t R = reqs[blockIdx.x];
    ifd_cuda_logprob_t *o = out + blockIdx.x;
    const int32_t tok = R.token >= 0 ? R.token : tokens ? tokens[R.tok_row] : -1;
    /* the entries: the n_ids listed ids, else the top k */
    const int k = R.n_ids > 0 ? R.n_ids : R.n_top < V ? R.n_top : V;
    const bool big = k > IFD_CUDA_MAX_LOGPROBS;
    const bool ok = tok >= 0 && tok < V && R.n_top >= 0 && R.n_ids >= 0 &&
                    (R.n_ids == 0 || R.ids) && (!big || (R.more && ((uintptr_t)R.more & 7u) == 0));
    for (int j = tid; j < IFD_CUDA_MAX_LOGPROBS; j += THREADS) {
        o->top_ids[j] = 0;
        o->top_logprobs[j] = 0.0f;
    }
    if (!ok) { /* uniform over the block: no barrier is skipped by some */
        if (tid == 0)
            o->token = -1, o->logprob = 0.0f, o->rank = 0, o->n_top = 0;
        return;
    }
    const float *x = R.x;
    const float xt = x[tok];

    /* 1. maximum, bad values (and listed ids out of range), rank */
    float m = -INFINITY;
    int bad = 0, mi = 0;
    unsigned long long ge = 0;
    for (int i = tid; i < V; i += THREADS) {
        const float v = x[i];
        bad |= (v != v) | (v == INFINITY);
        m = v > m ? v : m;
        ge += v >= xt;
    }
    for (int j = tid; j < R.n_ids; j += THREADS)
        bad |= R.ids[j] < 0 || R.ids[j] >= V;
    bad = block_or(bad, sm);
    block_argmax(&m, &mi, sm);
    ge = block_sum_u64(ge, sm);
    if (bad) {
        if (tid == 0)
            o->token = -1, o->logprob = 0.0f, o->rank = 0, o->n_top = 0;
        return;
    }

    /* 2. the normalizer: the exact sum of the T = 1 weights */
    double lse = INFINITY; /* every logit -inf: every logprob -inf */
    if (m != -INFINITY) {
        unsigned long long z = 0;
        for (int i = tid; i < V; i += THREADS) {
            const float v = x[i];
            z += ifd_sampling_weight(v == m ? 0.0f : __fsub_rn(v, m));
        }
        z = block_sum_u64(z, sm);
        lse = __dadd_rn((double)m, log(__dmul_rn((double)z, 0x1p-43)));
    }
    auto logprob = [&](float v) -> float {
        return v == -INFINITY ? -INFINITY : (float)__dsub_rn((double)v, lse);
    };
    if (tid == 0) {
        o->token = tok;
        o->logprob = logprob(xt);
        o->rank = (int32_t)ge;
        o->n_top = k;
    }

    /* 3a. logprob_token_ids: these ids, in their order */
    if (R.n_ids > 0) {
        for (int j = tid; j < k; j += THREADS) {
            const int32_t id = R.ids[j];
            const float lp = logprob(x[id]);
            if (big) {
                R.more[j] = ifd_cuda_lp_entry_t{id, lp};
            } else {
                o->top_ids[j] = id;
                o->top_logprobs[j] = lp;
            }
        }
        return;
    }

    /* 3b. a large top k: select, compact into `more`, sort there, then
     * (id, logprob) in place of each key */
    if (big) {
        unsigned long long *keys = (unsigned long long *)R.more;
        const unsigned long long t = k < V ? lp_select(x, V, k, sm) : 0ull;
        if (tid == 0)
            sm.cnt = 0;
        __syncthreads();
        for (int i = tid; i < V; i += THREADS) {
            const unsigned long long key = lp_key(x[i], i);
            if (key >= t)
                keys[atomicAdd(&sm.cnt, 1u)] = key;
        }
        __syncthreads();
        lp_sort(keys, k);
        for (int j = tid; j < k; j += THREADS) {
            const unsigned long long key = keys[j];
            const int id = (int)(0xffffffffu - (uint32_t)(key & 0xffffffffu));
            R.more[j] = ifd_cuda_lp_entry_t{id, logprob(x[id])};
        }
        return;
    }

    /* 3c. a small top k: each thread's own sorted list, then k block-wide maxima */
    unsigned long long lst[IFD_CUDA_MAX_LOGPROBS];
    int n = 0;
    for (int i = tid; i < V && k > 0; i += THREADS) {
        const unsigned long long key = lp_key(x[i], i);
        if (n == k && key <= lst[k - 1])
            continue;
        int j = n < k ? n++ : k - 1;
        while (j > 0 && lst[j - 1] < key) {
            lst[j] = lst[j - 1];
            j--;
        }
        lst[j] = key;
    }
    int head = 0;
    for (int r = 0; r < k; r++) {
        const unsigned long long mine = head < n ? lst[head] : 0ull;
        const unsigned long long best = block_max_u64(mine, sm);
        if (mine == best)
            head++;
        if (tid == 0) {
            const int id = (int)(0xffffffffu - (uint32_t)(best & 0xffffffffu));
            o->top_ids[r] = id;
            o->top_logprobs[r] = logprob(x[id]);
        }
    }
}

/* ---- the final soft-cap ---------------------------------------------------- */

constexpr int CAP_THREADS = 256;

__global__ void __launch_bounds__(CAP_THREADS) softcap_kernel(float *x, int64_t n, float cap)
{
    const int64_t i = (int64_t)blockIdx.x * CAP_THREADS + threadIdx.x;
    if (i < n)
        x[i] = ifd_softcap(x[i], cap);
}

/* ---- step 3b: grammar masks ---------------------------------------------- */

constexpr int MASK_THREADS = 256;

__global__ void __launch_bounds__(MASK_THREADS)
    mask_kernel(float *logits, const uint32_t *masks, const int32_t *rows, int n_logit_rows, int V)
{
    const int j = blockIdx.y, r = rows[j];
    const int i = blockIdx.x * MASK_THREADS + threadIdx.x;
    if (r < 0 || r >= n_logit_rows || i >= V)
        return;
    const uint32_t w = masks[(int64_t)j * ((V + 31) / 32) + (i >> 5)];
    if ((w >> (i & 31)) & 1u)
        return;
    float *p = logits + (int64_t)r * V + i;
    const float v = *p;
    if (v == v && v != INFINITY) /* a bad value stays, for the sampler to report */
        *p = -INFINITY;
}

/* Steps 1-3 on one row per block: the bias entries in order by one thread
 * (ids may repeat), then the distinct history ids in parallel. */
constexpr int PEN_THREADS = 128;

__global__ void __launch_bounds__(PEN_THREADS)
    penalty_kernel(float *logits, const ifd_cuda_penalty_row_t *rows,
                   const ifd_cuda_logit_bias_t *bias, const ifd_cuda_hist_t *hist, int V)
{
    const ifd_cuda_penalty_row_t R = rows[blockIdx.x];
    float *l = logits + (int64_t)blockIdx.x * V;
    if (threadIdx.x == 0)
        for (int j = 0; j < R.n_bias; j++) {
            const ifd_cuda_logit_bias_t b = bias[R.bias0 + j];
            if (b.id >= 0 && b.id < V)
                l[b.id] = __fadd_rn(l[b.id], b.bias);
        }
    __syncthreads();
    const float rp = R.repetition_penalty, fp = R.frequency_penalty, pp = R.presence_penalty;
    for (int j = threadIdx.x; j < R.n_hist; j += PEN_THREADS) {
        const ifd_cuda_hist_t h = hist[R.hist0 + j];
        if (h.id < 0 || h.id >= V)
            continue;
        float v = l[h.id];
        if (rp != 1.0f)
            v = v > 0.0f ? __fdiv_rn(v, rp) : __fmul_rn(v, rp);
        const uint32_t gen = h.count & ~IFD_CUDA_HIST_PROMPT;
        if (gen) {
            v = __fsub_rn(v, __fmul_rn(fp, (float)gen));
            v = __fsub_rn(v, pp);
        }
        l[h.id] = v;
    }
}

} // namespace

extern "C" int ifd_cuda_apply_penalties(float *IFD_CUDA_RESTRICT logits,
                                        const ifd_cuda_penalty_row_t *IFD_CUDA_RESTRICT rows,
                                        const ifd_cuda_logit_bias_t *IFD_CUDA_RESTRICT bias,
                                        const ifd_cuda_hist_t *IFD_CUDA_RESTRICT hist,
                                        int n_rows, int vocab, ifd_cuda_stream_t stream)
{
    if (n_rows < 0 || vocab < 1 || vocab > IFD_SAMPLING_MAX_VOCAB)
        return IFD_EINVAL;
    if (n_rows == 0)
        return 0;
    if (!logits || !rows)
        return IFD_EINVAL;
    void (*kern)(float *, const ifd_cuda_penalty_row_t *, const ifd_cuda_logit_bias_t *,
                 const ifd_cuda_hist_t *, int) = penalty_kernel;
    IFD_LAUNCH(kern, dim3((unsigned)n_rows), dim3(PEN_THREADS), 0, stream, logits, rows, bias,
               hist, vocab);
    IFD_CUDA_CHECK_LAUNCH("penalty_kernel");
    return 0;
}

extern "C" int ifd_cuda_softcap(float *IFD_CUDA_RESTRICT x, int64_t n, float cap,
                                ifd_cuda_stream_t stream)
{
    if (n < 0 || !(cap > 0.0f && cap <= 3.4e38f) || n > (int64_t)CAP_THREADS * 0x7fffffff)
        return IFD_EINVAL;
    if (n == 0)
        return 0;
    if (!x)
        return IFD_EINVAL;
    void (*kern)(float *, int64_t, float) = softcap_kernel;
    IFD_LAUNCH(kern, dim3((unsigned)((n + CAP_THREADS - 1) / CAP_THREADS)), dim3(CAP_THREADS), 0,
               stream, x, n, cap);
    IFD_CUDA_CHECK_LAUNCH("softcap_kernel");
    return 0;
}

extern "C" int ifd_cuda_apply_mask(float *IFD_CUDA_RESTRICT logits,
                                   const uint32_t *IFD_CUDA_RESTRICT masks,
                                   const int32_t *IFD_CUDA_RESTRICT rows, int n_masks,
                                   int n_logit_rows, int vocab, ifd_cuda_stream_t stream)
{
    if (n_masks < 0 || n_masks > 65535 || n_logit_rows < 0 || vocab < 1 ||
        vocab > IFD_SAMPLING_MAX_VOCAB)
        return IFD_EINVAL;
    if (n_masks == 0)
        return 0;
    if (!logits || !masks || !rows)
        return IFD_EINVAL;
    void (*kern)(float *, const uint32_t *, const int32_t *, int, int) = mask_kernel;
    const dim3 grid((unsigned)((vocab + MASK_THREADS - 1) / MASK_THREADS), (unsigned)n_masks);
    IFD_LAUNCH(kern, grid, dim3(MASK_THREADS), 0, stream, logits, masks, rows, n_logit_rows,
               vocab);
    IFD_CUDA_CHECK_LAUNCH("mask_kernel");
    return 0;
}

extern "C" int ifd_cuda_logprobs(ifd_cuda_logprob_t *IFD_CUDA_RESTRICT out,
                                 const ifd_cuda_logprob_req_t *IFD_CUDA_RESTRICT reqs,
                                 const int32_t *IFD_CUDA_RESTRICT tokens, int n, int vocab,
                                 ifd_cuda_stream_t stream)
{
    if (n < 0 || vocab < 1 || vocab > IFD_SAMPLING_MAX_VOCAB)
        return IFD_EINVAL;
    if (n == 0)
        return 0;
    if (!out || !reqs)
        return IFD_EINVAL;
    void (*kern)(ifd_cuda_logprob_t *, const ifd_cuda_logprob_req_t *, const int32_t *, int) =
        logprob_kernel;
    IFD_LAUNCH(kern, dim3((unsigned)n), dim3(THREADS), 0, stream, out, reqs, tokens, vocab);
    IFD_CUDA_CHECK_LAUNCH("logprob_kernel");
    return 0;
}

extern "C" int ifd_cuda_sample(int32_t *IFD_CUDA_RESTRICT tokens,
                               const float *IFD_CUDA_RESTRICT logits,
                               const ifd_cuda_sample_params_t *IFD_CUDA_RESTRICT params, int n_rows,
                               int vocab, ifd_cuda_stream_t stream)
{
    if (n_rows < 0 || vocab < 1 || vocab > IFD_SAMPLING_MAX_VOCAB)
        return IFD_EINVAL;
    if (n_rows == 0)
        return 0;
    if (!tokens || !logits || !params)
        return IFD_EINVAL;
    void (*kern)(int32_t *, const float *, const ifd_cuda_sample_params_t *, int) = sample_kernel;
    IFD_LAUNCH(kern, dim3((unsigned)n_rows), dim3(THREADS), 0, stream, tokens, logits, params,
               vocab);
    IFD_CUDA_CHECK_LAUNCH("sample_kernel");
    return 0;
}
