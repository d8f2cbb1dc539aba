/*
 * ngram.c — see ngram.h. A plain backward scan: histories are a few
 * thousand tokens and max_n is small, so the scan costs microseconds beside
 * a forward step that reads every weight.
 */
#include "ngram.h"

#include <string.h>

/* The start of the most recent earlier occurrence of hist's last n tokens
 * that has a token after it, or -1. */
static int32_t ifd__ngram_find(const int32_t *hist, int32_t n_hist, int32_t n)
{
    const int32_t *suffix = hist + n_hist - n;
    for (int32_t j = n_hist - n - 1; j >= 0; j--)
        if (hist[j + n - 1] == suffix[n - 1] &&
            memcmp(hist + j, suffix, (size_t)n * sizeof *hist) == 0)
            return j;
    return -1;
}

int32_t ifd_ngram_propose(const int32_t *hist, int32_t n_hist, int32_t min_n, int32_t max_n,
                          int32_t k, int32_t *out)
{
    if (min_n < 1)
        min_n = 1;
    if (max_n > IFD_NGRAM_MAX_N)
        max_n = IFD_NGRAM_MAX_N;
    if (k <= 0 || !hist || n_hist < 2)
        return 0;
    for (int32_t n = max_n < n_hist - 1 ? max_n : n_hist - 1; n >= min_n; n--) {
        const int32_t j = ifd__ngram_find(hist, n_hist, n);
        if (j < 0)
            continue;
        const int32_t from = j + n; /* < n_hist: the occurrence ends before the suffix does */
        const int32_t m = n_hist - from < k ? n_hist - from : k;
        memcpy(out, hist + from, (size_t)m * sizeof *out);
        return m;
    }
    return 0;
}
