/*
 * supervisor.c — see supervisor.h.
 *
 * Per worker slot: an embedded uv_timer (start timeout, restart back-off,
 * kill grace) that lives as long as the supervisor, and per run of the
 * process a uv_process_t, a uv_pipe_t (the router's end of the socketpair)
 * and a uv_pipe_t reading the worker's stdout and stderr. A run ends when
 * the process has exited AND all three per-run handles are closed; only then
 * may the slot be respawned (libuv handles cannot be re-initialised while
 * closing).
 *
 * Worker output is relayed line by line to the daemon's own stderr (one
 * write per line), so it follows the daemon when SIGHUP reopens log_file
 * onto fd 2; a worker that inherited fd 2 would keep writing to the rotated
 * file. `lost` makes on_lost fire once
 * per run, whichever comes first: EOF, a framing error, a kill, the exit.
 * Pool references are reclaimed in the exit callback only: a process that
 * is still alive might still write into its blocks.
 */
#include "supervisor.h"

#include "error.h"
#include "fdpass.h"
#include "gpu.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define IFD__CRASH_RING 1024
#define IFD__LOG_LINE   4096 /* a longer worker line is relayed in pieces */

typedef struct {
    ifd_worker_info_t info;
    ifd_sup_t *sup;
    int idx;
    uv_process_t proc;
    uv_pipe_t pipe;
    uv_timer_t timer;
    uv_pipe_t logp;  /* the worker's stdout and stderr */
    bool log_active; /* initialised, not yet closed */
    size_t log_len;
    char log_line[IFD__LOG_LINE];
    bool proc_active; /* spawned, not yet closed */
    bool proc_exited;
    bool pipe_active; /* initialised, not yet closed */
    bool pipe_open;   /* readable and writable */
    bool lost;        /* on_lost called for this run */
    bool respawn_pending;
    ifd_wire_reader_t rd;
    uint64_t ping_seq;
    uint64_t ping_sent_ms;
    bool ping_out;
    int64_t cpu_ticks;     /* its CPU time when last seen moving (-1: unknown) */
    uint64_t cpu_moved_ms; /* when that was (or the ping was sent) */
    bool busy_logged;
    uint64_t run_start_ms;
    bool config_error; /* this run reported, before READY, what a restart cannot fix */
    int crashes_in_row;
    uint64_t crash_ms[IFD__CRASH_RING];
    uint64_t n_crash_ms;
    bool sized;                /* the POOL step: its POOL_SIZE is in */
    ifd_wire_pool_size_t size; /* that report (device points at size_device) */
    char size_device[128];
} ifd__worker_t;

struct ifd_sup {
    uv_loop_t *loop;
    ifd_sup_params_t p;
    char *binary, *model, *level, *weights;
    char *draft;           /* the draft model's path, or NULL */
    char *mmproj;          /* the mmproj GGUF's path, or NULL */
    char *backend, *shape; /* "cpu"/"cuda"/"cuda-f32"; random weights or NULL */
    char *kv_dir;          /* --kv-cache-dir, or NULL */
    char kv_disk[24];      /* --kv-cache-disk-bytes' text */
    char kv_host[24];      /* --kv-cache-host-bytes' text, or "" */
    char kv_pin[16];       /* --kv-cache-pin-slots' text, or "" */
    char image_cache[16];  /* --image-cache-mb's text, or "" */
    char vision_step[16];  /* --vision-step-ms' text, or "" */
    char max_logprobs[24]; /* --max-logprobs' text, or "" */
    char draft_step[16];   /* --draft-step-tokens' text, or "" */
    int *gpus;             /* [n] GPU ids, or NULL for CPU workers */
    char seed[24];         /* --weights-seed's text */
    ifd_sup_callbacks_t cb;
    ifd_metrics_t *metrics;
    ifd__worker_t *w;
    int n;
    uv_timer_t ping_timer;
    bool stopping;
    bool destroying;
    bool sizing;        /* the POOL step runs: no pool yet (ifd_sup_set_pool ends it) */
    bool sizing_failed; /* on_pool_failed was called */
    int n_sized;
    bool stopped_reported;
    int open_handles;
};

typedef struct {
    uv_write_t req;
    size_t len;
    char data[];
} ifd__wreq_t;

static void ifd__spawn(ifd__worker_t *w);
static void ifd__lose(ifd__worker_t *w, const char *why);
static void ifd__kill(ifd__worker_t *w, const char *why);

/* The POOL step failed for worker w: the one line for on_pool_failed, the
 * first failure only (a worker that sent ERROR then exits says why once). */
static void ifd__size_fail(ifd__worker_t *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void ifd__size_fail(ifd__worker_t *w, const char *fmt, ...)
{
    ifd_sup_t *s = w->sup;
    w->info.state = IFD_W_FAILED;
    if (s->sizing_failed)
        return;
    s->sizing_failed = true;
    char why[1024];
    int n = snprintf(why, sizeof why, "GPU %d: ", s->gpus ? s->gpus[w->idx] : w->idx);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why + n, sizeof why - (size_t)n, fmt, ap);
    va_end(ap);
    if (s->cb.on_pool_failed)
        s->cb.on_pool_failed(s->cb.ctx, w->idx, why);
}

const char *ifd_worker_state_name(ifd_worker_state_t s)
{
    switch (s) {
    case IFD_W_STARTING:
        return "starting";
    case IFD_W_SIZING:
        return "sizing";
    case IFD_W_READY:
        return "ready";
    case IFD_W_DOWN:
        return "restarting";
    case IFD_W_FAILED:
        return "failed";
    case IFD_W_STOPPING:
        return "stopping";
    case IFD_W_STOPPED:
        return "stopped";
    }
    return "?";
}

static uint64_t ifd__ms(const ifd_sup_t *s, double secs)
{
    (void)s;
    return secs <= 0 ? 0 : (uint64_t)(secs * 1000.0 + 0.5);
}

/* ---- handle bookkeeping ---------------------------------------------------------- */

static void ifd__maybe_free(ifd_sup_t *s)
{
    if (!s->destroying || s->open_handles > 0)
        return;
    for (int i = 0; i < s->n; i++)
        ifd_wire_reader_close(&s->w[i].rd);
    free(s->w);
    free(s->binary);
    free(s->model);
    free(s->draft);
    free(s->mmproj);
    free(s->level);
    free(s->weights);
    free(s->kv_dir);
    free(s->backend);
    free(s->shape);
    free(s->gpus);
    free(s);
}

static void ifd__check_stopped(ifd_sup_t *s)
{
    if (!s->stopping || s->stopped_reported)
        return;
    for (int i = 0; i < s->n; i++)
        if (s->w[i].proc_active || s->w[i].pipe_active || s->w[i].log_active)
            return;
    s->stopped_reported = true;
    if (s->cb.on_stopped)
        s->cb.on_stopped(s->cb.ctx);
}

static void ifd__handle_closed(uv_handle_t *h)
{
    ifd_sup_t *s = h->data;
    s->open_handles--;
    ifd__maybe_free(s);
}

/* One of a run's handles is closed: respawn once the last one is. */
static void ifd__run_handle_closed(ifd__worker_t *w)
{
    ifd_sup_t *s = w->sup;
    s->open_handles--;
    if (s->destroying) {
        ifd__maybe_free(s);
        return;
    }
    if (w->respawn_pending && !w->proc_active && !w->pipe_active && !w->log_active) {
        w->respawn_pending = false;
        ifd__spawn(w);
    }
    ifd__check_stopped(s);
}

