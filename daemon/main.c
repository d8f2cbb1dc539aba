/*
 * main.c — inferd, the router daemon: start-up, signals, shutdown.
 *
 * Start-up, one phase each (ifd__run): settings (config.h) and log →
 * the model's hyper-parameters and tokenizer (no weights) → the loop and
 * the workers' supervisor → signals and systemd's timers → with --gpus the
 * POOL step (the first workers size the pool) → the KV pool, sized by
 * kv_budget or by the GPUs' reports → API key, listeners (systemd's, or the
 * Unix socket and optional TCP) and the HTTP server → the router and the
 * API → workers spawned → the loop. A failed phase is undone by
 * ifd__start_failed. sd_notify READY=1 once every worker has reported ready; until then
 * EXTEND_TIMEOUT_USEC every few seconds, and WATCHDOG=1 every WatchdogSec/2
 * for as long as the loop runs (ifd__sd_tick_cb).
 *
 * Shutdown (SIGTERM or SIGINT; a second one hurries it): STOPPING=1, stop
 * accepting, close idle connections, let requests in flight finish for up to
 * shutdown_grace (then end them), stop the workers (SHUTDOWN, then SIGKILL),
 * close every handle, exit 0. SIGHUP reopens log_file and applies the
 * reloadable settings. With --gpus the handlers are on from the POOL step
 * (the first workers load the weights and size the pool, before anything
 * listens): a SIGTERM or SIGINT then kills and reaps those workers, logs
 * that the start-up was interrupted and exits 0; a SIGHUP is ignored.
 * Signal callbacks run on the loop (uv_signal), never in signal context.
 *
 * The state below is one struct that main allocates, passed to every
 * callback: no globals.
 */
#include "api.h"
#include "config.h"
#include "error.h"
#include "gen.h"
#include "gpu.h"
#include "http.h"
#include "ids.h"
#include "imgurl.h"
#include "inspect/inspect.h"
#include "kvpool/kvparams.h"
#include "listen.h"
#include "log.h"
#include "metrics.h"
#include "modelfile/gguf.h"
#include "modelfile/model_config.h"
#include "modelfile/model_source.h"
#include "modelfile/shape.h"
#include "router.h"
#include "supervisor.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>
#include <xxhash.h>

#define IFD__MAX_LISTENERS 8

typedef struct {
    uv_loop_t loop;
    ifd_config_t cfg;
    ifd_config_cli_t cli;
    ifd_model_config_t mcfg;
    ifd_tokenizer_t *tok;
    ifd_chat_template_t *tpl;
    ifd_kvpool_t *pool;
    ifd_kvpool_t *lpool; /* the local layers' pool (docs/models.md), or NULL */
    ifd_metrics_t metrics;
    ifd_http_server_t *http;
    ifd_sup_t *sup;
    ifd_router_t *router;
    ifd_api_t api;
    ifd_apikeys_t *keys; /* api_key(_file) (api.keys), NULL when none; replaced on reload */
    ifd_listener_t lst[IFD__MAX_LISTENERS];
    int n_lst;
    uv_signal_t sig_term, sig_int, sig_hup;
    uv_timer_t grace_timer;
    uv_timer_t step_timer;  /* runs shutdown steps outside other callbacks */
    uv_timer_t sd_timer;    /* systemd: WATCHDOG=1, EXTEND_TIMEOUT_USEC while loading */
    ifd_memtrim_t trim;     /* freed memory back to the system (memtrim.h) */
    uint64_t watchdog_usec; /* WatchdogSec= (0: no watchdog) */
    char *wedge_path;       /* $INFERD_TEST_WEDGE_LOOP (ifd__sd_tick_cb), or NULL; owned */
    int stage;              /* 0 serving, 1 draining, 2 stopping workers, 3 closing */
    int exit_code;
    bool ran; /* the loop ran to its end: clean up */
    char model_id[256];
    char model_path[PATH_MAX];
    char worker_bin[PATH_MAX];
    int gpus[IFD_GPU_MAX]; /* --gpus: one worker per id (n_gpus 0: CPU workers) */
    int n_gpus;
    const char *backend;       /* the workers' backend: "cpu", "cuda" or "cuda-f32" */
    char shape_path[PATH_MAX]; /* --random-weights, resolved ("" when unset) */
    char draft_path[PATH_MAX]; /* --draft-model, resolved ("" when unset) */
    char mmproj_path[PATH_MAX]; /* --mmproj, resolved ("" when unset) */
    /* --gpus, the POOL step: each GPU's POOL_SIZE (device → gpu_dev[i]),
     * or the failure's one line */
    ifd_wire_pool_size_t gpu_size[IFD_GPU_MAX];
    char gpu_dev[IFD_GPU_MAX][128];
    bool sized;
    char size_err[1024];
    bool sizing;             /* the POOL step's loop run is on */
    const char *interrupted; /* SIGTERM/SIGINT during it ("SIGTERM"), or NULL */
    bool sizing_stopped;     /* ...and every sizing worker has exited since */
    bool handles_init;       /* the signal handles and timers below exist */
    bool loop_init;          /* uv_loop_init done (a failed start closes it if it can) */
} ifd__daemon_t;

static void ifd__shutdown_step(ifd__daemon_t *d);
static void ifd__begin_shutdown(ifd__daemon_t *d, const char *why);
static void ifd__step_cb(uv_timer_t *t);

/* ---- helpers ------------------------------------------------------------------------------ */

static int ifd__open_log(const char *path)
{
    if (!path || !*path)
        return 0;
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    if (fd < 0) {
        int e = errno;
        IFD_ERROR("log_file %s: %s", path, strerror(e));
        return -e;
    }
    fflush(stderr);
    dup2(fd, 2);
    close(fd);
    return 0;
}

/* The worker program: the setting, else next to this binary (installed or
 * in the build tree), else whatever $PATH finds. */
static void ifd__find_worker(const ifd_config_t *cfg, char *out, size_t len)
{
    if (cfg->worker_binary && *cfg->worker_binary) {
        snprintf(out, len, "%s", cfg->worker_binary);
        return;
    }
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (slash) {
            *slash = '\0';
            const char *cands[] = {"%s/inferd-worker", "%s/../worker/inferd-worker",
                                   "%s/../libexec/inferd/inferd-worker"};
            for (size_t i = 0; i < sizeof cands / sizeof cands[0]; i++) {
                char p[PATH_MAX + 64];
                snprintf(p, sizeof p, cands[i], self);
                if (access(p, X_OK) == 0) {
                    snprintf(out, len, "%.*s", (int)len - 1, p);
                    return;
                }
            }
        }
    }
    snprintf(out, len, "inferd-worker");
}

/* The HTTP server's settings from c, checked: allowed_origins parsed
 * (cors.h), root_path "" or "/…" without a trailing '/', allow_image_urls
 * (imgurl.h). 0, or IFD_EINVAL with the reason in err. */
static int ifd__limits(const ifd_config_t *c, ifd_http_limits_t *l, char *err, size_t errlen)
{
    memset(l, 0, sizeof *l);
    l->max_connections = (int)c->max_connections;
    l->max_header_bytes = (size_t)c->max_header_bytes;
    l->max_body_bytes = (size_t)c->max_body_bytes;
    l->output_cap = (size_t)c->output_buffer_bytes;
    l->header_timeout_ms = (uint64_t)(c->header_timeout * 1000.0);
    l->body_timeout_ms = (uint64_t)(c->body_timeout * 1000.0);
    l->keepalive_timeout_ms = (uint64_t)(c->keepalive_timeout * 1000.0);
    const char *rp = c->root_path ? c->root_path : "";
    size_t n = strlen(rp);
    if (n && (rp[0] != '/' || rp[n - 1] == '/' || strpbrk(rp, "?#%"))) {
        snprintf(err, errlen,
                 "root_path '%.200s': expected a path prefix such as /inferd (a leading '/', "
                 "no trailing '/', no query)",
                 rp);
        return IFD_EINVAL;
    }
    if (ifd_imgurl_check_list(c->allow_image_urls, err, errlen))
        return IFD_EINVAL;
    return ifd_cors_parse(&l->cors, c->allowed_origins, err, errlen);
}

