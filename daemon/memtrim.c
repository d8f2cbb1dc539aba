/*
 * memtrim.c — see memtrim.h.
 *
 * One repeating timer serves both triggers: ifd_memtrim_note restarts it
 * with a short first timeout and sets `wanted`; otherwise each period it
 * compares the private resident size with what the last trim left. Only
 * one trim runs at a time (`busy`); a trim asked for meanwhile, or within
 * IFD_MEMTRIM_GAP_MS of the last, is run when that gap is over.
 */
#include "memtrim.h"

#include "log.h"

#include <stdio.h>
#include <unistd.h>

#ifdef __GLIBC__
#include <malloc.h>
#define IFD__CAN_TRIM 1
#else
#define IFD__CAN_TRIM 0
#endif

#define IFD__MS (1000ull * 1000ull)

uint64_t ifd_memtrim_private_rss(void)
{
    FILE *f = fopen("/proc/self/statm", "re");
    if (!f)
        return 0;
    unsigned long long size, resident, shared;
    int n = fscanf(f, "%llu %llu %llu", &size, &resident, &shared);
    fclose(f);
    if (n != 3 || resident < shared)
        return 0;
    /* statm's "shared" is file-backed and shared-memory pages: the rest is
     * the private (anonymous) memory that the heaps hold */
    return (uint64_t)(resident - shared) * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* Pool thread: writes only t->job, which the loop reads after the job. */
static void ifd__trim_cb(uv_work_t *w)
{
    ifd_memtrim_t *t = w->data;
    t->job.before = ifd_memtrim_private_rss();
    uint64_t t0 = uv_hrtime();
#if IFD__CAN_TRIM
    malloc_trim(0);
#endif
    t->job.took_ns = uv_hrtime() - t0;
    t->job.after = ifd_memtrim_private_rss();
}

static void ifd__timer_cb(uv_timer_t *h);

static void ifd__after_trim_cb(uv_work_t *w, int status)
{
    ifd_memtrim_t *t = w->data;
    (void)status;
    t->busy = false;
    t->last_ns = uv_hrtime();
    const struct ifd_memtrim_job *r = &t->job;
    t->base_anon = r->after;
    if (r->idle)
        t->idle_base = r->after;
    t->n_trims++;
    uint64_t freed = r->before > r->after ? r->before - r->after : 0;
    t->freed += freed;
    ifd_log(freed >= (16u << 20) ? IFD_LOG_INFO : IFD_LOG_DEBUG,
            "malloc_trim: private memory %.1f -> %.1f MiB (%.1f ms)", (double)r->before / 1048576.0,
            (double)r->after / 1048576.0, (double)r->took_ns / 1e6);
    if (t->wanted && t->init) /* asked again while this one ran */
        uv_timer_start(&t->timer, ifd__timer_cb, IFD_MEMTRIM_GAP_MS, IFD_MEMTRIM_CHECK_MS);
}

static void ifd__timer_cb(uv_timer_t *h)
{
    ifd_memtrim_t *t = h->data;
    if (t->busy)
        return; /* its end re-arms the timer when wanted */
    if (!t->wanted) {
        uint64_t anon = ifd_memtrim_private_rss();
        if (!anon || anon <= t->base_anon + IFD_MEMTRIM_GROWTH)
            return;
    }
    uint64_t now = uv_hrtime();
    uint64_t gap = (uint64_t)IFD_MEMTRIM_GAP_MS * IFD__MS;
    if (t->last_ns && now - t->last_ns < gap) {
        t->wanted = true;
        uv_timer_start(&t->timer, ifd__timer_cb, (t->last_ns + gap - now) / IFD__MS + 1,
                       IFD_MEMTRIM_CHECK_MS);
        return;
    }
    t->wanted = false;
    t->job.idle = t->idle_wanted;
    t->idle_wanted = false;
    t->busy = true;
    t->work.data = t;
    if (uv_queue_work(t->loop, &t->work, ifd__trim_cb, ifd__after_trim_cb) != 0)
        t->busy = false;
}

void ifd_memtrim_setup(void)
{
#if IFD__CAN_TRIM
    mallopt(M_ARENA_MAX, 1);
#endif
}

int ifd_memtrim_init(ifd_memtrim_t *t, uv_loop_t *loop)
{
    *t = (ifd_memtrim_t){.loop = loop};
    if (!IFD__CAN_TRIM)
        return 0;
    int rc = uv_timer_init(loop, &t->timer);
    if (rc)
        return rc;
    t->timer.data = t;
    t->init = true;
    t->base_anon = t->idle_base = ifd_memtrim_private_rss();
    uv_timer_start(&t->timer, ifd__timer_cb, IFD_MEMTRIM_CHECK_MS, IFD_MEMTRIM_CHECK_MS);
    uv_unref((uv_handle_t *)&t->timer); /* it never keeps the loop alive */
    return 0;
}

void ifd_memtrim_note(ifd_memtrim_t *t, size_t bytes)
{
    if (!t || !t->init || bytes < IFD_MEMTRIM_BIG)
        return;
    t->wanted = true;
    if (!t->busy)
        uv_timer_start(&t->timer, ifd__timer_cb, IFD_MEMTRIM_DELAY_MS, IFD_MEMTRIM_CHECK_MS);
}

void ifd_memtrim_idle(ifd_memtrim_t *t)
{
    if (!t || !t->init || t->busy || t->wanted)
        return;
    uint64_t anon = ifd_memtrim_private_rss();
    if (!anon || anon <= t->idle_base + IFD_MEMTRIM_IDLE_SLACK)
        return;
    t->wanted = t->idle_wanted = true;
    uv_timer_start(&t->timer, ifd__timer_cb, IFD_MEMTRIM_DELAY_MS, IFD_MEMTRIM_CHECK_MS);
}

void ifd_memtrim_close(ifd_memtrim_t *t)
{
    if (!t->init)
        return;
    t->init = false;
    uv_close((uv_handle_t *)&t->timer, NULL);
}
