/*
 * test_threadpool.c — the kernels' thread pool: every task index runs exactly
 * once per run with the run's own ctx, for pools of 1..5 threads (more than
 * this machine's cores too), task counts 0..1000, tens of thousands of
 * back-to-back runs (the generation handshake), runs after the workers went
 * to sleep, nested runs (executed inline), and the NULL pool.
 */
#include "testutil.h"

#include "cpu/threadpool.h"
#include "error.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

typedef struct {
    _Atomic int *hits; /* [n_tasks] */
    _Atomic int calls;
    int expect_n;
    _Atomic int bad_n;
} count_ctx_t;

static void count_cb(void *arg, int task, int n_tasks)
{
    count_ctx_t *c = arg;
    if (n_tasks != c->expect_n || task < 0 || task >= n_tasks)
        atomic_fetch_add(&c->bad_n, 1);
    else
        atomic_fetch_add(&c->hits[task], 1);
    atomic_fetch_add(&c->calls, 1);
}

static void run_and_check(ifd_threadpool_t *tp, int n_tasks)
{
    count_ctx_t c = {.expect_n = n_tasks};
    c.hits = calloc(n_tasks > 0 ? (size_t)n_tasks : 1, sizeof *c.hits);
    ck_assert_ptr_nonnull(c.hits);
    ifd_threadpool_run(tp, count_cb, &c, n_tasks);
    ck_assert_int_eq(atomic_load(&c.bad_n), 0);
    ck_assert_int_eq(atomic_load(&c.calls), n_tasks > 0 ? n_tasks : 0);
    for (int i = 0; i < n_tasks; i++)
        IFD_CHECK(atomic_load(&c.hits[i]) == 1, "task %d of %d ran %d times", i, n_tasks,
                  atomic_load(&c.hits[i]));
    free(c.hits);
}

START_TEST(test_sizes)
{
    static const int threads[] = {1, 2, 3, 5};
    static const int tasks[] = {0, 1, 2, 3, 7, 64, 1000};
    for (size_t a = 0; a < sizeof threads / sizeof threads[0]; a++) {
        ifd_threadpool_t *tp = NULL;
        ck_assert_int_eq(ifd_threadpool_create(&tp, threads[a]), 0);
        ck_assert_int_eq(ifd_threadpool_size(tp), threads[a]);
        for (size_t b = 0; b < sizeof tasks / sizeof tasks[0]; b++)
            run_and_check(tp, tasks[b]);
        ifd_threadpool_destroy(tp);
    }
    ck_assert_int_eq(ifd_threadpool_size(NULL), 1);
    run_and_check(NULL, 5);
}
END_TEST

START_TEST(test_default_and_errors)
{
    ifd_threadpool_t *tp = NULL;
    ck_assert_int_eq(ifd_threadpool_create(&tp, 0), 0);
    ck_assert_int_ge(ifd_threadpool_size(tp), 1);
    run_and_check(tp, 33);
    ifd_threadpool_destroy(tp);
    ck_assert_int_eq(ifd_threadpool_create(&tp, -1), IFD_EINVAL);
    ck_assert_ptr_null(tp);
    ifd_threadpool_destroy(NULL);
}
END_TEST

/* Sums task indices: the ctx must be this run's, across many quick runs. */
typedef struct {
    _Atomic long sum;
} sum_ctx_t;

static void sum_cb(void *arg, int task, int n_tasks)
{
    (void)n_tasks;
    sum_ctx_t *c = arg;
    atomic_fetch_add(&c->sum, task + 1);
}

/* Back-to-back runs whose task counts and callbacks change every time, with
 * more threads than cores so workers get preempted mid-handshake: a worker
 * that mixed up two runs would run a task twice, run one with the wrong ctx or
 * count, or leave the caller waiting forever. */
START_TEST(test_many_runs)
{
    static const int threads[] = {3, 6};
    for (size_t a = 0; a < sizeof threads / sizeof threads[0]; a++) {
        ifd_threadpool_t *tp = NULL;
        ck_assert_int_eq(ifd_threadpool_create(&tp, threads[a]), 0);
        _Atomic int hits[16];
        for (int r = 0; r < 20000; r++) {
            const int n = 2 + (r * 7) % 13;
            if (r % 2) {
                sum_ctx_t c = {0};
                ifd_threadpool_run(tp, sum_cb, &c, n);
                IFD_TASSERT_CMP(atomic_load(&c.sum), ==, (long)n * (n + 1) / 2);
            } else {
                count_ctx_t c = {.hits = hits, .expect_n = n};
                for (int i = 0; i < 16; i++)
                    atomic_store(&hits[i], 0);
                ifd_threadpool_run(tp, count_cb, &c, n);
                IFD_TASSERT_CMP(atomic_load(&c.bad_n), ==, 0);
                for (int i = 0; i < 16; i++)
                    IFD_TASSERT_CMP(atomic_load(&hits[i]), ==, i < n);
            }
        }
        ifd_threadpool_destroy(tp);
    }
}
END_TEST

START_TEST(test_after_sleep)
{
    ifd_threadpool_t *tp = NULL;
    ck_assert_int_eq(ifd_threadpool_create(&tp, 3), 0);
    for (int r = 0; r < 4; r++) {
        /* Long enough for the workers to stop spinning and sleep on the futex. */
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
        run_and_check(tp, 16);
    }
    ifd_threadpool_destroy(tp);
}
END_TEST

typedef struct {
    ifd_threadpool_t *tp;
    _Atomic int inner;
} nest_ctx_t;

static void inner_cb(void *arg, int task, int n_tasks)
{
    (void)task, (void)n_tasks;
    atomic_fetch_add(&((nest_ctx_t *)arg)->inner, 1);
}

static void outer_cb(void *arg, int task, int n_tasks)
{
    (void)task, (void)n_tasks;
    nest_ctx_t *c = arg;
    ifd_threadpool_run(c->tp, inner_cb, c, 5);
}

START_TEST(test_nested)
{
    nest_ctx_t c = {0};
    ck_assert_int_eq(ifd_threadpool_create(&c.tp, 2), 0);
    ifd_threadpool_run(c.tp, outer_cb, &c, 4);
    ck_assert_int_eq(atomic_load(&c.inner), 20);
    run_and_check(c.tp, 10); /* the pool is usable afterwards */
    ifd_threadpool_destroy(c.tp);
}
END_TEST

static Suite *threadpool_suite(void)
{
    Suite *s = suite_create("threadpool");
    ifd_test_case(s, "core", 60,
                  IFD_TESTS(test_sizes, test_default_and_errors, test_many_runs, test_after_sleep,
                            test_nested));
    return s;
}

int main(void)
{
    return ifd_test_run(threadpool_suite());
}