static void ifd__pipe_closed(uv_handle_t *h)
{
    ifd__worker_t *w = h->data;
    w->pipe_active = false;
    ifd__run_handle_closed(w);
}

static void ifd__proc_closed(uv_handle_t *h)
{
    ifd__worker_t *w = h->data;
    w->proc_active = false;
    ifd__run_handle_closed(w);
}

static void ifd__log_closed(uv_handle_t *h)
{
    ifd__worker_t *w = h->data;
    w->log_active = false;
    ifd__run_handle_closed(w);
}

static void ifd__close_pipe(ifd__worker_t *w)
{
    if (!w->pipe_active || uv_is_closing((uv_handle_t *)&w->pipe))
        return;
    w->pipe_open = false;
    uv_close((uv_handle_t *)&w->pipe, ifd__pipe_closed);
}

/* ---- the worker's output ------------------------------------------------------------ */

static void ifd__log_write(const char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = write(2, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return; /* nowhere to log that logging failed */
        p += k, n -= (size_t)k;
    }
}

static void ifd__log_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    ifd__worker_t *w = h->data;
    *buf = uv_buf_init(w->log_line + w->log_len, (unsigned)(IFD__LOG_LINE - w->log_len));
}

static void ifd__log_read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    ifd__worker_t *w = st->data;
    if (nread < 0) {          /* EOF (the process is gone) or an error: flush what is left */
        if (w->log_len > 0) { /* < IFD__LOG_LINE: a full buffer is always written out */
            w->log_line[w->log_len++] = '\n';
            ifd__log_write(w->log_line, w->log_len);
            w->log_len = 0;
        }
        if (!uv_is_closing((uv_handle_t *)&w->logp))
            uv_close((uv_handle_t *)&w->logp, ifd__log_closed);
        return;
    }
    w->log_len += (size_t)nread;
    /* Whole lines out, one write each; a full buffer without a newline too. */
    size_t start = 0;
    for (size_t i = 0; i < w->log_len; i++) {
        if (w->log_line[i] == '\n') {
            ifd__log_write(w->log_line + start, i + 1 - start);
            start = i + 1;
        }
    }
    if (start == 0 && w->log_len == IFD__LOG_LINE) {
        ifd__log_write(w->log_line, w->log_len);
        start = w->log_len;
    }
    memmove(w->log_line, w->log_line + start, w->log_len - start);
    w->log_len -= start;
}

/* Reads fd (the worker's output) into the daemon's log until EOF. */
static int ifd__log_open(ifd__worker_t *w, int fd)
{
    ifd_sup_t *s = w->sup;
    uv_pipe_init(s->loop, &w->logp, 0);
    w->logp.data = w;
    w->log_active = true;
    w->log_len = 0;
    s->open_handles++;
    int rc = uv_pipe_open(&w->logp, fd);
    if (rc < 0)
        close(fd); /* not the handle's yet */
    else
        rc = uv_read_start((uv_stream_t *)&w->logp, ifd__log_alloc_cb, ifd__log_read_cb);
    if (rc < 0) {
        IFD_ERROR("worker %d: output pipe: %s", w->idx, uv_strerror(rc));
        uv_close((uv_handle_t *)&w->logp, ifd__log_closed);
    }
    return rc;
}

/* ---- sending ------------------------------------------------------------------------ */

static void ifd__write_cb(uv_write_t *req, int status)
{
    (void)status; /* a failed write shows up as EOF/exit too */
    free(req);
}

int ifd_sup_send(ifd_sup_t *s, int wi, const ifd_wire_msg_t *m)
{
    if (wi < 0 || wi >= s->n)
        return IFD_EINVAL;
    ifd__worker_t *w = &s->w[wi];
    if (!w->pipe_open)
        return IFD_ECLOSED;
    ifd_buf_t b = IFD_BUF_INIT;
    int rc = ifd_wire_encode(&b, m);
    if (rc) {
        IFD_ERROR("worker %d: encoding a %s frame: %s", wi, ifd_wire_type_name(m->type),
                  ifd_strerror(rc));
        ifd_buf_free(&b);
        return rc == IFD_ENOMEM ? rc : IFD_EINVAL;
    }
    ifd__wreq_t *r = malloc(sizeof *r + b.len);
    if (!r) {
        ifd_buf_free(&b);
        return IFD_ENOMEM;
    }
    r->len = b.len;
    memcpy(r->data, b.data, b.len);
    ifd_buf_free(&b);
    uv_buf_t ub = uv_buf_init(r->data, (unsigned)r->len);
    rc = uv_write(&r->req, (uv_stream_t *)&w->pipe, &ub, 1, ifd__write_cb);
    if (rc < 0) {
        free(r);
        return IFD_ECLOSED;
    }
    return 0;
}

/* ---- reading ------------------------------------------------------------------------ */

static void ifd__alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    ifd__worker_t *w = h->data;
    size_t avail = 0;
    void *p = ifd_wire_reader_prepare(&w->rd, 65536, &avail);
    *buf = uv_buf_init(p, p ? (unsigned)avail : 0);
}

static void ifd__free_handle_cb(uv_handle_t *h)
{
    free(h);
}

/*
 * A GPU worker's READY frame carries its KV device segments' fds (CUDA VMM
 * shareable handles) as SCM_RIGHTS on its first byte: one for each pool —
 * the global one, then the local layers' — whose segment of the worker's
 * device is VMM memory (the kind the worker's bind recorded in the
 * metadata: a provider that fell back to IPC sends none). The worker pipe is
 * an IPC pipe, so libuv keeps received fds pending. The router adopts each
 * for its pool's device (ifd_kvpool_adopt_fd, replacing an fd it held
 * before: a worker that had to rebuild a lost segment sends the new one)
 * and holds it for the daemon's life, so the memory — and the cached
 * prefixes in it — outlive the worker. Without CUDA the router can only
 * hold the fd, never map it. Any other fd is closed.
 */
static void ifd__adopt_kv_fds(ifd__worker_t *w)
{
    ifd_sup_t *s = w->sup;
    ifd_kvpool_t *vmm[2];
    int n_vmm = 0, next = 0;
    ifd_kvpool_t *const pools[2] = {s->p.pool, s->p.local_pool};
    for (int i = 0; i < 2 && pools[i]; i++) {
        ifd_kvpool_params_t g;
        ifd_kvpool_geometry(pools[i], &g);
        if (w->info.kv_device < g.n_devices && g.kind[w->info.kv_device] == IFD_KVSEG_CUDA_VMM)
            vmm[n_vmm++] = pools[i];
    }
    while (uv_pipe_pending_count(&w->pipe) > 0) {
        uv_pipe_t *tmp = malloc(sizeof *tmp);
        if (!tmp || uv_pipe_init(s->loop, tmp, 0) < 0) {
            IFD_ERROR("worker %d: out of memory taking its KV segment fd", w->idx);
            free(tmp);
            return;
        }
        int fd = -1;
        uv_os_fd_t got;
        if (uv_accept((uv_stream_t *)&w->pipe, (uv_stream_t *)tmp) == 0 &&
            uv_fileno((uv_handle_t *)tmp, &got) == 0)
            fd = fcntl(got, F_DUPFD_CLOEXEC, 0);
        uv_close((uv_handle_t *)tmp, ifd__free_handle_cb); /* closes the received fd */
        if (fd < 0) {
            IFD_ERROR("worker %d: taking its KV segment fd: %s", w->idx, strerror(errno));
            continue;
        }
        ifd_kvpool_t *pool = next < n_vmm ? vmm[next] : NULL;
        if (!pool || ifd_kvpool_adopt_fd(pool, w->info.kv_device, fd) != 0) {
            IFD_WARN("worker %d: an fd for KV pool device %d beyond its CUDA VMM segments: "
                     "ignored",
                     w->idx, w->info.kv_device);
            close(fd);
            continue;
        }
        next++;
        IFD_INFO("worker %d: holding the %s device %d segment (CUDA VMM fd) for the "
                 "daemon's life",
                 w->idx, pool == s->p.pool ? "KV pool's" : "local layers' KV pool's",
                 w->info.kv_device);
    }
}

