/*
 * stats.c — summary statistics (see stats.h).
 */
#include "stats.h"

#include "error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y ? 1 : 0;
}

double ifd_cli_stats_percentile(const double *sorted, size_t n, double q)
{
    if (n == 1)
        return sorted[0];
    double pos = q / 100.0 * (double)(n - 1);
    size_t lo = (size_t)floor(pos);
    if (lo >= n - 1)
        return sorted[n - 1];
    double frac = pos - (double)lo;
    return sorted[lo] + (sorted[lo + 1] - sorted[lo]) * frac;
}

int ifd_cli_stats_summary(const double *v, size_t n, ifd_cli_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    if (n == 0)
        return 0;
    double *s = malloc(n * sizeof(*s));
    if (!s)
        return IFD_ENOMEM;
    memcpy(s, v, n * sizeof(*s));
    qsort(s, n, sizeof(*s), cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += s[i];
    double mean = sum / (double)n, var = 0;
    for (size_t i = 0; i < n; i++)
        var += (s[i] - mean) * (s[i] - mean);
    out->n = n;
    out->mean = mean;
    out->std = sqrt(var / (double)n);
    out->min = s[0];
    out->max = s[n - 1];
    out->p50 = ifd_cli_stats_percentile(s, n, 50);
    out->p90 = ifd_cli_stats_percentile(s, n, 90);
    out->p99 = ifd_cli_stats_percentile(s, n, 99);
    free(s);
    return 0;
}
