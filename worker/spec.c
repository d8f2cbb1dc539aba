/*
 * spec.c — see spec.h.
 */
#include "spec.h"

#include "error.h"

#include <math.h>

int ifd_spec_check(const ifd_spec_params_t *p)
{
    if ((unsigned)p->method > IFD_SPEC_DRAFT || p->num_tokens < 0 ||
        p->num_tokens > IFD_SPEC_MAX_TOKENS || p->ngram_min < 0 || p->ngram_min > IFD_NGRAM_MAX_N ||
        p->ngram_max < 0 || p->ngram_max > IFD_NGRAM_MAX_N ||
        (p->ngram_min && p->ngram_max && p->ngram_min > p->ngram_max))
        return IFD_EINVAL;
    return 0;
}

int ifd_spec_resolve(ifd_spec_state_t *st, const ifd_spec_params_t *req,
                     const ifd_spec_params_t *eng, bool usable, bool has_draft)
{
    if (ifd_spec_check(req) != 0 || (req->method == IFD_SPEC_DRAFT && !has_draft))
        return IFD_EINVAL;
    const ifd_spec_method_t m = req->method != IFD_SPEC_DEFAULT ? req->method : eng->method;
    const int32_t k = req->num_tokens   ? req->num_tokens
                      : eng->num_tokens ? eng->num_tokens
                                        : IFD_SPEC_DEFAULT_TOKENS;
    int32_t lo = req->ngram_min ? req->ngram_min : eng->ngram_min ? eng->ngram_min : 1;
    int32_t hi = req->ngram_max ? req->ngram_max : eng->ngram_max ? eng->ngram_max : 4;
    if (lo > hi) {
        if (req->ngram_min)
            hi = lo;
        else
            lo = hi;
    }
    const bool on = (m == IFD_SPEC_NGRAM || (m == IFD_SPEC_DRAFT && has_draft)) && usable;
    *st = (ifd_spec_state_t){.kmax = on ? k : 0,
                             .k = on ? k : 0,
                             .nmin = lo,
                             .nmax = hi,
                             .method = on ? m : IFD_SPEC_OFF};
    return 0;
}

int32_t ifd_spec_want(ifd_spec_state_t *st, int32_t limit)
{
    if (st->kmax == 0)
        return 0;
    st->hits *= IFD_SPEC_DECAY;
    st->fails *= IFD_SPEC_DECAY;
    if (st->k == 0) {
        if (--st->wait > 0)
            return 0;
        st->k = 1; /* probe again */
    }
    return st->k < limit ? st->k : limit > 0 ? limit : 0;
}

int32_t ifd_spec_propose(ifd_spec_state_t *st, const int32_t *hist, int32_t n_hist, int32_t limit,
                         int32_t *out)
{
    const int32_t k = ifd_spec_want(st, limit);
    if (k > 0)
        return ifd_ngram_propose(hist, n_hist, st->nmin, st->nmax, k, out);
    if (st->kmax == 0 || st->k != 0 || limit <= 0)
        return 0;
    /* waiting after misses: a long match probes at once (spec.h) */
    const int32_t lo = st->nmin > IFD_SPEC_PROBE_N ? st->nmin : IFD_SPEC_PROBE_N;
    const int32_t m = lo <= st->nmax ? ifd_ngram_propose(hist, n_hist, lo, st->nmax, 1, out) : 0;
    if (m) {
        st->wait = 0;
        st->k = 1;
    }
    return m;
}

void ifd_spec_adapt(ifd_spec_state_t *st, int32_t nd, int32_t acc)
{
    st->hits += (float)acc;
    st->fails += acc < nd ? 1.0f : 0.0f;
    if (acc == nd) {
        st->k = st->k + 2 < st->kmax ? st->k + 2 : st->kmax;
        st->misses = 0;
    } else if (acc > 0) {
        st->k = acc + 1;
        st->misses = 0;
    } else if ((st->k /= 2) == 0) {
        st->misses++;
        st->wait = 4 << (st->misses < 4 ? st->misses : 4);
    }
}

float ifd_spec_rate(const ifd_spec_state_t *st, float *p1)
{
    const float n = st->hits + st->fails + IFD_SPEC_PRIOR_WEIGHT;
    const float p = (st->hits + IFD_SPEC_PRIOR_WEIGHT * IFD_SPEC_PRIOR) / n;
    if (p1) {
        const float u = p + sqrtf(p * (1.0f - p) / n);
        *p1 = u < 1.0f ? u : 1.0f;
    }
    return p;
}

int32_t ifd_spec_budget(ifd_spec_cand_t *c, int n, int32_t base_rows, double knee,
                        int32_t max_rows)
{
    int32_t rows = 0;
    for (int i = 0; i < n; i++) {
        const int32_t want = knee > 0 ? 0 : c[i].n > 0 ? c[i].n : 0;
        c[i].keep = want < max_rows - rows ? want : max_rows - rows > 0 ? max_rows - rows : 0;
        rows += c[i].keep;
    }
    if (knee <= 0)
        return rows;
    /* the yield so far, tokens / cost: every row of the step is one token */
    double tokens = base_rows > 0 ? base_rows : 0, cost = knee + tokens;
    for (;;) {
        int best = -1;
        double g_best = 0;
        for (int i = 0; i < n; i++) {
            if (c[i].keep >= c[i].n)
                continue;
            const double p1 = c[i].p1 < 0 ? 0 : c[i].p1 > 1 ? 1 : c[i].p1;
            const double p = c[i].p < 0 ? 0 : c[i].p > 1 ? 1 : c[i].p;
            const double g = p1 * pow(p, c[i].keep); /* the next token stands with all before it */
            if (g > g_best) {
                g_best = g;
                best = i;
            }
        }
        if (best < 0 || g_best * cost <= tokens || rows >= max_rows)
            return rows; /* no gain left above the yield: adding it would lower it */
        c[best].keep++;
        tokens += g_best;
        cost += 1;
        rows++;
    }
}