/* After worker w died: an IPC device segment dies with the process that
 * made it, so its cached blocks are gone. (A VMM segment lives on in the
 * fd the router holds; were the driver to free it anyway, the next
 * worker's bind would find the seal broken and rebuild the pool.) */
static void ifd__drop_dead_ipc_segment(ifd__worker_t *w)
{
    ifd_sup_t *s = w->sup;
    ifd_kvpool_t *const pools[2] = {s->p.pool, s->p.local_pool};
    for (int i = 0; i < 2 && pools[i]; i++) {
        const char *which = i ? "the local layers' KV pool" : "KV pool";
        ifd_kvpool_params_t g;
        ifd_kvpool_geometry(pools[i], &g);
        int dev = w->info.kv_device;
        if (dev < 0 || dev >= g.n_devices || g.kind[dev] != IFD_KVSEG_CUDA_IPC)
            continue;
        int n = ifd_kvpool_invalidate_device(pools[i], dev);
        if (n >= 0)
            IFD_WARN("worker %d: %s device %d is CUDA IPC memory, which died with the worker: "
                     "dropped %d cached blocks; the next worker makes the segment afresh",
                     w->idx, which, dev, n);
        else
            IFD_ERROR("worker %d: invalidating %s device %d: %s", w->idx, which, dev,
                      ifd_strerror(n));
    }
}

static void ifd__on_ready(ifd__worker_t *w, const ifd_wire_ready_t *r)
{
    ifd_sup_t *s = w->sup;
    if (w->info.state != IFD_W_STARTING) {
        IFD_WARN("worker %d: unexpected READY", w->idx);
        return;
    }
    uv_timer_stop(&w->timer);
    ifd__adopt_kv_fds(w);
    w->info.state = IFD_W_READY;
    w->info.max_seqs = r->max_seqs ? r->max_seqs : 1;
    w->info.n_ctx = r->n_ctx;
    w->info.vision = r->vision;
    snprintf(w->info.device_name, sizeof w->info.device_name, "%s",
             r->device_name ? r->device_name : "");
    w->run_start_ms = uv_now(s->loop);
    w->ping_out = false;
    IFD_INFO("worker %d (pid %d) ready: %s, %s, max %u sequences", w->idx, w->info.pid,
             r->model_name ? r->model_name : "?", w->info.device_name, w->info.max_seqs);
    if (s->cb.on_ready)
        s->cb.on_ready(s->cb.ctx, w->idx);
}

/* A worker's POOL_SIZE (the POOL step): kept until every worker's is in,
 * then on_pool_sizes. It waits for POOL without a deadline of its own: the
 * others' start timeouts bound the wait. */
static void ifd__on_pool_size(ifd__worker_t *w, const ifd_wire_pool_size_t *ps)
{
    ifd_sup_t *s = w->sup;
    if (w->info.state != IFD_W_SIZING || w->sized) {
        IFD_WARN("worker %d: unexpected POOL_SIZE", w->idx);
        return;
    }
    if (ps->n_blocks < 1) {
        ifd__size_fail(w, "no KV block fits");
        ifd__kill(w, NULL);
        return;
    }
    uv_timer_stop(&w->timer);
    w->size = *ps;
    snprintf(w->size_device, sizeof w->size_device, "%s", ps->device ? ps->device : "?");
    w->size.device = w->size_device;
    w->sized = true;
    if (++s->n_sized < s->n || s->sizing_failed)
        return;
    ifd_wire_pool_size_t sizes[IFD_KVPOOL_MAX_WORKERS];
    for (int i = 0; i < s->n; i++)
        sizes[i] = s->w[i].size;
    if (s->cb.on_pool_sizes)
        s->cb.on_pool_sizes(s->cb.ctx, sizes, s->n);
}

static void ifd__read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    ifd__worker_t *w = st->data;
    ifd_sup_t *s = w->sup;
    if (nread < 0) {
        if (!s->stopping && !s->sizing) /* while sizing, the exit says why */
            IFD_WARN("worker %d (pid %d): connection lost: %s", w->idx, w->info.pid,
                     nread == UV_EOF ? "end of stream" : uv_strerror((int)nread));
        ifd__close_pipe(w);
        ifd__lose(w, NULL);
        return;
    }
    if (nread == 0)
        return;
    if (ifd_wire_reader_commit(&w->rd, (size_t)nread) < 0) {
        if (s->sizing) {
            ifd__size_fail(w, "broken frames from %s before sizing the KV pool: %s", s->binary,
                           ifd_wire_reader_error(&w->rd));
            ifd__kill(w, NULL);
            return;
        }
        IFD_ERROR("worker %d: broken frames: %s", w->idx, ifd_wire_reader_error(&w->rd));
        ifd_sup_kill(s, w->idx, "broken frames");
        return;
    }
    for (;;) {
        if (!w->pipe_open)
            return; /* killed while handling a frame */
        ifd_wire_msg_t m;
        int rc = ifd_wire_reader_next_msg(&w->rd, &m);
        if (rc == 0)
            break;
        if (rc < 0 && s->sizing) {
            ifd__size_fail(w, "a bad frame from %s before sizing the KV pool: %s", s->binary,
                           ifd_wire_reader_error(&w->rd));
            ifd__kill(w, NULL);
            return;
        }
        if (rc < 0) {
            IFD_ERROR("worker %d: bad frame: %s", w->idx, ifd_wire_reader_error(&w->rd));
            if (w->rd.err) {
                ifd_sup_kill(s, w->idx, "broken frames");
                return;
            }
            continue;
        }
        switch (m.type) {
        case IFD_WIRE_READY:
            ifd__on_ready(w, &m.u.ready);
            break;
        case IFD_WIRE_POOL_SIZE:
            ifd__on_pool_size(w, &m.u.pool_size);
            break;
        case IFD_WIRE_STATS:
            if (w->ping_out && m.u.stats.seq == w->ping_seq) {
                w->ping_out = false;
                bool back = w->info.unresponsive;
                w->info.unresponsive = false;
                if (back) {
                    IFD_INFO("worker %d (pid %d) answers pings again", w->idx, w->info.pid);
                    if (s->cb.on_ready) /* the router may route to it again */
                        s->cb.on_ready(s->cb.ctx, w->idx);
                }
            }
            w->info.stats = m.u.stats;
            w->info.stats.spec_accepted_per_pos = NULL;
            for (uint32_t i = 0; i < IFD_WIRE_MAX_SPEC_TOKENS; i++)
                w->info.spec_per_pos[i] =
                    i < m.u.stats.n_spec_per_pos ? m.u.stats.spec_accepted_per_pos[i].n : 0;
            w->info.stats.draft_tier = NULL;
            w->info.n_draft_tier = m.u.stats.n_draft_tier;
            for (uint32_t i = 0; i < m.u.stats.n_draft_tier; i++)
                w->info.draft_tier[i] = m.u.stats.draft_tier[i].n;
            w->info.has_stats = true;
            break;
        case IFD_WIRE_ERROR:
            if (m.u.error.id == 0 && w->info.state == IFD_W_SIZING) {
                ifd__size_fail(w, "%s", m.u.error.message ? m.u.error.message : "failed");
                break; /* it exits next */
            }
            if (m.u.error.id == 0) {
                IFD_ERROR("worker %d: %s (%s)", w->idx, m.u.error.message ? m.u.error.message : "",
                          ifd_err_name(m.u.error.code));
                /* a model or draft that does not fit (another tokenizer, a
                 * malformed file) fails every restart the same way */
                if (!w->run_start_ms &&
                    (m.u.error.code == IFD_EMISMATCH || m.u.error.code == IFD_EFORMAT))
                    w->config_error = true;
                break;
            }
            /* fall through */
        case IFD_WIRE_TOKENS:
        case IFD_WIRE_PROMPT_LOGPROBS:
        case IFD_WIRE_FINISHED:
            if (w->info.state == IFD_W_READY || w->info.state == IFD_W_STOPPING)
                if (s->cb.on_message)
                    s->cb.on_message(s->cb.ctx, w->idx, &m);
            break;
        default:
            IFD_WARN("worker %d: unexpected %s frame", w->idx, ifd_wire_type_name(m.type));
            break;
        }
        ifd_wire_msg_free(&m);
    }
}

