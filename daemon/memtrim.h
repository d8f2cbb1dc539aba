/*
 * memtrim.h — gives the router's freed heap memory back to the system.
 *
 * glibc keeps what is freed in its heap and returns only a free top past
 * its trim threshold (which rises to 64 MiB once large blocks were freed),
 * so after one large request the router's resident memory could stay at
 * its peak (1.9 GB after a 175 MB response, docs/reliability.md).
 * malloc_trim(0) gives back every whole free page of the heap.
 *
 * When: soon (IFD_MEMTRIM_DELAY_MS) after a request that held more than
 * IFD_MEMTRIM_BIG bytes ends; when the last request in flight ends and the
 * private resident size is IFD_MEMTRIM_IDLE_SLACK above what the last such
 * idle trim left (the end of a burst of many small requests: 256 streams
 * left 4.8 MiB behind); and, on a slow timer, when it has grown by
 * IFD_MEMTRIM_GROWTH since the last trim (a server never idle); never twice
 * within IFD_MEMTRIM_GAP_MS. malloc_trim walks
 * every heap and returns pages to the kernel (tens of ms after a large
 * request): it runs on the uv thread pool, off the loop, which only waits
 * if it allocates while the heap is locked. Off the hot path: no request
 * waits for it.
 *
 * The allocator is set up for it (ifd_memtrim_setup): one heap for every
 * thread (M_ARENA_MAX 1). glibc otherwise gives each thread that allocates
 * a heap of its own — each uv pool thread, which renders chat templates
 * and writes large responses — and malloc_trim cannot give back the free
 * top of those heaps (it trims only the main heap's), where a freed
 * response or template's memory lands: 3.9 MiB stayed per large response
 * and 8 MiB per pool thread after 1 MB chat requests. With one heap the
 * trim returns every free page. The pool threads allocate little next to
 * the loop (tcache takes most small requests without the lock), and large
 * buffers keep glibc's dynamic mmap threshold: reused from the heap while
 * large requests come, given back by the trim after them.
 *
 * Without glibc every call does nothing.
 *
 * Ownership: the caller embeds the struct (_init/_close, libuv style); the
 * timer is closed by ifd_memtrim_close and freed on the loop's next turn.
 * Threading: loop thread only (the trim itself runs on the pool).
 */
#ifndef IFD_DAEMON_MEMTRIM_H
#define IFD_DAEMON_MEMTRIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define IFD_MEMTRIM_BIG        (1u << 20) /* a request holding more: trim after it */
#define IFD_MEMTRIM_GROWTH     (4u << 20) /* private RSS growth that asks for a trim */
#define IFD_MEMTRIM_IDLE_SLACK (1u << 20) /* at idle: above the last idle trim's level */
#define IFD_MEMTRIM_DELAY_MS   200        /* after the request: its response written */
#define IFD_MEMTRIM_GAP_MS     1000       /* between two trims at least */
#define IFD_MEMTRIM_CHECK_MS   30000      /* the growth check's period */

typedef struct {
    uv_loop_t *loop;
    uv_timer_t timer; /* the delayed trim, and the growth check */
    uv_work_t work;
    bool init;
    bool busy;          /* a trim runs on the pool */
    bool wanted;        /* a trim is due when the timer fires */
    uint64_t last_ns;   /* uv_hrtime() when the last trim ended; 0 none yet */
    uint64_t base_anon; /* private resident bytes after the last trim */
    uint64_t idle_base; /* the same after the last trim asked at idle */
    bool idle_wanted;   /* the trim due was asked at idle */
    uint64_t n_trims;
    uint64_t freed; /* private resident bytes the trims gave back, in all */
    struct ifd_memtrim_job {
        uint64_t before, after, took_ns; /* written by the pool thread while busy */
        bool idle;                       /* asked at idle (set before the job) */
    } job;
} ifd_memtrim_t;

/* The process-wide allocator settings above. First thing in main, before
 * anything allocates (and before any thread starts). */
void ifd_memtrim_setup(void);

/* Starts the growth check. 0, or a uv error (the trimmer then stays off). */
int ifd_memtrim_init(ifd_memtrim_t *t, uv_loop_t *loop);

/* A request that held `bytes` (its arena, buffers and response) was
 * freed: a trim follows soon when that was large. t may be NULL. */
void ifd_memtrim_note(ifd_memtrim_t *t, size_t bytes);

/* The last request in flight ended: a trim follows soon when the private
 * resident size is above what the last idle trim left. t may be NULL. */
void ifd_memtrim_idle(ifd_memtrim_t *t);

/* Stops the timer (a trim already running ends on its own). */
void ifd_memtrim_close(ifd_memtrim_t *t);

/* This process's private (anonymous) resident bytes, from
 * /proc/self/statm; 0 when unknown. Any thread. */
uint64_t ifd_memtrim_private_rss(void);

#endif
