/*
 * threadpool.c — a persistent pool of worker threads for the CPU kernels.
 *
 * One parallel job ("run") at a time. A run publishes (fn, ctx, n_tasks) and
 * a new generation; workers and the caller then claim task indices from one
 * 64-bit word holding (generation << 32 | next index) with a compare-and-swap,
 * so a worker that wakes late, after its generation has ended, can never claim
 * a task of a later run. The caller returns once `done` (tasks finished) equals
 * n_tasks; it never waits for a slow or descheduled worker that claimed
 * nothing, which matters on an oversubscribed machine.
 *
 * Waiting: threads spin briefly (kernels of one forward step come back to
 * back, microseconds apart), then sleep on a futex. Wake-ups are issued only
 * when someone sleeps (Dekker-style: each side stores its flag, then reads the
 * other's, all seq_cst), so a run on a busy pool costs a few atomics.
 *
 * The job (fn, ctx, n_tasks) of generation g lives in slot g % 2, written
 * with release before g is published and read with acquire. A worker that
 * read generation g's slot and then wins the claim CAS for generation g is
 * guaranteed to have read g's values: the slot is next rewritten (for g + 2)
 * only after the counter has moved to g + 1, and an acquire read of that
 * rewrite would make the CAS see the newer counter and fail. (A single slot
 * is not enough: run g + 1's n_tasks is written while the counter still says
 * "g, all claimed", and a late worker comparing the old index against the new
 * count would claim a task that does not exist.)
 * `done` is reset before the new generation is published; it reaches n_tasks
 * only after every claimed task of the run has returned.
 * A run started from inside a task of the same pool (nesting) executes its
 * tasks on the calling thread instead of deadlocking.
 */
#include "threadpool.h"

#include "error.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define IFD__CPU_RELAX() _mm_pause()
#else
#define IFD__CPU_RELAX() ((void)0)
#endif

/* Spin iterations (each one pause, ~40 cycles or more) before sleeping. */
enum { IFD__SPIN_WORKER = 1 << 14, IFD__SPIN_CALLER = 1 << 14 };

struct ifd_threadpool {
    int n_threads;      /* including the caller */
    pthread_t *threads; /* [n_threads - 1] */

    /* The job of generation g is jobs[g & 1] (see the file comment). */
    struct {
        _Atomic(ifd_task_cb) fn;
        _Atomic(void *) ctx;
        _Atomic int n_tasks;
    } jobs[2];

    _Atomic uint64_t next;   /* generation << 32 | next task index */
    _Atomic uint32_t gen;    /* futex word: the published generation */
    _Atomic uint32_t done;   /* futex word: tasks finished in this run */
    _Atomic int n_sleepers;  /* workers asleep (or about to be) on gen */
    _Atomic int caller_wait; /* 1 while the caller sleeps (or is about to) on done */
    _Atomic bool running;    /* a run is in progress (nesting detection) */
    _Atomic bool stop;
};

static long ifd__futex(_Atomic uint32_t *addr, int op, uint32_t val)
{
    return syscall(SYS_futex, (uint32_t *)addr, op, val, NULL, NULL, 0);
}

/* Claims and runs tasks of generation g until none is left; returns how
 * many it ran and sets *n_out to the run's task count. */