/* ---- death and restart ---------------------------------------------------------------- */

static void ifd__timer_restart_cb(uv_timer_t *t)
{
    ifd__worker_t *w = t->data;
    if (w->sup->stopping || w->sup->destroying)
        return;
    if (w->proc_active || w->pipe_active || w->log_active) {
        w->respawn_pending = true; /* when the old handles are closed */
        return;
    }
    ifd__spawn(w);
}

static void ifd__lose(ifd__worker_t *w, const char *why)
{
    ifd_sup_t *s = w->sup;
    if (w->lost)
        return;
    w->lost = true;
    if (w->info.state == IFD_W_READY || w->info.state == IFD_W_STARTING)
        w->info.state = IFD_W_DOWN; /* no longer serving, whatever comes next */
    if (why)
        IFD_WARN("worker %d (pid %d): %s", w->idx, w->info.pid, why);
    if (s->cb.on_lost && !s->sizing) /* nothing was routed to it yet */
        s->cb.on_lost(s->cb.ctx, w->idx);
}

/* The process is gone (exit callback or failed spawn): restart or give up. */
static void ifd__after_exit(ifd__worker_t *w)
{
    ifd_sup_t *s = w->sup;
    if (s->stopping || s->destroying) {
        w->info.state = IFD_W_STOPPED;
        return;
    }
    if (s->sizing) { /* the POOL step is not retried: the start fails */
        if (w->sized)
            ifd__size_fail(w, "%s ended while waiting for the KV pool (%s)", s->binary,
                           w->info.last_exit);
        else
            ifd__size_fail(w, "%s ended before sizing the KV pool (%s)%s", s->binary,
                           w->info.last_exit,
                           strncmp(w->info.last_exit, "exit status", 11) == 0
                               ? ": is it an inferd-worker of this version?"
                               : "");
        return;
    }
    uint64_t now = uv_now(s->loop);
    w->info.crashes++;
    if (s->metrics)
        s->metrics->worker_crashes++;
    if (w->run_start_ms && now - w->run_start_ms > ifd__ms(s, s->p.crash_loop_window_s)) {
        w->crashes_in_row = 0;
        w->info.crash_loops = 0;
    }
    w->crashes_in_row++;
    w->crash_ms[w->n_crash_ms++ % IFD__CRASH_RING] = now;
    int recent = 0;
    uint64_t window = ifd__ms(s, s->p.crash_loop_window_s);
    for (uint64_t i = 0; i < w->n_crash_ms && i < IFD__CRASH_RING; i++)
        if (now - w->crash_ms[i] <= window)
            recent++;
    /* a model or draft that does not fit: the quick restarts would fail alike, so a
     * crash loop at once (a daemon never ready then gives up: main.c's on_failed) */
    if (recent >= s->p.crash_loop_limit || w->config_error) {
        /* a crash loop: wait much longer, but never give up for good (the
         * cause may be outside: memory, a device, a file being replaced) */
        double retry = s->p.crash_loop_backoff_s;
        for (uint64_t i = 1; i < w->info.crash_loops + 1 && retry < s->p.crash_loop_backoff_max_s;
             i++)
            retry *= 2;
        if (retry > s->p.crash_loop_backoff_max_s)
            retry = s->p.crash_loop_backoff_max_s;
        w->info.crash_loops++;
        w->info.state = IFD_W_FAILED;
        w->info.crash_loop = true;
        w->info.retry_in_s = retry;
        if (w->config_error)
            IFD_ERROR("worker %d: its model or draft does not fit (above): crash loop %llu, "
                      "trying again in %.1f s",
                      w->idx, (unsigned long long)w->info.crash_loops, retry);
        else
            IFD_ERROR("worker %d crashed %d times within %.0f s: crash loop %llu, trying again "
                      "in %.1f s (last: %s)",
                      w->idx, recent, s->p.crash_loop_window_s,
                      (unsigned long long)w->info.crash_loops, retry, w->info.last_exit);
        /* on_failed may begin a shutdown (no worker ever started): then the
         * stop below has cancelled nothing yet, so start the timer first */
        uv_timer_start(&w->timer, ifd__timer_restart_cb, ifd__ms(s, retry), 0);
        if (s->cb.on_failed)
            s->cb.on_failed(s->cb.ctx, w->idx);
        return;
    }
    double delay = s->p.backoff_s;
    for (int i = 1; i < w->crashes_in_row && delay < s->p.backoff_max_s; i++)
        delay *= 2;
    if (delay > s->p.backoff_max_s)
        delay = s->p.backoff_max_s;
    w->info.state = IFD_W_DOWN;
    IFD_INFO("worker %d: restarting in %.2f s", w->idx, delay);
    uv_timer_start(&w->timer, ifd__timer_restart_cb, ifd__ms(s, delay), 0);
}

static void ifd__exit_cb(uv_process_t *p, int64_t status, int sig)
{
    ifd__worker_t *w = p->data;
    ifd_sup_t *s = w->sup;
    w->proc_exited = true;
    if (sig)
        snprintf(w->info.last_exit, sizeof w->info.last_exit, "killed by signal %d", sig);
    else
        snprintf(w->info.last_exit, sizeof w->info.last_exit, "exit status %lld",
                 (long long)status);
    bool expected = s->stopping || s->destroying;
    if (expected)
        IFD_INFO("worker %d (pid %d) exited: %s", w->idx, w->info.pid, w->info.last_exit);
    else if (!s->sizing) /* while sizing, on_pool_failed says it */
        IFD_ERROR("worker %d (pid %d) died: %s", w->idx, w->info.pid, w->info.last_exit);
    int n = s->p.pool ? ifd_kvpool_reclaim(s->p.pool, w->info.slot) : 0;
    if (n > 0)
        IFD_INFO("worker %d: reclaimed %d KV block references", w->idx, n);
    else if (n < 0)
        IFD_ERROR("worker %d: reclaiming its KV blocks: %s", w->idx, ifd_strerror(n));
    if (s->p.local_pool) {
        n = ifd_kvpool_reclaim(s->p.local_pool, w->info.slot);
        if (n > 0)
            IFD_INFO("worker %d: reclaimed %d local-layer KV block references", w->idx, n);
        else if (n < 0)
            IFD_ERROR("worker %d: reclaiming its local-layer KV blocks: %s", w->idx,
                      ifd_strerror(n));
    }
    if (s->p.pool)
        ifd__drop_dead_ipc_segment(w);
    ifd__lose(w, NULL);
    ifd__close_pipe(w);
    w->info.pid = 0;
    uv_timer_stop(&w->timer);
    uv_close((uv_handle_t *)&w->proc, ifd__proc_closed);
    ifd__after_exit(w);
}