static void ifd__sup_timing(const ifd_config_t *c, ifd_sup_params_t *p)
{
    p->ping_interval_s = c->worker_ping_interval;
    p->timeout_s = c->worker_timeout;
    p->start_timeout_s = c->worker_start_timeout;
    p->backoff_s = c->restart_backoff;
    p->backoff_max_s = c->restart_backoff_max;
    p->crash_loop_limit = (int)c->crash_loop_limit;
    p->crash_loop_window_s = c->crash_loop_window;
    p->crash_loop_backoff_s = c->crash_loop_backoff;
    p->crash_loop_backoff_max_s = c->crash_loop_backoff_max;
}

/* ---- supervisor callbacks ------------------------------------------------------------------ */

#ifdef IFD_TEST_HOOKS
/* Test hook $INFERD_TEST_VISION="TOKENS,BOI,EOI,IMAGE,SIZE": a worker whose
 * READY has no vision is taken to have one (SIZE² pictures, BILINEAR, no
 * pan-and-scan), so the router's image path (images.h) runs end to end
 * with a text model (test_daemon_images.py). Compiled only with
 * -DINFERD_TEST_HOOKS=ON. */
static void ifd__test_vision(ifd_wire_vision_t *v)
{
    const char *e = getenv("INFERD_TEST_VISION");
    unsigned n, size;
    int boi, eoi, img;
    if (v->tokens_per_image || !e || sscanf(e, "%u,%d,%d,%d,%u", &n, &boi, &eoi, &img, &size) != 5)
        return;
    *v = (ifd_wire_vision_t){.tokens_per_image = n,
                             .boi_id = boi,
                             .eoi_id = eoi,
                             .image_id = img,
                             .height = size,
                             .width = size,
                             .resample = 2,
                             .pas_min_crop_size = 256,
                             .pas_max_num_crops = 4,
                             .pas_min_ratio = 1.2};
    IFD_WARN("test hook $INFERD_TEST_VISION: the model takes images (%u tokens, %u px)", n, size);
}
#endif

static void ifd__on_ready(void *ctx, int w)
{
    ifd__daemon_t *d = ctx;
    /* every worker serves the one model: the last one ready says what its
     * vision takes (images.h) */
    d->api.vision = ifd_sup_worker(d->sup, w)->vision;
#ifdef IFD_TEST_HOOKS
    ifd__test_vision(&d->api.vision);
#endif
    ifd_router_on_ready(d->router, w);
    if (d->api.ready_once)
        return;
    int ready, starting, down, failed;
    ifd_sup_counts(d->sup, &ready, &starting, &down, &failed);
    if (ready < ifd_sup_n_workers(d->sup))
        return;
    d->api.ready_once = true;
    IFD_INFO("ready: serving %s with %d worker%s on %s", d->model_id, ready, ready == 1 ? "" : "s",
             d->n_lst ? d->lst[0].name : "?");
    ifd_notify("READY=1\nSTATUS=serving %s with %d worker(s)", d->model_id, ready);
}

static void ifd__on_message(void *ctx, int w, const ifd_wire_msg_t *m)
{
    ifd__daemon_t *d = ctx;
    ifd_router_on_message(d->router, w, m);
}

static void ifd__on_lost(void *ctx, int w)
{
    ifd__daemon_t *d = ctx;
    ifd_router_on_lost(d->router, w);
}

static void ifd__on_failed(void *ctx, int w)
{
    ifd__daemon_t *d = ctx;
    (void)w;
    ifd_router_on_failed(d->router);
    if (!d->api.ready_once && ifd_sup_all_failed(d->sup) && d->stage == 0) {
        IFD_ERROR("no worker could be started: giving up (see the errors above)");
        d->exit_code = 1;
        ifd__begin_shutdown(d, "no worker");
    }
}

/* The POOL step (supervisor.h): every GPU's worker reported what fits, or
 * one failed. Either ends the start-up's first loop run (ifd__start_sizing). */
static void ifd__on_pool_sizes(void *ctx, const ifd_wire_pool_size_t *sizes, int n)
{
    ifd__daemon_t *d = ctx;
    for (int i = 0; i < n && i < IFD_GPU_MAX; i++) {
        d->gpu_size[i] = sizes[i];
        snprintf(d->gpu_dev[i], sizeof d->gpu_dev[i], "%s",
                 sizes[i].device ? sizes[i].device : "?");
        d->gpu_size[i].device = d->gpu_dev[i];
    }
    d->sized = true;
    uv_stop(&d->loop);
}

static void ifd__on_pool_failed(void *ctx, int w, const char *why)
{
    ifd__daemon_t *d = ctx;
    (void)w;
    snprintf(d->size_err, sizeof d->size_err, "%s", why);
    uv_stop(&d->loop);
}

static void ifd__on_stopped(void *ctx)
{
    ifd__daemon_t *d = ctx;
    if (d->sizing) { /* interrupted while sizing: the workers are reaped */
        d->sizing_stopped = true;
        uv_stop(&d->loop);
        return;
    }
    if (d->stage == 2) {
        d->stage = 3;
        uv_timer_start(&d->step_timer, ifd__step_cb, 0, 0);
    }
}

/* ---- shutdown ------------------------------------------------------------------------------- */

static void ifd__closed_cb(uv_handle_t *h)
{
    (void)h;
}

static void ifd__step_cb(uv_timer_t *t)
{
    ifd__shutdown_step(t->data);
}

/* Closes the signal handles and timers (from the last shutdown stage or a
 * start that ends early); their close callbacks run on the next loop turn. */
static void ifd__close_handles(ifd__daemon_t *d)
{
    if (!d->handles_init)
        return;
    d->handles_init = false;
    uv_handle_t *h[] = {(uv_handle_t *)&d->sig_term,   (uv_handle_t *)&d->sig_int,
                        (uv_handle_t *)&d->sig_hup,    (uv_handle_t *)&d->grace_timer,
                        (uv_handle_t *)&d->step_timer, (uv_handle_t *)&d->sd_timer};
    for (size_t i = 0; i < sizeof h / sizeof h[0]; i++)
        uv_close(h[i], ifd__closed_cb);
    ifd_memtrim_close(&d->trim);
}

/* Runs the next shutdown stage when its condition holds. */
static void ifd__shutdown_step(ifd__daemon_t *d)
{
    if (d->stage == 1 && !d->api.gens) {
        uv_timer_stop(&d->grace_timer);
        d->stage = 2;
        IFD_INFO("shutdown: requests done, stopping the workers");
        ifd_router_stopping(d->router);
        ifd_sup_stop(d->sup, 5.0); /* on_stopped moves to stage 3 */
        return;
    }
    if (d->stage == 3) {
        d->stage = 4;
        IFD_INFO("shutdown: workers stopped, closing");
        for (int i = 0; i < d->n_lst; i++)
            ifd_listen_unlink(&d->lst[i]);
        ifd_http_server_destroy(d->http);
        d->http = NULL;
        ifd_sup_destroy(d->sup);
        d->sup = NULL;
        ifd__close_handles(d);
    }
}

