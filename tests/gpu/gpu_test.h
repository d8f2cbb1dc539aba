/*
 * gpu_test.h — the tiny harness of the kernel tests in tests/gpu: plain C
 * programs (no Check, so they build on the device machine, which has only
 * the CUDA toolkit and libc) that compare each CUDA kernel with its CPU
 * reference on fresh random data.
 *
 * A test program calls gt_begin() (which skips with "SKIPPED: no CUDA device
 * (<reason>)" and exit 77 when there is no usable device), runs its cases
 * with gt_case(), and returns gt_end(): it prints "N passed, M failed" and
 * gives 0 or 1. GT_EXPECT records a failure of the current case with a
 * message and carries on, so one run reports every problem.
 *
 * The same programs also build against the CPU emulator (tests/gpu/emu,
 * IFD_CUDA_EMU defined), where gt_small() is true and cases pick small shapes.
 *
 * Device memory helpers abort on failure (a test cannot go on without its
 * buffers). Single-threaded; the state is per process.
 */
#ifndef IFD_GPU_TEST_H
#define IFD_GPU_TEST_H

#include <stddef.h>
#include <stdint.h>

/* Checks for a device (skips the program without one); seeds the RNG from
 * $IFD_TEST_SEED or the time, and prints the seed for reproduction. */
void gt_begin(const char *program);

/* Runs one case and counts it as passed or failed. */
void gt_case(const char *name, void (*fn)(void));

/* Prints "N passed, M failed"; returns the exit status (0 = all passed). */
int gt_end(void);

/* True when running on the CPU emulator (small shapes only). */
int gt_small(void);

void gt_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define GT_EXPECT(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond))                                                                               \
            gt_fail(__FILE__, __LINE__, __VA_ARGS__);                                              \
    } while (0)

/* Prints an indented detail line (e.g. a measured error) when
 * $IFD_TEST_VERBOSE is set. */
void gt_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Failures recorded in the current case so far. */
int gt_case_failures(void);

/* ---- random data (splitmix64; deterministic per seed) ------------------- */

uint64_t gt_rand_u64(void);
/* Uniform integer in [0, n). */
int64_t gt_rand_int(int64_t n);
/* Uniform float in [lo, hi). */
float gt_rand_uniform(float lo, float hi);
/* Standard normal. */
float gt_randn(void);
/* Fills x[n] with N(0, sigma^2). */
void gt_fill_randn(float *x, int64_t n, float sigma);
/* A random permutation of 0..n-1 into p. */
void gt_permutation(int32_t *p, int n);

/* ---- comparisons ------------------------------------------------------------ */

/* ||a - b||_2 / max(||b||_2, tiny); +inf when a has a NaN or inf where b is
 * finite (so a poisoned value can never pass). */
double gt_rel_l2(const float *a, const float *b, int64_t n);

/* Number of elements that differ in bits. */
int64_t gt_count_diff_u16(const uint16_t *a, const uint16_t *b, int64_t n);

/* ---- device memory (aborts on failure) --------------------------------------- */

void *gt_dalloc(size_t bytes);
/* gt_dalloc + fill with 0xff bytes (NaN for f32/f16/bf16). */
void *gt_dalloc_poison(size_t bytes);
void *gt_dupload(const void *host, size_t bytes);
void gt_upload(void *dev, const void *host, size_t bytes);
void gt_download(void *host, const void *dev, size_t bytes);
void gt_dfree(void *dev);
void gt_sync(void);

/* Host helpers: malloc or abort; and a host array of n f32 NaNs. */
void *gt_xmalloc(size_t bytes);
void gt_fill_nan(float *x, int64_t n);

#endif