static void ifd__timer_start_timeout_cb(uv_timer_t *t)
{
    ifd__worker_t *w = t->data;
    if (w->info.state == IFD_W_SIZING) {
        ifd__size_fail(w,
                       "loading the weights and sizing the KV pool took over %.0f s "
                       "(worker_start_timeout)",
                       w->sup->p.start_timeout_s);
        ifd__kill(w, NULL);
    } else if (w->info.state == IFD_W_STARTING) {
        ifd_sup_kill(w->sup, w->idx, "did not report ready in time");
    }
}

static void ifd__timer_kill_cb(uv_timer_t *t)
{
    ifd__worker_t *w = t->data;
    if (w->proc_active && !w->proc_exited) {
        IFD_WARN("worker %d (pid %d) did not exit in time: killing it", w->idx, w->info.pid);
        uv_process_kill(&w->proc, SIGKILL);
    }
}

/* SIGKILLs w's process (why: logged; NULL: quietly, as while sizing). */
static void ifd__kill(ifd__worker_t *w, const char *why)
{
    if (w->proc_active && !w->proc_exited) {
        if (why)
            IFD_WARN("worker %d (pid %d): killing it: %s", w->idx, w->info.pid, why);
        uv_process_kill(&w->proc, SIGKILL);
    }
    ifd__close_pipe(w);
    ifd__lose(w, NULL);
}

void ifd_sup_kill(ifd_sup_t *s, int wi, const char *why)
{
    if (wi < 0 || wi >= s->n)
        return;
    ifd__kill(&s->w[wi], s->sizing ? NULL : why);
}

/* ---- spawning ------------------------------------------------------------------------ */

#define IFD__POOL_FDS 4

/* The pool's fds for worker w, as HELLO and POOL send them (wire.h): the
 * metadata fd, then the data fd of the worker's own pool device when the
 * router has one (a host memfd, or a CUDA VMM segment's fd adopted from an
 * earlier run; a first GPU worker creates the segment itself), then the
 * same of the local layers' pool when there is one (*n_local: how many of
 * the fds are its, 0 without). Returns the count. */
static int ifd__pool_fds(const ifd__worker_t *w, int fds[IFD__POOL_FDS], int *n_local)
{
    const ifd_sup_t *s = w->sup;
    int n_fds = 0;
    ifd_kvpool_t *const pools[2] = {s->p.pool, s->p.local_pool};
    *n_local = 0;
    for (int i = 0; i < 2 && pools[i]; i++) {
        const int first = n_fds;
        fds[n_fds++] = ifd_kvpool_meta_fd(pools[i]);
        int data_fd = ifd_kvpool_data_fd(pools[i], w->info.kv_device);
        if (data_fd >= 0)
            fds[n_fds++] = data_fd;
        if (i == 1)
            *n_local = n_fds - first;
    }
    return n_fds;
}

/* Encodes m and sends it with n_fds descriptors (SCM_RIGHTS) on sock. */
static int ifd__send_frame_fds(int sock, const ifd_wire_msg_t *m, const int *fds, int n_fds)
{
    ifd_buf_t b = IFD_BUF_INIT;
    int rc = ifd_wire_encode(&b, m);
    if (!rc)
        rc = ifd_fdpass_send(sock, b.data, b.len, fds, n_fds);
    ifd_buf_free(&b);
    return rc;
}

static int ifd__send_hello(ifd__worker_t *w, int sock)
{
    ifd_sup_t *s = w->sup;
    ifd_wire_msg_t m = {.type = IFD_WIRE_HELLO};
    ifd_wire_hello_t *h = &m.u.hello;
    int fds[IFD__POOL_FDS];
    int n_local = 0;
    int n_fds = s->sizing ? 0 : ifd__pool_fds(w, fds, &n_local); /* the POOL step: no pool yet */
    h->slot = (uint32_t)w->info.slot;
    h->model_path = s->model;
    h->backend = s->backend;
    h->device = s->gpus ? s->gpus[w->idx] : -1;
    h->kv_device = (uint32_t)w->info.kv_device;
    h->n_threads = (uint32_t)(s->p.n_threads > 0 ? s->p.n_threads : 0);
    h->max_seqs = s->p.max_seqs;
    h->max_batched_tokens = s->p.max_batched_tokens;
    h->prefill_cap = s->p.prefill_cap;
    h->spec = s->p.spec;
    h->draft_model_path = s->draft;
    h->mmproj_path = s->mmproj;
    h->n_fds = (uint32_t)n_fds;
    h->n_local_fds = (uint32_t)n_local;
    h->kv = s->p.kv;
    h->size_pool = s->sizing;
    h->gpu_memory_fraction = s->sizing ? s->p.gpu_memory_fraction : 0.0;
    h->max_model_len = s->p.max_model_len;
    return ifd__send_frame_fds(sock, &m, fds, n_fds);
}

