/*
 * gpu_test.c — the tests/gpu harness (gpu_test.h): case bookkeeping, the
 * device check, random data, comparisons and device memory helpers.
 */
#include "gpu_test.h"

#include "cuda/cuda_device.h"
#include "rng.h"

#include <cuda_runtime_api.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static struct {
    const char *program;
    int passed, failed;
    int case_failures;
    const char *case_name;
    uint64_t rng;
} gt;

void gt_begin(const char *program)
{
    gt.program = program;
    char err[256] = "";
    int n = 0;
    if (ifd_cuda_device_count(&n, err, sizeof err) != 0) {
        fflush(stdout);
        fprintf(stderr, "SKIPPED: no CUDA device (%s)\n", err);
        exit(77);
    }
    char desc[256];
    if (ifd_cuda_device_describe(0, desc, sizeof desc) != 0)
        snprintf(desc, sizeof desc, "device 0");
    const char *s = getenv("IFD_TEST_SEED");
    uint64_t seed = s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL);
    gt.rng = seed;
    printf("%s: %s, IFD_TEST_SEED=%llu\n", program, desc, (unsigned long long)seed);
    fflush(stdout);
}

int gt_small(void)
{
#ifdef IFD_CUDA_EMU
    return 1;
#else
    return 0;
#endif
}

void gt_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("  FAIL %s (%s:%d): ", gt.case_name ? gt.case_name : "?", file, line);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    gt.case_failures++;
}

void gt_note(const char *fmt, ...)
{
    if (!getenv("IFD_TEST_VERBOSE"))
        return;
    va_list ap;
    va_start(ap, fmt);
    printf("    ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

int gt_case_failures(void)
{
    return gt.case_failures;
}

void gt_case(const char *name, void (*fn)(void))
{
    gt.case_name = name;
    gt.case_failures = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    fn();
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess)
        gt_fail(__FILE__, __LINE__, "CUDA error after the case: %s", cudaGetErrorString(e));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    if (gt.case_failures) {
        gt.failed++;
        printf("FAIL %s (%.0f ms)\n", name, ms);
    } else {
        gt.passed++;
        printf("ok   %s (%.0f ms)\n", name, ms);
    }
    fflush(stdout);
    gt.case_name = NULL;
}

int gt_end(void)
{
    printf("%s: %d passed, %d failed\n", gt.program, gt.passed, gt.failed);
    fflush(stdout);
    return gt.failed ? 1 : 0;
}

/* ---- random ------------------------------------------------------------------ */

uint64_t gt_rand_u64(void)
{
    return ifd_rng_mix64(gt.rng += 0x9e3779b97f4a7c15ull); /* SplitMix64 */
}

int64_t gt_rand_int(int64_t n)
{
    return n <= 0 ? 0 : (int64_t)(gt_rand_u64() % (uint64_t)n);
}

float gt_rand_uniform(float lo, float hi)
{
    double u = (double)(gt_rand_u64() >> 11) * (1.0 / 9007199254740992.0);
    return (float)(lo + (hi - lo) * u);
}

float gt_randn(void)
{
    double u1 = ((double)(gt_rand_u64() >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    double u2 = (double)(gt_rand_u64() >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

void gt_fill_randn(float *x, int64_t n, float sigma)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = sigma * gt_randn();
}

void gt_permutation(int32_t *p, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)gt_rand_int(i + 1);
        int32_t t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
}

/* ---- comparisons --------------------------------------------------------------- */

double gt_rel_l2(const float *a, const float *b, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) && isfinite(b[i]))
            return INFINITY;
        if (!isfinite(b[i]))
            continue;
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    if (den < 1e-30)
        return sqrt(num);
    return sqrt(num / den);
}

int64_t gt_count_diff_u16(const uint16_t *a, const uint16_t *b, int64_t n)
{
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++)
        c += a[i] != b[i];
    return c;
}

/* ---- memory ------------------------------------------------------------------------ */

static void gt_cuda_or_die(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "%s: %s: %s\n", gt.program, what, cudaGetErrorString(e));
        exit(1);
    }
}

void *gt_xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "%s: out of host memory (%zu bytes)\n", gt.program, bytes);
        exit(1);
    }
    return p;
}

void gt_fill_nan(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = NAN;
}

void *gt_dalloc(size_t bytes)
{
    void *p = NULL;
    gt_cuda_or_die(cudaMalloc(&p, bytes ? bytes : 16), "cudaMalloc");
    return p;
}

void *gt_dalloc_poison(size_t bytes)
{
    void *p = gt_dalloc(bytes);
    gt_cuda_or_die(cudaMemset(p, 0xff, bytes), "cudaMemset");
    return p;
}

void *gt_dupload(const void *host, size_t bytes)
{
    void *p = gt_dalloc(bytes);
    gt_upload(p, host, bytes);
    return p;
}

void gt_upload(void *dev, const void *host, size_t bytes)
{
    gt_cuda_or_die(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
}

void gt_download(void *host, const void *dev, size_t bytes)
{
    gt_cuda_or_die(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
}

void gt_dfree(void *dev)
{
    if (dev)
        gt_cuda_or_die(cudaFree(dev), "cudaFree");
}

void gt_sync(void)
{
    gt_cuda_or_die(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}
