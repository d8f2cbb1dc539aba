/*
 * spec.c — see spec.h.
 */
#include "spec.h"

#include "error.h"

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
    const int32_t k = req->num_tokens ? req->num_tokens : eng->num_tokens ? eng->num_tokens : 4;
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
    return k > 0 ? ifd_ngram_propose(hist, n_hist, st->nmin, st->nmax, k, out) : 0;
}

void ifd_spec_adapt(ifd_spec_state_t *st, int32_t nd, int32_t acc)
{
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