static void ifd__spawn(ifd__worker_t *w)
{
    ifd_sup_t *s = w->sup;
    int sv[2] = {-1, -1};
    w->lost = false;
    w->proc_exited = false;
    w->ping_out = false;
    w->run_start_ms = 0;
    w->config_error = false;
    w->info.unresponsive = false;
    w->info.crash_loop = false;
    w->info.retry_in_s = 0;
    w->info.state = s->sizing ? IFD_W_SIZING : IFD_W_STARTING;
    w->sized = false;
    w->info.has_stats = false;
    ifd_wire_reader_close(&w->rd);
    ifd_wire_reader_init(&w->rd, 0);
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        IFD_ERROR("worker %d: socketpair: %s", w->idx, strerror(errno));
        snprintf(w->info.last_exit, sizeof w->info.last_exit, "socketpair failed");
        ifd__after_exit(w);
        return;
    }
    int lp[2] = {-1, -1};
    if (pipe2(lp, O_CLOEXEC) != 0) {
        IFD_ERROR("worker %d: pipe: %s", w->idx, strerror(errno));
        snprintf(w->info.last_exit, sizeof w->info.last_exit, "pipe failed");
        close(sv[0]), close(sv[1]);
        ifd__after_exit(w);
        return;
    }
    char *args[40]; /* 28 at most and the NULL */
    int a = 0;
    args[a++] = s->binary;
    args[a++] = (char *)"--serve";
    args[a++] = (char *)"--fd";
    args[a++] = (char *)"3";
    args[a++] = (char *)"--log-level";
    args[a++] = s->level;
    args[a++] = (char *)"--weights-dtype";
    args[a++] = s->weights;
    if (s->shape) {
        args[a++] = (char *)"--random-weights";
        args[a++] = s->shape;
        args[a++] = (char *)"--weights-seed";
        args[a++] = s->seed;
    }
    if (s->kv_dir) {
        args[a++] = (char *)"--kv-cache-dir";
        args[a++] = s->kv_dir;
        args[a++] = (char *)"--kv-cache-disk-bytes";
        args[a++] = s->kv_disk;
    }
    if (s->kv_host[0]) {
        args[a++] = (char *)"--kv-cache-host-bytes";
        args[a++] = s->kv_host;
    }
    if (s->kv_pin[0]) {
        args[a++] = (char *)"--kv-cache-pin-slots";
        args[a++] = s->kv_pin;
    }
    if (s->image_cache[0]) {
        args[a++] = (char *)"--image-cache-mb";
        args[a++] = s->image_cache;
    }
    if (s->max_logprobs[0]) {
        args[a++] = (char *)"--max-logprobs";
        args[a++] = s->max_logprobs;
    }
    if (s->vision_step[0]) {
        args[a++] = (char *)"--vision-step-ms";
        args[a++] = s->vision_step;
    }
    if (s->draft_step[0]) {
        args[a++] = (char *)"--draft-step-tokens";
        args[a++] = s->draft_step;
    }
    args[a] = NULL;
    uv_stdio_container_t stdio[4];
    stdio[0].flags = UV_IGNORE;
    stdio[1].flags = UV_INHERIT_FD;
    stdio[1].data.fd = lp[1]; /* stdout and stderr: relayed to the log */
    stdio[2].flags = UV_INHERIT_FD;
    stdio[2].data.fd = lp[1];
    stdio[3].flags = UV_INHERIT_FD;
    stdio[3].data.fd = sv[1];
    uv_process_options_t o;
    memset(&o, 0, sizeof o);
    o.exit_cb = ifd__exit_cb;
    o.file = s->binary;
    o.args = args;
    o.stdio = stdio;
    o.stdio_count = 4;
    /* a GPU worker sees only its GPU, as its device 0 (gpu.h) */
    char cvd[48];
    char **env = s->gpus ? ifd_gpu_env(s->gpus[w->idx], cvd, sizeof cvd) : NULL;
    if (s->gpus && !env) { /* never start it on every GPU */
        IFD_ERROR("worker %d: out of memory for its environment", w->idx);
        snprintf(w->info.last_exit, sizeof w->info.last_exit, "out of memory");
        close(sv[0]), close(sv[1]), close(lp[0]), close(lp[1]);
        ifd__after_exit(w);
        return;
    }
    o.env = env;
    w->proc.data = w;
    int rc = uv_spawn(s->loop, &w->proc, &o);
    free(env); /* the child has exec'ed (or failed) with it */
    close(sv[1]);
    close(lp[1]);
    if (rc < 0) {
        if (s->sizing)
            ifd__size_fail(w, "cannot start %s: %s", s->binary, uv_strerror(rc));
        else
            IFD_ERROR("worker %d: cannot start %s: %s", w->idx, s->binary, uv_strerror(rc));
        snprintf(w->info.last_exit, sizeof w->info.last_exit, "spawn failed: %s", uv_strerror(rc));
        close(sv[0]);
        close(lp[0]);
        /* uv_spawn initialised the handle even on failure: close it */
        w->proc_active = true;
        w->proc_exited = true;
        s->open_handles++;
        uv_close((uv_handle_t *)&w->proc, ifd__proc_closed);
        ifd__after_exit(w);
        return;
    }
    w->proc_active = true;
    s->open_handles++;
    w->info.pid = w->proc.pid;
    ifd__log_open(w, lp[0]); /* on failure the output is lost, the worker still runs */
    w->info.starts++;
    if (s->metrics) {
        s->metrics->worker_starts++;
        if (w->info.starts > 1)
            s->metrics->worker_restarts++;
    }
    if (s->gpus && s->sizing) /* quiet: a failed start says one line */
        IFD_DEBUG("worker %d: started pid %d (%s, %s on GPU %d) to size the KV pool", w->idx,
                  w->info.pid, s->binary, s->backend, s->gpus[w->idx]);
    else if (s->gpus)
        IFD_INFO("worker %d: started pid %d (%s, %s on GPU %d)", w->idx, w->info.pid, s->binary,
                 s->backend, s->gpus[w->idx]);
    else
        IFD_INFO("worker %d: started pid %d (%s)", w->idx, w->info.pid, s->binary);
    if ((rc = ifd__send_hello(w, sv[0])) != 0) {
        if (!s->sizing) /* while sizing, its exit is the one line (it died before reading) */
            IFD_ERROR("worker %d: sending HELLO: %s", w->idx, ifd_strerror(rc));
        close(sv[0]);
        ifd_sup_kill(s, w->idx, "HELLO failed");
        return;
    }
    /* an IPC pipe: READY may carry the worker's KV segment fd (ifd__adopt_kv_fds) */
    uv_pipe_init(s->loop, &w->pipe, 1);
    w->pipe.data = w;
    w->pipe_active = true;
    s->open_handles++;
    if ((rc = uv_pipe_open(&w->pipe, sv[0])) < 0 ||
        (rc = uv_read_start((uv_stream_t *)&w->pipe, ifd__alloc_cb, ifd__read_cb)) < 0) {
        IFD_ERROR("worker %d: socket: %s", w->idx, uv_strerror(rc));
        close(sv[0]);
        ifd_sup_kill(s, w->idx, "socket setup failed");
        return;
    }
    w->pipe_open = true;
    uv_timer_start(&w->timer, ifd__timer_start_timeout_cb, ifd__ms(s, s->p.start_timeout_s), 0);
}

/* ---- liveness ------------------------------------------------------------------------ */

/* A worker answers pings between engine steps, so one long step (a big
 * prefill on a slow or overloaded machine, a sanitized build) delays the
 * answer past worker_timeout although the worker is working. Killing it
 * then would resume the same step on its replacement and kill that one too,
 * for ever. So an unanswered ping kills only a worker whose CPU time stopped
 * moving for worker_timeout (stopped, deadlocked, blocked) — or, whatever
 * its CPU does, one silent for IFD__BUSY_LIMIT × worker_timeout and at
 * least IFD__BUSY_MIN_S (a step that never ends). Without /proc (-1), the
 * timeout alone decides. */
enum { IFD__BUSY_LIMIT = 10, IFD__BUSY_MIN_S = 300 };

static double ifd__busy_limit_s(const ifd_sup_t *s)
{
    double b = IFD__BUSY_LIMIT * s->p.timeout_s;
    return b > IFD__BUSY_MIN_S ? b : IFD__BUSY_MIN_S;
}

/* User + system CPU time of process pid in clock ticks, or -1. */
static int64_t ifd__cpu_ticks(int pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    /* "pid (comm) state ppid …": utime and stime are fields 14 and 15,
     * the 12th and 13th after the ')' that ends comm (which may hold spaces) */
    const char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    p++;
    for (int f = 0; f < 11; f++) {
        p = strchr(p + 1, ' ');
        if (!p)
            return -1;
    }
    unsigned long long ut = 0, st = 0;
    if (sscanf(p, " %llu %llu", &ut, &st) != 2)
        return -1;
    return (int64_t)(ut + st);
}

/* Why worker w, whose ping is `age` ms old, is killed now, or NULL. */
static const char *ifd__ping_overdue(ifd_sup_t *s, ifd__worker_t *w, uint64_t now, uint64_t age)
{
    const uint64_t timeout = ifd__ms(s, s->p.timeout_s);
    int64_t t = ifd__cpu_ticks(w->info.pid);
    if (t >= 0 && w->cpu_ticks >= 0 && t > w->cpu_ticks) {
        w->cpu_ticks = t;
        w->cpu_moved_ms = now;
    }
    if (age <= timeout)
        return NULL;
    if (age > ifd__ms(s, ifd__busy_limit_s(s)))
        return "stayed silent too long although busy (a step that never ends?)";
    if (t < 0 || w->cpu_ticks < 0 || now - w->cpu_moved_ms > timeout)
        return "stopped answering pings";
    if (!w->busy_logged) {
        w->busy_logged = true;
        IFD_WARN("worker %d (pid %d): no answer to a ping for %.1f s, but its CPU time moves "
                 "(a long engine step): not killed unless it stops for %.1f s or stays silent "
                 "for %.0f s",
                 w->idx, w->info.pid, (double)age / 1000.0, s->p.timeout_s, ifd__busy_limit_s(s));
    }
    return NULL;
}