static uint32_t ifd__work(ifd_threadpool_t *tp, uint32_t g, int *n_out)
{
    ifd_task_cb fn = atomic_load_explicit(&tp->jobs[g & 1].fn, memory_order_acquire);
    void *ctx = atomic_load_explicit(&tp->jobs[g & 1].ctx, memory_order_acquire);
    int n = atomic_load_explicit(&tp->jobs[g & 1].n_tasks, memory_order_acquire);
    *n_out = n;
    uint32_t ran = 0;
    uint64_t cur = atomic_load_explicit(&tp->next, memory_order_acquire);
    for (;;) {
        if ((uint32_t)(cur >> 32) != g || (int)(uint32_t)cur >= n)
            break;
        if (!atomic_compare_exchange_weak_explicit(&tp->next, &cur, cur + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        fn(ctx, (int)(uint32_t)cur, n);
        ran++;
        cur = atomic_load_explicit(&tp->next, memory_order_acquire);
    }
    return ran;
}

/* Adds a worker's finished tasks to `done`; n is the run's task count as
 * read by the claims (valid, since ran > 0 means the claims succeeded). */
static void ifd__finish(ifd_threadpool_t *tp, uint32_t ran, int n)
{
    if (ran == 0)
        return;
    uint32_t now = atomic_fetch_add(&tp->done, ran) + ran;
    if ((int)now == n && atomic_load(&tp->caller_wait))
        ifd__futex(&tp->done, FUTEX_WAKE_PRIVATE, 1);
}

static void *ifd__worker_main(void *arg)
{
    ifd_threadpool_t *tp = arg;
    /* Generation 0 is the pool's initial state. Not the current value of gen:
     * a thread scheduled late must still notice runs and the stop that
     * happened before it first looked. */
    uint32_t seen = 0;
    for (;;) {
        uint32_t g = atomic_load_explicit(&tp->gen, memory_order_acquire);
        for (int i = 0; g == seen && i < IFD__SPIN_WORKER; i++) {
            IFD__CPU_RELAX();
            g = atomic_load_explicit(&tp->gen, memory_order_acquire);
        }
        while (g == seen) {
            atomic_fetch_add(&tp->n_sleepers, 1);
            g = atomic_load(&tp->gen);
            if (g == seen) {
                ifd__futex(&tp->gen, FUTEX_WAIT_PRIVATE, seen);
                g = atomic_load(&tp->gen);
            }
            atomic_fetch_sub(&tp->n_sleepers, 1);
        }
        seen = g;
        if (atomic_load(&tp->stop))
            return NULL;
        int n;
        uint32_t ran = ifd__work(tp, g, &n);
        ifd__finish(tp, ran, n);
    }
}

int ifd_threadpool_create(ifd_threadpool_t **out, int n_threads)
{
    *out = NULL;
    if (n_threads < 0)
        return IFD_EINVAL;
    if (n_threads == 0) {
        cpu_set_t set;
        if (sched_getaffinity(0, sizeof set, &set) == 0)
            n_threads = CPU_COUNT(&set);
        if (n_threads <= 0)
            n_threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
        if (n_threads <= 0)
            n_threads = 1;
    }
    ifd_threadpool_t *tp = calloc(1, sizeof *tp);
    if (!tp)
        return IFD_ENOMEM;
    tp->n_threads = n_threads;
    if (n_threads > 1) {
        tp->threads = calloc((size_t)n_threads - 1, sizeof *tp->threads);
        if (!tp->threads) {
            free(tp);
            return IFD_ENOMEM;
        }
    }
    for (int i = 0; i < n_threads - 1; i++) {
        int rc = pthread_create(&tp->threads[i], NULL, ifd__worker_main, tp);
        if (rc != 0) {
            tp->n_threads = i + 1;
            ifd_threadpool_destroy(tp);
            return -rc;
        }
    }
    *out = tp;
    return 0;
}

void ifd_threadpool_destroy(ifd_threadpool_t *tp)
{
    if (!tp)
        return;
    atomic_store(&tp->stop, true);
    atomic_fetch_add(&tp->gen, 1);
    ifd__futex(&tp->gen, FUTEX_WAKE_PRIVATE, INT_MAX);
    for (int i = 0; i < tp->n_threads - 1; i++)
        pthread_join(tp->threads[i], NULL);
    free(tp->threads);
    free(tp);
}

int ifd_threadpool_size(const ifd_threadpool_t *tp)
{
    return tp ? tp->n_threads : 1;
}

void ifd_threadpool_run(ifd_threadpool_t *tp, ifd_task_cb fn, void *ctx, int n_tasks)
{
    if (n_tasks <= 0)
        return;
    if (!tp || tp->n_threads == 1 || n_tasks == 1 || atomic_exchange(&tp->running, true)) {
        /* No pool, nothing to share, or nested inside one of our own tasks. */
        for (int i = 0; i < n_tasks; i++)
            fn(ctx, i, n_tasks);
        return;
    }
    const uint32_t g = atomic_load_explicit(&tp->gen, memory_order_relaxed) + 1;
    atomic_store_explicit(&tp->jobs[g & 1].fn, fn, memory_order_release);
    atomic_store_explicit(&tp->jobs[g & 1].ctx, ctx, memory_order_release);
    atomic_store_explicit(&tp->jobs[g & 1].n_tasks, n_tasks, memory_order_release);
    atomic_store_explicit(&tp->done, 0, memory_order_relaxed);
    atomic_store_explicit(&tp->next, (uint64_t)g << 32, memory_order_release);
    atomic_store(&tp->gen, g);
    if (atomic_load(&tp->n_sleepers) > 0)
        ifd__futex(&tp->gen, FUTEX_WAKE_PRIVATE, INT_MAX);

    int n_seen;
    uint32_t ran = ifd__work(tp, g, &n_seen);
    if (ran)
        atomic_fetch_add(&tp->done, ran);

    uint32_t d = atomic_load_explicit(&tp->done, memory_order_acquire);
    for (int i = 0; (int)d != n_tasks && i < IFD__SPIN_CALLER; i++) {
        IFD__CPU_RELAX();
        d = atomic_load_explicit(&tp->done, memory_order_acquire);
    }
    while ((int)d != n_tasks) {
        atomic_store(&tp->caller_wait, 1);
        d = atomic_load(&tp->done);
        if ((int)d != n_tasks)
            ifd__futex(&tp->done, FUTEX_WAIT_PRIVATE, d);
        atomic_store(&tp->caller_wait, 0);
        d = atomic_load(&tp->done);
    }
    atomic_store_explicit(&tp->running, false, memory_order_release);
}