#ifdef IFD_TEST_HOOKS
/* How long the test hook below blocks the loop: seven of the test's ping
 * periods (WATCHDOG_USEC=400000, a ping every 0.2 s), so the gap shows on a
 * loaded machine, and far below worker_timeout and the test's timeouts. */
#define IFD__WEDGE_MS 1500

/* Test hook $INFERD_TEST_WEDGE_LOOP=PATH (read once, in ifd__sd_start): the
 * first tick after PATH appears unlinks it, creates PATH.wedged (its mtime is
 * when the loop stopped), logs a line and blocks the loop thread for
 * IFD__WEDGE_MS, as a wedged loop would. The watchdog pings must stop for that
 * long and then resume, which proves they come from the loop and not from a
 * thread of their own (test_daemon_systemd.py::test_socket_activation_and_notify,
 * docs/reliability.md). Unset, it costs one pointer test per tick. Compiled
 * only with -DINFERD_TEST_HOOKS=ON (test builds: test.sh). */
static void ifd__test_wedge(const char *path)
{
    char mark[PATH_MAX + 8];
    snprintf(mark, sizeof mark, "%s.wedged", path);
    int fd = open(mark, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        IFD_WARN("test hook: open(%s): %s", mark, strerror(errno));
    else
        close(fd);
    IFD_WARN("test hook $INFERD_TEST_WEDGE_LOOP: blocking the loop for %d ms", IFD__WEDGE_MS);
    struct timespec left = {IFD__WEDGE_MS / 1000, (IFD__WEDGE_MS % 1000) * 1000000L};
    while (nanosleep(&left, &left) != 0 && errno == EINTR)
        ;
}
#endif

/* systemd's timers, kept from the loop itself: a loop that stops turning
 * stops the watchdog pings, and systemd restarts the service. Until every
 * worker is ready, each tick also extends the start-up timeout by one
 * worker_start_timeout (a worker that takes longer is killed by the
 * supervisor anyway), so TimeoutStartSec= need not cover model loading. */
static void ifd__sd_tick_cb(uv_timer_t *t)
{
    ifd__daemon_t *d = t->data;
#ifdef IFD_TEST_HOOKS
    if (d->wedge_path && unlink(d->wedge_path) == 0)
        ifd__test_wedge(d->wedge_path);
#endif
    if (d->watchdog_usec)
        ifd_notify("WATCHDOG=1");
    if (!d->api.ready_once && d->stage == 0)
        ifd_notify("EXTEND_TIMEOUT_USEC=%llu",
                   (unsigned long long)((d->cfg.worker_start_timeout + 30.0) * 1e6));
}

static void ifd__sd_start(ifd__daemon_t *d)
{
    uint64_t usec = 0;
#ifdef IFD_TEST_HOOKS
    const char *wedge = getenv("INFERD_TEST_WEDGE_LOOP");
    if (wedge && *wedge && !(d->wedge_path = strdup(wedge)))
        IFD_WARN("INFERD_TEST_WEDGE_LOOP: out of memory, the test hook is off");
#endif
    if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0)
        d->watchdog_usec = usec;
    /* the watchdog's half period, and at most 5 s so the start-up extension is
     * renewed well before it runs out */
    uint64_t ms = d->watchdog_usec ? d->watchdog_usec / 2000 : 5000;
    if (ms > 5000)
        ms = 5000;
    if (ms < 10)
        ms = 10;
    if (d->watchdog_usec)
        IFD_INFO("systemd watchdog: %.1f s, pinging every %.1f s", (double)usec / 1e6,
                 (double)ms / 1000.0);
    uv_timer_start(&d->sd_timer, ifd__sd_tick_cb, 0, ms);
}

static void ifd__on_idle(void *ctx)
{
    ifd__daemon_t *d = ctx;
    if (d->stage == 1) /* not from inside the callback that freed the last request */
        uv_timer_start(&d->step_timer, ifd__step_cb, 0, 0);
}

static void ifd__grace_cb(uv_timer_t *t)
{
    ifd__daemon_t *d = t->data;
    if (d->stage != 1)
        return;
    IFD_WARN("shutdown: grace period over, ending %s requests still running",
             d->api.gens ? "the" : "no");
    ifd_gen_abort_all(&d->api);
    uv_timer_start(&d->step_timer, ifd__step_cb, 0, 0);
}

static void ifd__begin_shutdown(ifd__daemon_t *d, const char *why)
{
    if (d->stage >= 1) {
        if (d->stage == 1) {
            IFD_WARN("%s again: not waiting for requests any longer", why);
            ifd_gen_abort_all(&d->api);
            uv_timer_start(&d->step_timer, ifd__step_cb, 0, 0);
        }
        return;
    }
    d->stage = 1;
    IFD_INFO("%s: draining (%lld requests in flight, grace %.1f s)", why,
             (long long)(d->api.n_running + d->api.n_tokenizing), d->cfg.shutdown_grace);
    ifd_notify("STOPPING=1\nSTATUS=draining");
    d->api.draining = true;
    ifd_http_server_drain(d->http);
    uv_timer_start(&d->grace_timer, ifd__grace_cb, (uint64_t)(d->cfg.shutdown_grace * 1000.0), 0);
    uv_timer_start(&d->step_timer, ifd__step_cb, 0, 0);
}

static void ifd__reload(ifd__daemon_t *d)
{
    IFD_INFO("SIGHUP: reopening the log and reloading the settings");
    ifd_config_t next;
    char err[512] = "";
    if (ifd_config_reload(&next, &d->cli, err, sizeof err) != 0) {
        IFD_ERROR("reload: %s (keeping the current settings)", err);
        ifd__open_log(d->cfg.log_file);
        return;
    }
    ifd_log_level_t lvl;
    if (ifd_log_parse_level(next.log_level, &lvl) != 0) {
        IFD_ERROR("reload: bad log_level '%s' (keeping the current settings)", next.log_level);
        ifd_config_free(&next);
        return;
    }
    ifd_http_limits_t lim;
    if (ifd__limits(&next, &lim, err, sizeof err) != 0) {
        IFD_ERROR("reload: %s (keeping the current settings)", err);
        ifd_config_free(&next);
        return;
    }
    ifd_apikeys_t *keys;
    if (ifd_apikeys_load(&next, &keys) != 0) { /* logged */
        IFD_ERROR("reload: keeping the current settings");
        ifd_config_free(&next);
        return;
    }
    ifd__open_log(next.log_file); /* first, so the changes below are logged there */
    ifd_log_set_level(lvl);
    ifd_config_apply_reloadable(&d->cfg, &next);
    ifd_config_free(&next);
    ifd_apikeys_destroy(d->keys);
    d->keys = keys;
    d->api.keys = keys;
    ifd_http_server_set_limits(d->http, &lim); /* next's reloadable keys are cfg's now */
    ifd_sup_params_t sp;
    memset(&sp, 0, sizeof sp);
    ifd__sup_timing(&d->cfg, &sp);
    ifd_sup_set_timing(d->sup, &sp);
    ifd_router_set_slack(d->router, (int)d->cfg.route_slack);
    ifd_sup_set_log_level(d->sup, d->cfg.log_level); /* parsed above: cannot fail on the name */
}