static void ifd__ping_cb(uv_timer_t *t)
{
    ifd_sup_t *s = t->data;
    uint64_t now = uv_now(s->loop);
    for (int i = 0; i < s->n; i++) {
        ifd__worker_t *w = &s->w[i];
        if (w->info.state != IFD_W_READY || !w->pipe_open)
            continue;
        if (w->ping_out) {
            uint64_t age = now - w->ping_sent_ms;
            const char *why = ifd__ping_overdue(s, w, now, age);
            if (why) {
                ifd_sup_kill(s, i, why);
            } else if (!w->info.unresponsive && age + 10 >= 2 * ifd__ms(s, s->p.ping_interval_s)) {
                /* one long engine step can delay one answer; two intervals is a stall */
                w->info.unresponsive = true;
                IFD_WARN("worker %d (pid %d): no answer to a ping for %.1f s (killed after "
                         "%.1f s)",
                         i, w->info.pid, (double)age / 1000.0, s->p.timeout_s);
            }
            continue;
        }
        ifd_wire_msg_t m = {.type = IFD_WIRE_STATS_REQ};
        m.u.stats_req.seq = ++w->ping_seq;
        if (ifd_sup_send(s, i, &m) == 0) {
            w->ping_out = true;
            w->ping_sent_ms = now;
            w->cpu_ticks = ifd__cpu_ticks(w->info.pid);
            w->cpu_moved_ms = now;
            w->busy_logged = false;
        }
    }
}

/* ---- public --------------------------------------------------------------------------- */

int ifd_sup_create(ifd_sup_t **out, uv_loop_t *loop, const ifd_sup_params_t *p,
                   const ifd_sup_callbacks_t *cb, ifd_metrics_t *metrics)
{
    if (p->n_workers < 1 || p->n_workers > IFD_KVPOOL_MAX_WORKERS || !p->worker_binary ||
        !p->model_path || (p->size_pool && (p->pool || !p->gpus)))
        return IFD_EINVAL;
    ifd_sup_t *s = calloc(1, sizeof *s);
    if (!s)
        return IFD_ENOMEM;
    s->w = calloc((size_t)p->n_workers, sizeof *s->w);
    s->binary = strdup(p->worker_binary);
    s->model = strdup(p->model_path);
    s->draft = p->draft_model_path ? strdup(p->draft_model_path) : NULL;
    s->mmproj = p->mmproj_path ? strdup(p->mmproj_path) : NULL;
    s->level = strdup(p->log_level ? p->log_level : "info");
    s->weights = strdup(p->weights_dtype ? p->weights_dtype : "auto");
    s->backend = strdup(p->backend ? p->backend : "cpu");
    s->shape = p->random_weights && *p->random_weights ? strdup(p->random_weights) : NULL;
    snprintf(s->seed, sizeof s->seed, "%llu", (unsigned long long)p->weights_seed);
    s->kv_dir = p->kv_cache_dir && *p->kv_cache_dir ? strdup(p->kv_cache_dir) : NULL;
    snprintf(s->kv_disk, sizeof s->kv_disk, "%llu", (unsigned long long)p->kv_cache_disk_bytes);
    if (p->kv_cache_host_bytes)
        snprintf(s->kv_host, sizeof s->kv_host, "%llu", (unsigned long long)p->kv_cache_host_bytes);
    if (p->kv_cache_pin_slots >= 0)
        snprintf(s->kv_pin, sizeof s->kv_pin, "%d", (int)p->kv_cache_pin_slots);
    if (p->image_cache_mb)
        snprintf(s->image_cache, sizeof s->image_cache, "%u", p->image_cache_mb);
    if (p->vision_step_ms)
        snprintf(s->vision_step, sizeof s->vision_step, "%u", p->vision_step_ms);
    if (p->max_logprobs)
        snprintf(s->max_logprobs, sizeof s->max_logprobs, "%lld", (long long)p->max_logprobs);
    if (p->draft_step_tokens)
        snprintf(s->draft_step, sizeof s->draft_step, "%u", p->draft_step_tokens);
    bool gpu = strcmp(s->backend ? s->backend : "", "cpu") != 0;
    if (gpu && p->gpus && (s->gpus = calloc((size_t)p->n_workers, sizeof *s->gpus)))
        memcpy(s->gpus, p->gpus, (size_t)p->n_workers * sizeof *s->gpus);
    int rc = 0;
    if (!s->w || !s->binary || !s->model || !s->level || !s->weights || !s->backend ||
        (p->draft_model_path && !s->draft) || (p->mmproj_path && !s->mmproj) ||
        (p->random_weights && *p->random_weights && !s->shape) || (gpu && p->gpus && !s->gpus) ||
        (p->kv_cache_dir && *p->kv_cache_dir && !s->kv_dir))
        rc = IFD_ENOMEM;
    else if (gpu && !s->gpus) /* a GPU backend names its GPUs */
        rc = IFD_EINVAL;
    if (rc) {
        s->destroying = true; /* no handle yet: frees at once */
        ifd__maybe_free(s);
        return rc;
    }
    s->loop = loop;
    s->p = *p;
    s->cb = *cb;
    s->metrics = metrics;
    s->n = p->n_workers;
    s->sizing = p->size_pool;
    for (int i = 0; i < s->n; i++) {
        ifd__worker_t *w = &s->w[i];
        w->sup = s;
        w->idx = i;
        w->info.slot = i;
        /* CPU workers share the host segment; GPU worker i owns device i */
        w->info.kv_device = s->gpus ? i : 0;
        w->info.state = IFD_W_DOWN;
        ifd_wire_reader_init(&w->rd, 0);
        uv_timer_init(loop, &w->timer);
        w->timer.data = w;
        s->open_handles++;
    }
    uv_timer_init(loop, &s->ping_timer);
    s->ping_timer.data = s;
    s->open_handles++;
    *out = s;
    return 0;
}

int ifd_sup_start(ifd_sup_t *s)
{
    if (!s->p.pool && !s->sizing)
        return IFD_EINVAL;
    for (int i = 0; i < s->n; i++)
        ifd__spawn(&s->w[i]);
    uint64_t iv = ifd__ms(s, s->p.ping_interval_s);
    uv_timer_start(&s->ping_timer, ifd__ping_cb, iv, iv);
    return 0;
}

/* Sends POOL with the pool's fds on worker w's socket, written directly
 * like HELLO (SCM_RIGHTS on the frame's bytes): nothing else is queued to
 * a sizing worker (no pings or requests before READY) and the frame is far
 * smaller than the socket's buffer. */
