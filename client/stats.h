/*
 * stats.h — summary statistics of a sample for the benchmarks: mean,
 * standard deviation, min, max and percentiles, the percentiles by linear
 * interpolation between closest ranks (NumPy's default, which vLLM's
 * benchmark uses), so figures are comparable with `vllm bench serve`.
 *
 * Pure functions; the input is not modified. Thread-safe.
 */
#ifndef IFD_CLIENT_STATS_H
#define IFD_CLIENT_STATS_H

#include <stddef.h>

typedef struct {
    size_t n;
    double mean, std; /* population standard deviation (NumPy's np.std) */
    double min, max;
    double p50, p90, p99;
} ifd_cli_stats_t;

/* Summarises v[0..n). n == 0 gives all zeros. 0, or IFD_ENOMEM (a sorted
 * copy is made). */
int ifd_cli_stats_summary(const double *v, size_t n, ifd_cli_stats_t *out);

/* The q-th percentile (0..100) of sorted[0..n), n >= 1. */
double ifd_cli_stats_percentile(const double *sorted, size_t n, double q);

#endif
