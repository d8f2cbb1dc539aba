/*
 * threadpool.h — a fixed pool of worker threads for data-parallel kernels.
 *
 * ifd_threadpool_run(tp, fn, ctx, n_tasks) calls fn(ctx, i, n_tasks) for
 * every i in [0, n_tasks) across the pool's threads plus the calling thread
 * and returns when all calls have returned. One run at a time per pool
 * (runs are serialized by the caller: the worker's engine thread).
 * The pool is created and destroyed by its owner (the backend).
 */
#ifndef IFD_THREADPOOL_H
#define IFD_THREADPOOL_H

typedef struct ifd_threadpool ifd_threadpool_t;

typedef void (*ifd_task_cb)(void *ctx, int task, int n_tasks);

/* n_threads total, including the caller (1 = no extra threads; 0 = the
 * number of online CPUs). 0 or IFD_ENOMEM / -errno. */
int ifd_threadpool_create(ifd_threadpool_t **out, int n_threads);
void ifd_threadpool_destroy(ifd_threadpool_t *tp);
int ifd_threadpool_size(const ifd_threadpool_t *tp); /* 1 for tp == NULL */

/* Runs fn for n_tasks tasks; tp == NULL runs them all on the caller. */
void ifd_threadpool_run(ifd_threadpool_t *tp, ifd_task_cb fn, void *ctx, int n_tasks);

#endif