static int ifd__send_pool(ifd__worker_t *w)
{
    ifd_sup_t *s = w->sup;
    uv_os_fd_t sock;
    if (!w->pipe_open || uv_fileno((uv_handle_t *)&w->pipe, &sock) != 0)
        return IFD_ECLOSED;
    if (uv_stream_get_write_queue_size((uv_stream_t *)&w->pipe) != 0)
        return IFD_EBUSY;
    ifd_wire_msg_t m = {.type = IFD_WIRE_POOL};
    int fds[IFD__POOL_FDS];
    int n_local = 0;
    const int n_fds = ifd__pool_fds(w, fds, &n_local);
    m.u.pool.n_fds = (uint32_t)n_fds;
    m.u.pool.n_local_fds = (uint32_t)n_local;
    m.u.pool.kv = s->p.kv;
    return ifd__send_frame_fds(sock, &m, fds, n_fds);
}

int ifd_sup_set_pool(ifd_sup_t *s, ifd_kvpool_t *pool, ifd_kvpool_t *local_pool,
                     const ifd_wire_kv_geometry_t *kv)
{
    if (!pool || s->p.pool || (s->sizing && (s->n_sized < s->n || s->sizing_failed)))
        return IFD_EINVAL;
    s->p.pool = pool;
    s->p.local_pool = local_pool;
    s->p.kv = *kv;
    if (!s->sizing)
        return 0;
    s->sizing = false;
    for (int i = 0; i < s->n; i++) {
        ifd__worker_t *w = &s->w[i];
        int rc = ifd__send_pool(w);
        if (rc) {
            IFD_ERROR("worker %d: sending POOL: %s", w->idx, ifd_strerror(rc));
            w->info.state = IFD_W_STARTING; /* a crash from here: restarted with HELLO */
            ifd_sup_kill(s, w->idx, "POOL failed");
            continue;
        }
        w->info.state = IFD_W_STARTING;
        uv_timer_start(&w->timer, ifd__timer_start_timeout_cb, ifd__ms(s, s->p.start_timeout_s), 0);
    }
    return 0;
}

/* ---- the router's transport ---------------------------------------------------------- */

static void ifd__tp_worker(void *ctx, int wi, ifd_router_worker_t *out)
{
    const ifd_worker_info_t *info = &((ifd_sup_t *)ctx)->w[wi].info;
    out->ready = info->state == IFD_W_READY;
    out->unresponsive = info->unresponsive;
    out->max_seqs = info->max_seqs;
    out->kv_device = info->kv_device;
}

static int ifd__tp_send(void *ctx, int wi, const ifd_wire_msg_t *m)
{
    return ifd_sup_send(ctx, wi, m);
}

static void ifd__tp_kill(void *ctx, int wi, const char *why)
{
    ifd_sup_kill(ctx, wi, why);
}

static bool ifd__tp_all_failed(void *ctx)
{
    return ifd_sup_all_failed(ctx);
}

ifd_router_transport_t ifd_sup_transport(ifd_sup_t *s)
{
    ifd_router_transport_t tp = {.ctx = s,
                                 .n_workers = s->n,
                                 .worker = ifd__tp_worker,
                                 .send = ifd__tp_send,
                                 .kill = ifd__tp_kill,
                                 .all_failed = ifd__tp_all_failed};
    return tp;
}

int ifd_sup_n_workers(const ifd_sup_t *s)
{
    return s->n;
}

const ifd_worker_info_t *ifd_sup_worker(const ifd_sup_t *s, int w)
{
    return w >= 0 && w < s->n ? &s->w[w].info : NULL;
}

void ifd_sup_counts(const ifd_sup_t *s, int *ready, int *starting, int *down, int *failed)
{
    *ready = *starting = *down = *failed = 0;
    for (int i = 0; i < s->n; i++) {
        switch (s->w[i].info.state) {
        case IFD_W_READY:
            (*ready)++;
            break;
        case IFD_W_STARTING:
            (*starting)++;
            break;
        case IFD_W_FAILED:
            (*failed)++;
            break;
        default:
            (*down)++;
            break;
        }
    }
}

bool ifd_sup_all_failed(const ifd_sup_t *s)
{
    for (int i = 0; i < s->n; i++) {
        ifd_worker_state_t st = s->w[i].info.state;
        if (st == IFD_W_READY || st == IFD_W_STARTING || st == IFD_W_DOWN)
            return false;
    }
    return true;
}

void ifd_sup_set_timing(ifd_sup_t *s, const ifd_sup_params_t *p)
{
    s->p.ping_interval_s = p->ping_interval_s;
    s->p.timeout_s = p->timeout_s;
    s->p.start_timeout_s = p->start_timeout_s;
    s->p.backoff_s = p->backoff_s;
    s->p.backoff_max_s = p->backoff_max_s;
    s->p.crash_loop_limit = p->crash_loop_limit;
    s->p.crash_loop_window_s = p->crash_loop_window_s;
    s->p.crash_loop_backoff_s = p->crash_loop_backoff_s;
    s->p.crash_loop_backoff_max_s = p->crash_loop_backoff_max_s;
    if (!s->stopping) {
        uint64_t iv = ifd__ms(s, s->p.ping_interval_s);
        uv_timer_start(&s->ping_timer, ifd__ping_cb, iv, iv);
    }
}

int ifd_sup_set_log_level(ifd_sup_t *s, const char *level)
{
    ifd_log_level_t lvl;
    if (!level || ifd_log_parse_level(level, &lvl) != 0)
        return IFD_EINVAL;
    char *copy = strdup(level);
    if (!copy)
        return IFD_ENOMEM;
    free(s->level);
    s->level = copy;
    ifd_wire_msg_t m = {.type = IFD_WIRE_LOG_LEVEL};
    m.u.log_level.level = (uint32_t)lvl;
    for (int i = 0; i < s->n; i++)
        if (s->w[i].pipe_open)
            (void)ifd_sup_send(s, i, &m); /* a worker that is going away restarts with it */
    return 0;
}

void ifd_sup_stop(ifd_sup_t *s, double grace_s)
{
    if (s->stopping)
        return;
    s->stopping = true;
    uv_timer_stop(&s->ping_timer);
    for (int i = 0; i < s->n; i++) {
        ifd__worker_t *w = &s->w[i];
        w->respawn_pending = false;
        uv_timer_stop(&w->timer);
        if (w->proc_active && !w->proc_exited) {
            w->info.state = IFD_W_STOPPING;
            ifd_wire_msg_t m = {.type = IFD_WIRE_SHUTDOWN};
            if (ifd_sup_send(s, i, &m) != 0)
                uv_process_kill(&w->proc, SIGTERM);
            uv_timer_start(&w->timer, ifd__timer_kill_cb, ifd__ms(s, grace_s), 0);
        } else if (w->info.state != IFD_W_FAILED) {
            w->info.state = IFD_W_STOPPED;
        }
    }
    ifd__check_stopped(s);
}

void ifd_sup_destroy(ifd_sup_t *s)
{
    if (!s)
        return;
    s->stopping = true;
    s->destroying = true;
    uv_close((uv_handle_t *)&s->ping_timer, ifd__handle_closed);
    for (int i = 0; i < s->n; i++) {
        ifd__worker_t *w = &s->w[i];
        if (w->proc_active && !w->proc_exited)
            uv_process_kill(&w->proc, SIGKILL);
        if (w->proc_active && !uv_is_closing((uv_handle_t *)&w->proc))
            uv_close((uv_handle_t *)&w->proc, ifd__proc_closed);
        ifd__close_pipe(w);
        if (w->log_active && !uv_is_closing((uv_handle_t *)&w->logp))
            uv_close((uv_handle_t *)&w->logp, ifd__log_closed);
        w->timer.data = s;
        uv_close((uv_handle_t *)&w->timer, ifd__handle_closed);
    }
}