static void ifd__signal_cb(uv_signal_t *h, int signum)
{
    ifd__daemon_t *d = h->data;
    if (d->sizing) {
        /* the POOL step (minutes on a GPU: weights, warm-up): nothing serves
         * yet, so nothing to reload or drain. SIGTERM/SIGINT stop the sizing
         * workers (SHUTDOWN, and SIGKILL: one loading its weights reads no
         * frame) and the start ends once they are reaped (ifd__start_sizing). */
        if (signum == SIGHUP) {
            IFD_INFO("SIGHUP while sizing the KV pool: ignored (nothing to reload before serving)");
            return;
        }
        if (d->interrupted)
            return;
        d->interrupted = signum == SIGTERM ? "SIGTERM" : "SIGINT";
        IFD_INFO("%s: start-up interrupted while sizing the KV pool, stopping the workers",
                 d->interrupted);
        ifd_notify("STOPPING=1\nSTATUS=start-up interrupted");
        ifd_sup_stop(d->sup, 5.0);
        for (int i = 0; i < ifd_sup_n_workers(d->sup); i++)
            ifd_sup_kill(d->sup, i, NULL);
        return;
    }
    if (signum == SIGHUP) {
        if (d->stage == 0)
            ifd__reload(d);
        return;
    }
    ifd__begin_shutdown(d, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

/* ---- start-up ---------------------------------------------------------------------------- */

/* The model's config and tokenizer, from a GGUF file or a Hugging Face
 * directory (common/modelfile/model_source.h); the workers load the weights. */
static int ifd__load_model(ifd__daemon_t *d, char *err, size_t errlen)
{
    ifd_model_source_t *src = NULL;
    int rc;
    if (d->shape_path[0]) {
        /* random weights (common/modelfile/shape.h): the model gives the tokenizer,
         * read as the workers read it (worker/worker_model.c) */
        if ((rc = ifd_tokenizer_create_path(&d->tok, d->model_path, err, errlen)) ||
            (rc = ifd_shape_load_vocab(&d->mcfg, d->shape_path,
                                       (uint32_t)ifd_tokenizer_n_vocab(d->tok), err, errlen)))
            return rc;
    } else {
        if ((rc = ifd_model_source_open(&src, d->cfg.model, err, errlen)))
            return rc;
        d->mcfg = *ifd_model_source_config(src);
        if ((rc = ifd_tokenizer_create_source(&d->tok, src, err, errlen)))
            goto out;
    }
    ifd_chat_params_t cp = ifd_chat_default_params();
    if (d->cfg.chat_template && *d->cfg.chat_template)
        cp.name = d->cfg.chat_template;
    if ((rc = ifd_chat_template_create(&d->tpl, d->tok, &cp, err, errlen)))
        goto out;
out:
    ifd_model_source_close(src);
    return rc;
}

/* --model DIR: a Hugging Face model directory (config.json beside the
 * weights) is the model loader's to read or refuse; any other directory is
 * a mistake this names before the loader would fail on it obscurely. */
static int ifd__check_model_dir(const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return 0;
    char cfg[PATH_MAX + 16];
    snprintf(cfg, sizeof cfg, "%s/config.json", path);
    if (access(cfg, R_OK) == 0)
        return 0;
    snprintf(err, errlen,
             "model %.600s is a directory without a config.json: pass a .gguf file, or a Hugging "
             "Face model directory (config.json, tokenizer.json and *.safetensors)",
             path);
    return IFD_EINVAL;
}

static uint64_t ifd__fingerprint(const ifd__daemon_t *d)
{
    struct stat st;
    memset(&st, 0, sizeof st);
    stat(d->model_path, &st);
    struct {
        uint64_t size, mtime, ino;
        uint32_t layers, heads_kv, head_dim, vocab;
    } k = {(uint64_t)st.st_size, (uint64_t)st.st_mtime, (uint64_t)st.st_ino, d->mcfg.n_layer,
           d->mcfg.n_head_kv,    d->mcfg.head_dim,      d->mcfg.n_vocab};
    uint64_t h = XXH3_64bits(&k, sizeof k);
    h ^= XXH3_64bits(d->model_path, strlen(d->model_path));
    if (d->shape_path[0]) { /* other random weights are another model */
        h ^= XXH3_64bits(d->shape_path, strlen(d->shape_path)) * 31;
        h ^= XXH3_64bits(&d->cfg.weights_seed, sizeof d->cfg.weights_seed) * 17;
    }
    return h;
}

/* A model with sliding-window and global layers: the local layers get a
 * pool of their own (lkp), big enough for every sequence's window plus a
 * step's new tokens — the workers of a device x (max_seqs x (ceil((window
 * - 1) / bs) + 2) + ceil(max_batched_tokens / bs)) blocks, never more than
 * one pool of every layer would have — and the rest of `budget` (data bytes
 * per device: kv_budget on CPU workers, what the GPU probe found room for
 * with --gpus) goes to the global layers' pool (kp). The engine defaults
 * stand in for settings left at 0 (engine.h: 64 sequences, 256 tokens). */
static void ifd__size_local_pool(const ifd__daemon_t *d, uint64_t budget, ifd_kvpool_params_t *kp,
                                 ifd_kvpool_params_t *lkp)
{
    const uint64_t bb = ifd_kvpool_block_bytes(kp);
    const uint64_t per_g = 2 * bb * (uint64_t)kp->n_layers;
    const uint64_t per_l = 2 * bb * (uint64_t)lkp->n_layers;
    const int64_t bs = kp->block_size, w = d->mcfg.sliding_window;
    const int64_t seqs = d->cfg.max_seqs > 0 ? d->cfg.max_seqs : 64;
    const int64_t mbt = d->cfg.max_batched_tokens > 0 ? d->cfg.max_batched_tokens : 256;
    const int64_t workers = kp->n_workers / (kp->n_devices > 0 ? kp->n_devices : 1);
    int64_t need = workers * (seqs * ((w - 1 + bs - 1) / bs + 2) + (mbt + bs - 1) / bs);
    const int64_t one = (int64_t)(budget / (per_g + per_l));
    if (need > one)
        need = one > 1 ? one : 1;
    lkp->n_blocks = need;
    lkp->bytes_budget = 0;
    const uint64_t lbytes = (uint64_t)need * per_l;
    kp->n_blocks = 0; /* as many as the rest holds */
    kp->bytes_budget = budget > lbytes ? budget - lbytes : 0;
}

/* --gpus: the KV pool's blocks per device from each GPU's POOL_SIZE (the
 * POOL step: the first worker of each GPU loaded the weights and measured
 * what is left, worker/kvprobe.h): the smallest count, so every device has
 * the same geometry. Logs what each GPU reported. Returns that GPU's
 * usable bytes (what a model with sliding-window layers splits between
 * its two pools). */
static uint64_t ifd__size_gpu_pool(ifd__daemon_t *d, ifd_kvpool_params_t *kp)
{
    int64_t blocks = -1;
    uint64_t usable = 0;
    for (int i = 0; i < d->n_gpus; i++) {
        const ifd_wire_pool_size_t pr = d->gpu_size[i];
        const double mib = 1024.0 * 1024.0;
        IFD_INFO("GPU %d (%s): %.0f MiB, %.0f MiB in use after the weights (%.1f MiB), "
                 "activations (%.1f MiB) and %u decode graphs (%.1f MiB) measured, %.0f MiB "
                 "margin: %lld KV blocks fit in %.0f%% of it",
                 d->gpus[i], pr.device, (double)pr.total_bytes / mib,
                 (double)(pr.total_bytes - pr.free_bytes) / mib, (double)pr.weight_bytes / mib,
                 (double)pr.activation_bytes / mib, pr.n_graphs, (double)pr.graph_bytes / mib,
                 (double)pr.margin_bytes / mib, (long long)pr.n_blocks,
                 d->cfg.gpu_memory_fraction * 100.0);
        if (blocks < 0 || (int64_t)pr.n_blocks < blocks) {
            blocks = (int64_t)pr.n_blocks;
            usable = pr.usable_bytes;
        }
    }
    kp->n_blocks = blocks;
    kp->n_devices = d->n_gpus;
    /* Device memory: the worker of GPU i creates device i's segment through
     * its backend's provider (kernels/cuda/kvseg_cuda.h; VMM with a POSIX-fd
     * handle, IPC as the fallback) and sends the VMM fd with READY, which the
     * supervisor adopts, so the memory and its cached prefixes outlive the
     * worker. The emulator emulates the same (tests/gpu/emu/cuda_emu_vmm.cc). */
    for (int i = 0; i < d->n_gpus; i++)
        kp->kind[i] = IFD_KVSEG_CUDA_VMM;
    return usable;
}

/* Every KV pool the daemon holds, created in one place: on CPU workers the
 * host pool from kv_budget, with --gpus the device pool from the GPUs'
 * POOL_SIZE reports (d->gpu_size); with split, the local layers' pool
 * beside it (lkp; the same kind of segments), the two sized by
 * ifd__size_local_pool from kv_budget or the GPU's usable_bytes. 0, or an
 * error with its one line in err. */
static int ifd__create_pools(ifd__daemon_t *d, ifd_kvpool_params_t *kp, ifd_kvpool_params_t *lkp,
                             bool split, char *err, size_t errlen)
{
    int rc;
    const uint64_t budget = d->n_gpus ? ifd__size_gpu_pool(d, kp) : d->cfg.kv_budget;
    if (split) {
        const int n_local = lkp->n_layers;
        *lkp = *kp;
        lkp->n_layers = n_local;
        ifd__size_local_pool(d, budget, kp, lkp);
        if ((rc = ifd_kvpool_create(lkp, &d->lpool))) {
            snprintf(err, errlen, "cannot create the local layers' KV pool (%lld blocks): %s",
                     (long long)lkp->n_blocks, ifd_strerror(rc));
            return rc;
        }
    }
    if ((rc = ifd_kvpool_create(kp, &d->pool))) {
        snprintf(err, errlen, "cannot create the KV pool (%llu bytes): %s",
                 (unsigned long long)kp->bytes_budget, ifd_strerror(rc));
        return rc;
    }
    return 0;
}

static int ifd__open_listeners(ifd__daemon_t *d, char *err, size_t errlen)
{
    int rc = ifd_listen_systemd(d->lst, IFD__MAX_LISTENERS, &d->n_lst, err, errlen);
    if (rc)
        return rc;
    if (d->n_lst > 0) {
        IFD_INFO("using %d socket(s) from systemd (socket and listen settings ignored)", d->n_lst);
    } else {
        char path[512];
        if (d->cfg.socket && *d->cfg.socket)
            snprintf(path, sizeof path, "%s", d->cfg.socket);
        else if ((rc = ifd_listen_default_socket(path, sizeof path, err, errlen)))
            return rc;
        char *end;
        unsigned long mode = strtoul(d->cfg.socket_mode, &end, 8);
        if (*end || mode > 0777) {
            snprintf(err, errlen, "socket_mode '%s' is not an octal mode", d->cfg.socket_mode);
            return IFD_EINVAL;
        }
        if ((rc = ifd_listen_unix(&d->lst[0], path, (unsigned)mode, err, errlen)))
            return rc;
        d->n_lst = 1;
        if (d->cfg.listen && *d->cfg.listen) {
            if ((rc = ifd_listen_tcp(&d->lst[1], d->cfg.listen, err, errlen)))
                return rc;
            d->n_lst = 2;
        }
    }
    for (int i = 0; i < d->n_lst; i++) {
        if (d->lst[i].kind == IFD_LISTEN_TCP && !d->lst[i].loopback && !d->keys) {
            snprintf(err, errlen,
                     "refusing to listen on %s (not a loopback address) without an API key: "
                     "set api_key or api_key_file",
                     d->lst[i].name);
            return IFD_EINVAL;
        }
    }
    return 0;
}

/* spec: the wire's method (ifd_wire_spec_t: 1 off, 2 ngram, 3 draft), 0
 * for a name it does not know. */
static uint32_t ifd__spec_method(const char *s)
{
    static const char *const names[] = {"off", "ngram", "draft"};
    for (uint32_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strcmp(s, names[i]) == 0)
            return i + 1;
    return 0;
}

/* prefill_cap: "auto" → 0 (the engine's adaptive cap), "off" → -1, "N" → N
 * (worker/engine.h). 0 or IFD_EINVAL. */
static int ifd__prefill_cap_parse(const char *s, int32_t *out)
{
    if (strcmp(s, "auto") == 0) {
        *out = 0;
        return 0;
    }
    if (strcmp(s, "off") == 0) {
        *out = -1;
        return 0;
    }
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < 1 || v > (1 << 20))
        return IFD_EINVAL;
    *out = (int32_t)v;
    return 0;
}
static int ifd__validate(ifd__daemon_t *d, char *err, size_t errlen)
{
    ifd_log_level_t lvl;
    if (!d->cfg.model || !*d->cfg.model) {
        snprintf(err, errlen, "no model: pass --model PATH (or \"model\" in the config file)");
        return IFD_EINVAL;
    }
    d->backend = "cpu";
    if (d->cfg.gpus && *d->cfg.gpus) {
        int rc = ifd_gpu_parse_list(d->cfg.gpus, d->gpus, IFD_GPU_MAX, &d->n_gpus, err, errlen);
        if (rc)
            return rc;
        if (strcmp(d->cfg.gpu_dtype, "bf16") != 0 && strcmp(d->cfg.gpu_dtype, "f32") != 0) {
            snprintf(err, errlen, "gpu_dtype '%s': expected bf16 or f32", d->cfg.gpu_dtype);
            return IFD_EINVAL;
        }
        d->backend = strcmp(d->cfg.gpu_dtype, "f32") == 0 ? "cuda-f32" : "cuda";
        if (d->cfg.workers != 1)
            IFD_WARN("workers=%lld ignored: --gpus starts one worker per GPU",
                     (long long)d->cfg.workers);
    }
    if (d->cfg.workers < 1) {
        snprintf(err, errlen, "workers must be at least 1");
        return IFD_EINVAL;
    }
    if (ifd_log_parse_level(d->cfg.log_level, &lvl) != 0) {
        snprintf(err, errlen, "log_level '%s': expected error, warn, info or debug",
                 d->cfg.log_level);
        return IFD_EINVAL;
    }
    ifd_kv_dtype_t dt;
    if (ifd_kv_dtype_parse(d->cfg.kv_dtype, &dt) != 0) {
        snprintf(err, errlen, "kv_dtype '%s': expected f32, f16, bf16, q8_0, q4_0 or fp8",
                 d->cfg.kv_dtype);
        return IFD_EINVAL;
    }
    if (d->n_gpus && ifd_kv_dtype_quantized(dt) && !ifd_kv_dtype_gpu(dt)) {
        snprintf(err, errlen,
                 "kv_dtype '%s' is CPU only: with gpus the KV cache is f16, bf16, q8_0 or fp8",
                 d->cfg.kv_dtype);
        return IFD_EINVAL;
    }
    if (strcmp(d->cfg.weights_dtype, "auto") != 0 && strcmp(d->cfg.weights_dtype, "f32") != 0) {
        snprintf(err, errlen, "weights_dtype '%s': expected auto or f32", d->cfg.weights_dtype);
        return IFD_EINVAL;
    }
    ifd_http_limits_t lim;
    if (ifd__limits(&d->cfg, &lim, err, errlen))
        return IFD_EINVAL;
    int32_t cap;
    if (ifd__prefill_cap_parse(d->cfg.prefill_cap, &cap) != 0) {
        snprintf(err, errlen, "prefill_cap '%s': expected auto, off or a number 1..1048576",
                 d->cfg.prefill_cap);
        return IFD_EINVAL;
    }
    if (ifd__spec_method(d->cfg.spec) == 0) {
        snprintf(err, errlen, "spec '%s': expected off, ngram or draft", d->cfg.spec);
        return IFD_EINVAL;
    }
    const bool draft = d->cfg.draft_model && *d->cfg.draft_model;
    if (ifd__spec_method(d->cfg.spec) == 3 && !draft) {
        snprintf(err, errlen, "spec draft needs a draft model: pass --draft-model PATH");
        return IFD_EINVAL;
    }
    if (d->cfg.draft_step_tokens > 0 && !draft) {
        snprintf(err, errlen,
                 "draft_step_tokens %lld needs a draft model: pass --draft-model PATH, or "
                 "leave draft_step_tokens at 0",
                 (long long)d->cfg.draft_step_tokens);
        return IFD_EINVAL;
    }
    if (d->cfg.spec_ngram_min > d->cfg.spec_ngram_max) {
        snprintf(err, errlen, "spec_ngram_min %lld is above spec_ngram_max %lld",
                 (long long)d->cfg.spec_ngram_min, (long long)d->cfg.spec_ngram_max);
        return IFD_EINVAL;
    }
    return 0;
}

/* The start-up's phases below return 0, a negative code with its one line
 * in err (or none: ifd_strerror(rc) says it), or IFD__START_QUIET: failed,
 * and already logged — or a start interrupted by SIGTERM/SIGINT, which
 * exits 0 (ifd__start_failed). */
#define IFD__START_QUIET 1

/* Settings: checked, then the log level and log_file. */
static int ifd__start_settings(ifd__daemon_t *d, char *err, size_t errlen)
{
    int rc = ifd__validate(d, err, errlen);
    if (rc)
        return rc;
    ifd_log_level_t lvl;
    ifd_log_parse_level(d->cfg.log_level, &lvl);
    ifd_log_set_level(lvl);
    return ifd__open_log(d->cfg.log_file) ? IFD__START_QUIET : 0;
}

/* The id /v1/models shows: model_name, else "random-<shape>" for random
 * weights, else the model's file name without ".gguf". */
static void ifd__model_id(ifd__daemon_t *d)
{
    if (d->cfg.model_name && *d->cfg.model_name) {
        snprintf(d->model_id, sizeof d->model_id, "%s", d->cfg.model_name);
    } else if (d->shape_path[0]) { /* "random-llama-3.2-3b" */
        const char *b = strrchr(d->shape_path, '/');
        snprintf(d->model_id, sizeof d->model_id, "random-%.200s", b ? b + 1 : d->shape_path);
        size_t l = strlen(d->model_id);
        if (l > 5 && !strcmp(d->model_id + l - 5, ".json"))
            d->model_id[l - 5] = '\0';
    } else {
        const char *b = strrchr(d->model_path, '/');
        snprintf(d->model_id, sizeof d->model_id, "%.*s", (int)sizeof d->model_id - 1,
                 b ? b + 1 : d->model_path);
        size_t l = strlen(d->model_id);
        if (l > 5 && !strcmp(d->model_id + l - 5, ".gguf"))
            d->model_id[l - 5] = '\0';
    }
}

/* The model: its paths resolved, its config and tokenizer read (no
 * weights: the workers load them), its id, and the worker program. */
static int ifd__start_model(ifd__daemon_t *d, char *err, size_t errlen)
{
    int rc;
    if (!realpath(d->cfg.model, d->model_path)) {
        snprintf(err, errlen, "model %s: %s", d->cfg.model, strerror(errno));
        return -errno;
    }
    if (!(d->cfg.random_weights && *d->cfg.random_weights) &&
        (rc = ifd__check_model_dir(d->model_path, err, errlen)))
        return rc;
    if (d->cfg.random_weights && *d->cfg.random_weights &&
        !realpath(d->cfg.random_weights, d->shape_path)) {
        snprintf(err, errlen, "random_weights %s: %s", d->cfg.random_weights, strerror(errno));
        return -errno;
    }
    if (d->cfg.draft_model && *d->cfg.draft_model && !realpath(d->cfg.draft_model, d->draft_path)) {
        snprintf(err, errlen, "draft_model %s: %s", d->cfg.draft_model, strerror(errno));
        return -errno;
    }
    if (d->cfg.mmproj && *d->cfg.mmproj && !realpath(d->cfg.mmproj, d->mmproj_path)) {
        snprintf(err, errlen, "mmproj %s: %s", d->cfg.mmproj, strerror(errno));
        return -errno;
    }
    if ((rc = ifd__load_model(d, err, errlen)))
        return rc;
    ifd__model_id(d);
    ifd__find_worker(&d->cfg, d->worker_bin, sizeof d->worker_bin);
    return 0;
}

/* The KV pool's parameters: one host segment shared by every CPU worker,
 * or one device segment per GPU; a model with sliding-window and global
 * layers keeps the local layers in a second pool (lkp, the same kind of
 * segments). Returns whether the model is split so. */
static bool ifd__pool_params(const ifd__daemon_t *d, ifd_kvpool_params_t *kp,
                             ifd_kvpool_params_t *lkp)
{
    const bool split = ifd_kvpool_model_params_split(&d->mcfg, kp, lkp);
    if (!split)
        *kp = ifd_kvpool_model_params(&d->mcfg);     /* every layer in one pool */
    ifd_kv_dtype_parse(d->cfg.kv_dtype, &kp->dtype); /* checked with the other settings */
    kp->block_size = (int)d->cfg.block_size;
    kp->bytes_budget = d->cfg.kv_budget;
    kp->n_devices = 1;
    kp->n_workers = d->n_gpus ? d->n_gpus : (int)d->cfg.workers;
    kp->fingerprint = ifd__fingerprint(d);
    return split;
}

/* The supervisor's parameters from the settings and the pool's geometry
 * (kv.n_blocks stays 0 until the pool exists). */
static void ifd__sup_params(ifd__daemon_t *d, const ifd_kvpool_params_t *kp, ifd_sup_params_t *sp)
{
    memset(sp, 0, sizeof *sp);
    sp->worker_binary = d->worker_bin;
    sp->model_path = d->model_path;
    sp->log_level = d->cfg.log_level;
    sp->weights_dtype = d->cfg.weights_dtype;
    sp->n_workers = d->n_gpus ? d->n_gpus : (int)d->cfg.workers;
    sp->backend = d->backend;
    sp->gpus = d->n_gpus ? d->gpus : NULL;
    sp->random_weights = d->shape_path[0] ? d->shape_path : NULL;
    sp->weights_seed = (uint64_t)d->cfg.weights_seed;
    sp->kv_cache_dir = d->cfg.kv_cache_dir;
    sp->kv_cache_disk_bytes = d->cfg.kv_cache_disk_bytes;
    sp->kv_cache_host_bytes = d->cfg.kv_cache_host_bytes;
    /* the worker's default (32) is not passed: its command line stays as before */
    sp->kv_cache_pin_slots = d->cfg.kv_cache_pin_slots == 32 ? -1 : (int32_t)d->cfg.kv_cache_pin_slots;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    sp->n_threads = d->cfg.threads > 0 ? (int)d->cfg.threads
                                       : (int)(ncpu / sp->n_workers > 0 ? ncpu / sp->n_workers : 1);
    sp->max_seqs = (uint32_t)d->cfg.max_seqs;
    sp->max_batched_tokens = (uint32_t)d->cfg.max_batched_tokens;
    (void)ifd__prefill_cap_parse(d->cfg.prefill_cap, &sp->prefill_cap); /* checked at config */
    sp->spec = (ifd_wire_spec_t){ifd__spec_method(d->cfg.spec), (uint32_t)d->cfg.spec_tokens,
                                 (uint32_t)d->cfg.spec_ngram_min, (uint32_t)d->cfg.spec_ngram_max};
    sp->draft_model_path = d->draft_path[0] ? d->draft_path : NULL;
    sp->draft_step_tokens = (uint32_t)d->cfg.draft_step_tokens;
    sp->mmproj_path = d->mmproj_path[0] ? d->mmproj_path : NULL;
    sp->image_cache_mb = (uint32_t)d->cfg.image_cache_mb;
    sp->vision_step_ms = (uint32_t)d->cfg.vision_step_ms;
    /* read at start: a reload does not reach the workers' warm-up */
    sp->max_logprobs = d->cfg.max_logprobs;
    sp->kv.n_layers = (uint32_t)kp->n_layers;
    sp->kv.n_kv_heads = (uint32_t)kp->n_kv_heads;
    sp->kv.head_dim = (uint32_t)kp->head_dim;
    sp->kv.dtype = (uint32_t)kp->dtype;
    sp->kv.block_size = (uint32_t)kp->block_size;
    sp->kv.n_blocks = 0; /* the pool's, once it exists */
    sp->kv.fingerprint = kp->fingerprint;
    sp->size_pool = d->n_gpus > 0;
    sp->gpu_memory_fraction = d->cfg.gpu_memory_fraction;
    sp->max_model_len = d->cfg.max_model_len > 0 ? (uint32_t)d->cfg.max_model_len : 0;
    ifd__sup_timing(&d->cfg, sp);
}

/* The loop, the metrics and the workers' supervisor (nothing spawned yet).
 * The supervisor exists before the pool: with --gpus the first worker of
 * each GPU is what sizes it (the POOL step, supervisor.h). */
static int ifd__start_supervisor(ifd__daemon_t *d, const ifd_kvpool_params_t *kp,
                                 ifd_sup_params_t *sp, char *err, size_t errlen)
{
    int rc = uv_loop_init(&d->loop);
    if (rc) {
        snprintf(err, errlen, "uv_loop_init: %s", uv_strerror(rc));
        return rc;
    }
    d->loop_init = true;
    ifd_metrics_init(&d->metrics);
    ifd__sup_params(d, kp, sp);
    ifd_sup_callbacks_t scb = {d,
                               ifd__on_ready,
                               ifd__on_message,
                               ifd__on_lost,
                               ifd__on_failed,
                               ifd__on_stopped,
                               ifd__on_pool_sizes,
                               ifd__on_pool_failed};
    return ifd_sup_create(&d->sup, &d->loop, sp, &scb, &d->metrics);
}

/* Signals and systemd's timers, from before the POOL step: that can take
 * minutes (a SIGTERM then is a clean stop, and the start-up timeout is
 * extended meanwhile). Closed by ifd__close_handles. */
static void ifd__start_handles(ifd__daemon_t *d)
{
    uv_signal_init(&d->loop, &d->sig_term);
    uv_signal_init(&d->loop, &d->sig_int);
    uv_signal_init(&d->loop, &d->sig_hup);
    d->sig_term.data = d->sig_int.data = d->sig_hup.data = d;
    uv_signal_start(&d->sig_term, ifd__signal_cb, SIGTERM);
    uv_signal_start(&d->sig_int, ifd__signal_cb, SIGINT);
    uv_signal_start(&d->sig_hup, ifd__signal_cb, SIGHUP);
    uv_timer_init(&d->loop, &d->grace_timer);
    uv_timer_init(&d->loop, &d->step_timer);
    uv_timer_init(&d->loop, &d->sd_timer);
    d->grace_timer.data = d->step_timer.data = d->sd_timer.data = d;
    if (ifd_memtrim_init(&d->trim, &d->loop)) /* only the trimming is lost */
        IFD_WARN("memtrim: its timer could not start: freed memory stays in the heap");
    d->handles_init = true;
    ifd__sd_start(d);
}

/* --gpus, the POOL step: this loop run ends when every GPU reported (or one
 * failed, with its one line), or a SIGTERM/SIGINT's stop reaped the
 * workers; nothing else runs on the loop yet. An interrupted start is
 * IFD__START_QUIET (a normal stop: exit 0, as after serving). */
static int ifd__start_sizing(ifd__daemon_t *d, char *err, size_t errlen)
{
    d->sizing = true;
    ifd_sup_start(d->sup);
    uv_run(&d->loop, UV_RUN_DEFAULT);
    while (d->interrupted && !d->sizing_stopped) /* sized or failed meanwhile */
        uv_run(&d->loop, UV_RUN_DEFAULT);
    d->sizing = false;
    if (d->interrupted)
        return IFD__START_QUIET;
    if (!d->sized) {
        snprintf(err, errlen, "%s", d->size_err[0] ? d->size_err : "sizing the KV pool failed");
        return IFD_ENODEV;
    }
    return 0;
}

/* The pools, created and handed to the supervisor (with --gpus that sends
 * each waiting worker its POOL frame); *mml: the context the API allows,
 * the model's cut to max_model_len and to what the pool holds. */
static int ifd__start_pools(ifd__daemon_t *d, ifd_kvpool_params_t *kp, ifd_kvpool_params_t *lkp,
                            bool split, ifd_sup_params_t *sp, int64_t *mml, char *err,
                            size_t errlen)
{
    int rc;
    if ((rc = ifd__create_pools(d, kp, lkp, split, err, errlen)))
        return rc;
    ifd_kvpool_params_t geo;
    ifd_kvpool_geometry(d->pool, &geo);
    sp->kv.n_blocks = (uint64_t)geo.n_blocks;
    if ((rc = ifd_sup_set_pool(d->sup, d->pool, d->lpool, &sp->kv))) {
        snprintf(err, errlen, "handing the KV pool to the workers: %s", ifd_strerror(rc));
        return rc;
    }
    int64_t pool_tokens = geo.n_blocks * geo.block_size;
    *mml = d->mcfg.n_ctx_train;
    if (d->cfg.max_model_len > 0 && d->cfg.max_model_len < *mml)
        *mml = d->cfg.max_model_len;
    if (pool_tokens < *mml) {
        IFD_WARN("the KV pool holds %lld tokens: limiting the context to that (raise kv_budget "
                 "for the model's %u)",
                 (long long)pool_tokens, d->mcfg.n_ctx_train);
        *mml = pool_tokens;
    }
    IFD_INFO("model %s (%s, %u layers, context %lld), KV pool %lld blocks of %d tokens (%s)%s",
             d->model_id, d->mcfg.arch_name, d->mcfg.n_layer, (long long)*mml,
             (long long)geo.n_blocks, geo.block_size, d->cfg.kv_dtype, d->n_gpus ? " per GPU" : "");
    if (d->lpool)
        IFD_INFO("its %d sliding-window layers keep their K/V in a pool of their own: %lld "
                 "blocks (window %u; the pool above holds the %d global layers)",
                 lkp->n_layers, (long long)lkp->n_blocks, d->mcfg.sliding_window, kp->n_layers);
    return 0;
}

/* The API key, the listeners and the HTTP server listening on them. */
static int ifd__start_http(ifd__daemon_t *d, char *err, size_t errlen)
{
    int rc;
    if (ifd_apikeys_load(&d->cfg, &d->keys)) /* logged */
        return IFD__START_QUIET;
    d->api.keys = d->keys;
    if ((rc = ifd__open_listeners(d, err, errlen)))
        return rc;
    ifd_http_limits_t lim;
    if ((rc = ifd__limits(&d->cfg, &lim, err, errlen)))
        return rc;
    ifd_http_handler_t hh = {&d->api, ifd_api_on_request, ifd_api_load_report};
    if ((rc = ifd_http_server_create(&d->http, &d->loop, &lim, &hh, &d->metrics)))
        return rc;
    for (int i = 0; i < d->n_lst; i++) {
        if ((rc = ifd_http_server_listen(d->http, &d->lst[i]))) {
            snprintf(err, errlen, "cannot listen on %s", d->lst[i].name);
            return rc;
        }
        IFD_INFO("listening on %s%s", d->lst[i].name,
                 d->lst[i].kind == IFD_LISTEN_TCP && d->keys ? " (API key required)" : "");
    }
    return 0;
}

/* The router, reaching the workers through the supervisor, and the API
 * wired to everything it serves from (mml: the context it allows). */
static int ifd__start_router(ifd__daemon_t *d, int64_t mml)
{
    const ifd_token_t *eog;
    size_t n_eog = ifd_tokenizer_eog_ids(d->tok, &eog);
    ifd_router_params_t rp = {.pool = d->pool,
                              .transport = ifd_sup_transport(d->sup),
                              .metrics = &d->metrics,
                              .eog_ids = eog,
                              .n_eog_ids = (uint32_t)n_eog,
                              .route_slack = (int)d->cfg.route_slack,
                              .local_pool = d->lpool,
                              .sliding_window = d->lpool ? (int)d->mcfg.sliding_window : 0};
    int rc = ifd_router_create(&d->router, &rp);
    if (rc)
        return rc;
    ifd_api_t *api = &d->api;
    api->loop = &d->loop;
    api->cfg = &d->cfg;
    api->tok = d->tok;
    api->tpl = d->tpl;
    api->router = d->router;
    api->sup = d->sup;
    api->pool = d->pool;
    api->local_pool = d->lpool;
    api->metrics = &d->metrics;
    api->http = d->http;
    api->model_id = d->model_id;
    api->model_path = d->model_path;
    api->mcfg = &d->mcfg;
    api->max_model_len = mml;
    ifd_metrics_set_max_model_len(&d->metrics, mml); /* vLLM's token buckets */
    api->n_vocab = ifd_tokenizer_n_vocab(d->tok);
    api->created = (int64_t)time(NULL);
    api->start_ns = uv_hrtime();
    if (ifd_ids_seed(&api->rng)) /* logged */
        return IFD__START_QUIET;
    api->on_idle = ifd__on_idle;
    api->idle_ctx = d;
    if (ifd_gcache_create(&api->grammars, (size_t)d->cfg.grammar_cache_bytes)) {
        IFD_ERROR("out of memory for the grammar cache");
        return IFD_ENOMEM;
    }
    api->trim = &d->trim;
    return 0;
}

/* The workers: CPU workers spawned now; GPU ones started before the pool
 * (they sized it) and attach to it now. */
static void ifd__start_workers(ifd__daemon_t *d, const ifd_sup_params_t *sp)
{
    if (d->n_gpus) {
        IFD_INFO("%d GPU worker%s (%s, backend %s) attaching the KV pool", sp->n_workers,
                 sp->n_workers == 1 ? "" : "s", d->worker_bin, d->backend);
    } else {
        IFD_INFO("starting %d worker%s (%s, %d threads each)", sp->n_workers,
                 sp->n_workers == 1 ? "" : "s", d->worker_bin, sp->n_threads);
        ifd_sup_start(d->sup);
    }
}

/* A start that failed at rc (err: its line, or empty): logs it unless
 * IFD__START_QUIET, undoes what the phases made (workers started before
 * the pool are killed) and returns the exit code: 0 for an interrupted
 * start, else 1. */
static int ifd__start_failed(ifd__daemon_t *d, int rc, const char *err)
{
    if (rc != IFD__START_QUIET)
        IFD_ERROR("%s", err[0] ? err : ifd_strerror(rc));
    for (int i = 0; i < d->n_lst; i++)
        ifd_listen_unlink(&d->lst[i]);
    if (d->sup) { /* workers started before the pool (or none yet): kill them, free it */
        ifd_sup_destroy(d->sup);
        d->sup = NULL;
    }
    ifd__close_handles(d);
    if (d->loop_init) {
        uv_run(&d->loop, UV_RUN_NOWAIT); /* the close callbacks (the supervisor's free it) */
        (void)uv_loop_close(&d->loop);   /* UV_EBUSY (kept) while other handles are on it */
    }
    return d->interrupted ? 0 : 1;
}

/* Start-up phase by phase (the file's opening comment), then the loop until
 * the shutdown closed every handle. Returns the exit code. */
static int ifd__run(ifd__daemon_t *d)
{
    char err[1024] = "";
    ifd_kvpool_params_t kp, lkp;
    ifd_sup_params_t sp;
    int64_t mml = 0;
    int rc;
    if ((rc = ifd__start_settings(d, err, sizeof err)) ||
        (rc = ifd__start_model(d, err, sizeof err)))
        return ifd__start_failed(d, rc, err);
    const bool split = ifd__pool_params(d, &kp, &lkp);
    if ((rc = ifd__start_supervisor(d, &kp, &sp, err, sizeof err)))
        return ifd__start_failed(d, rc, err);
    ifd__start_handles(d);
    if ((d->n_gpus && (rc = ifd__start_sizing(d, err, sizeof err))) ||
        (rc = ifd__start_pools(d, &kp, &lkp, split, &sp, &mml, err, sizeof err)) ||
        (rc = ifd__start_http(d, err, sizeof err)) || (rc = ifd__start_router(d, mml)))
        return ifd__start_failed(d, rc, err);
    ifd__start_workers(d, &sp);
    uv_run(&d->loop, UV_RUN_DEFAULT);
    d->ran = true;
    IFD_INFO("stopped");
    return d->exit_code;
}

int main(int argc, char **argv)
{
    ifd_memtrim_setup(); /* before anything allocates */
    ifd__daemon_t *d = calloc(1, sizeof *d);
    if (!d) {
        fprintf(stderr, "inferd: out of memory\n");
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    ifd_log_set_tag("inferd");
    char err[1024] = "";
    if (ifd_config_from_args(&d->cfg, &d->cli, argc, argv, err, sizeof err) != 0) {
        fprintf(stderr, "inferd: %s\n", err);
        free(d);
        return 2;
    }
    int code = 0;
    if (d->cli.help) {
        ifd_config_usage(stdout);
    } else if (d->cli.version) {
        printf("inferd %s\n", IFD_VERSION);
    } else if (d->cli.inspect) {
        code = ifd_inspect_file(stdout, stderr, d->cli.inspect, d->cli.json) == 0 ? 0 : 1;
    } else if (d->cli.print_config) {
        code = ifd_config_print_json(&d->cfg, stdout) ? 1 : 0;
    } else if (ifd_imgurl_global_init()) { /* before any thread */
        fprintf(stderr, "inferd: curl_global_init failed\n");
        code = 1;
    } else {
        code = ifd__run(d);
        if (d->ran) { /* every handle is closed; a failed start leaves the loop as it is */
            if (uv_loop_close(&d->loop) != 0)
                IFD_WARN("handles left open at exit");
            ifd_router_destroy(d->router);
        }
        ifd_api_close(&d->api);
        ifd_apikeys_destroy(d->keys);
        /* plain memory, no handle refers to it once the loop is not running */
        ifd_kvpool_destroy(d->pool);
        ifd_kvpool_destroy(d->lpool);
        ifd_chat_template_destroy(d->tpl);
        ifd_tokenizer_destroy(d->tok);
        ifd_imgurl_global_cleanup();
    }
    ifd_config_free(&d->cfg);
    ifd_config_cli_free(&d->cli);
    free(d->wedge_path);
    free(d);
    return code;
}
