/*
 * cli.c — connection options, error explanations and the blocking
 * completion request shared by the `infer` commands (see cli.h).
 */
#include "cli.h"

#include "error.h"

#include <errno.h>
#include <grp.h>
#include <math.h>
#include <stdint.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

volatile sig_atomic_t ifd_cli_interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    ifd_cli_interrupted = 1;
}

void ifd_cli_catch_sigint(bool on)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on ? on_sigint : SIG_DFL;
    sa.sa_flags = 0; /* no SA_RESTART: poll() and read() return EINTR */
    ifd_cli_interrupted = 0;
    sigaction(SIGINT, &sa, NULL);
}

const char ifd_cli_conn_help[] =
    "Connection:\n"
    "  --socket PATH    the daemon's Unix socket (default: $INFERD_SOCKET, else\n"
    "                   /run/inferd/inferd.sock as root, $XDG_RUNTIME_DIR/inferd.sock\n"
    "                   otherwise, falling back to the system socket)\n"
    "  --url URL        talk HTTP over TCP instead: http://HOST:PORT (an OpenAI base\n"
    "                   URL ending in /v1 works too)\n"
    "  --api-key KEY    Bearer token for --url (default: $INFERD_API_KEY)\n"
    "  --timeout SECS   give up after SECS without any progress (default 600)\n";

const char ifd_cli_sampling_help[] =
    "Sampling:\n"
    "  -m, --model NAME        the model to ask (default: the daemon's one model)\n"
    "  -n, --max-tokens N      generate at most N tokens (default: up to the context)\n"
    "  -t, --temperature T     0 = greedy, up to 2 (default: the daemon's, 1)\n"
    "      --top-p P           nucleus sampling mass, 0..1 (default 1)\n"
    "      --seed N            seed the sampler: the same seed gives the same answer\n"
    "      --no-cache          use_cache=false: recompute every step (slow; for\n"
    "                          comparisons)\n"
    "      --ignore-eos        keep generating past the end-of-text token (up to -n)\n";

/* Handles getopt code c if it is a sampling option: 1 consumed, 0 not
 * ours, -1 bad value (message printed). */
static int sampling_opt(ifd_cli_api_params_t *p, int c, const char *arg)
{
    long long v;
    double d;
    switch (c) {
    case 'm':
        p->model = arg;
        return 1;
    case 'n':
        if (ifd_cli_parse_int(arg, 1, INT32_MAX, &v) < 0) {
            fprintf(stderr, "infer: --max-tokens wants a positive integer, not '%s'\n", arg);
            return -1;
        }
        p->max_tokens = v;
        return 1;
    case 't':
        if (ifd_cli_parse_double(arg, 0, 2, &d) < 0) {
            fprintf(stderr, "infer: --temperature wants a number in [0, 2], not '%s'\n", arg);
            return -1;
        }
        p->temperature = d;
        return 1;
    case IFD_CLI_OPT_TOP_P:
        if (ifd_cli_parse_double(arg, 0, 1, &d) < 0) {
            fprintf(stderr, "infer: --top-p wants a number in [0, 1], not '%s'\n", arg);
            return -1;
        }
        p->top_p = d;
        return 1;
    case IFD_CLI_OPT_SEED:
        if (ifd_cli_parse_int(arg, INT64_MIN, INT64_MAX, &v) < 0) {
            fprintf(stderr, "infer: --seed wants an integer, not '%s'\n", arg);
            return -1;
        }
        p->has_seed = true;
        p->seed = v;
        return 1;
    case IFD_CLI_OPT_NO_CACHE:
        p->use_cache = 0;
        return 1;
    case IFD_CLI_OPT_IGNORE_EOS:
        p->ignore_eos = true;
        return 1;
    default:
        return 0;
    }
}

void ifd_cli_conn_defaults(ifd_cli_conn_t *o)
{
    memset(o, 0, sizeof(*o));
    o->timeout_s = 600;
}

int ifd_cli_parse_double(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int ifd_cli_parse_int(const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* Handles getopt code c if it is a connection option: 1 consumed, 0 not
 * ours, -1 bad value (message printed). */
static int conn_opt(ifd_cli_conn_t *o, int c, const char *arg)
{
    long long v;
    switch (c) {
    case IFD_CLI_OPT_SOCKET:
        o->socket = arg;
        return 1;
    case IFD_CLI_OPT_URL:
        o->url = arg;
        return 1;
    case IFD_CLI_OPT_API_KEY:
        o->api_key = arg;
        return 1;
    case IFD_CLI_OPT_TIMEOUT:
        if (ifd_cli_parse_int(arg, 1, 86400 * 7, &v) < 0) {
            fprintf(stderr, "infer: --timeout wants seconds (1 or more), not '%s'\n", arg);
            return -1;
        }
        o->timeout_s = (int)v;
        return 1;
    default:
        return 0;
    }
}

int ifd_cli_getopt(int argc, char **argv, const char *shortopts, const struct option *opts,
                   ifd_cli_conn_t *co, ifd_cli_api_params_t *p)
{
    int c, rc;
    while ((c = getopt_long(argc, argv, shortopts, opts, NULL)) != -1) {
        if ((p && (rc = sampling_opt(p, c, optarg)) != 0) || (rc = conn_opt(co, c, optarg)) != 0) {
            if (rc < 0)
                return IFD_CLI_OPT_BAD;
            continue;
        }
        return c;
    }
    return -1;
}

int ifd_cli_usage_hint(const char *cmd)
{
    fprintf(stderr, "Try 'infer %s --help'.\n", cmd);
    return IFD_CLI_EXIT_USAGE;
}

int ifd_cli_no_operands(const char *cmd, int argc, char **argv)
{
    if (optind == argc)
        return 0;
    fprintf(stderr, "infer %s: unexpected argument '%s'\n", cmd, argv[optind]);
    return IFD_CLI_EXIT_USAGE;
}

int ifd_cli_target(const ifd_cli_conn_t *o, ifd_cli_http_target_t *t)
{
    const char *key = o->api_key ? o->api_key : getenv("INFERD_API_KEY");
    if (o->url) {
        char err[256];
        if (ifd_cli_http_target_url(t, o->url, err, sizeof(err)) < 0) {
            fprintf(stderr, "infer: --url: %s\n", err);
            return IFD_CLI_EXIT_USAGE;
        }
    } else {
        char def[sizeof(t->path) + 64];
        const char *path = o->socket;
        if (!path || !path[0])
            path = getenv("INFERD_SOCKET");
        if (!path || !path[0]) {
            ifd_cli_http_default_socket(def, sizeof(def));
            path = def;
        }
        if (ifd_cli_http_target_unix(t, path) < 0) {
            fprintf(stderr, "infer: socket path too long: %s\n", path);
            return IFD_CLI_EXIT_USAGE;
        }
    }
    if (key && strlen(key) >= sizeof(t->api_key)) {
        fprintf(stderr, "infer: API key too long\n");
        return IFD_CLI_EXIT_USAGE;
    }
    if (key)
        snprintf(t->api_key, sizeof(t->api_key), "%s", key);
    return 0;
}

static const char start_hint[] =
    "start it with `inferd --model MODEL.gguf` or `systemctl start inferd`\n"
    "infer: (or point infer at a running daemon with --socket PATH or $INFERD_SOCKET)";

int ifd_cli_report(const ifd_cli_http_target_t *t, int err)
{
    const char *w = t->where;
    struct stat st;
    switch (err) {
    case -ENOENT:
        fprintf(stderr, "infer: no inferd at %s — %s\n", w, start_hint);
        return IFD_CLI_EXIT_UNREACHABLE;
    case -ECONNREFUSED:
        if (t->tcp)
            fprintf(stderr,
                    "infer: nothing listening at %s — is inferd running with --listen "
                    "HOST:PORT?\n",
                    w);
        else
            fprintf(stderr,
                    "infer: no inferd at %s (the socket file is there but nothing listens: "
                    "the daemon is not running) — %s\n",
                    w, start_hint);
        return IFD_CLI_EXIT_UNREACHABLE;
    case -EACCES:
    case -EPERM:
        if (!t->tcp && stat(t->path, &st) == 0) {
            struct passwd *pw = getpwuid(st.st_uid);
            struct group *gr = getgrgid(st.st_gid);
            fprintf(stderr,
                    "infer: permission denied on %s (mode %04o, owner %s, group %s) — run infer "
                    "as a member of group '%s' (e.g. `sudo usermod -aG %s $USER`, then log in "
                    "again)\n",
                    w, (unsigned)(st.st_mode & 07777), pw ? pw->pw_name : "?",
                    gr ? gr->gr_name : "?", gr ? gr->gr_name : "?", gr ? gr->gr_name : "?");
        } else {
            fprintf(stderr,
                    "infer: permission denied on %s — run infer as a user the daemon's socket "
                    "allows (its group)\n",
                    w);
        }
        return IFD_CLI_EXIT_UNREACHABLE;
    case -ENOTSOCK:
    case -ENOTDIR:
        fprintf(stderr, "infer: %s is not a socket — %s\n", w, start_hint);
        return IFD_CLI_EXIT_UNREACHABLE;
    case -ENETUNREACH:
    case -EHOSTUNREACH:
    case -ETIMEDOUT:
        fprintf(stderr, "infer: cannot reach %s: %s\n", w, ifd_strerror(err));
        return IFD_CLI_EXIT_UNREACHABLE;
    case IFD_ETIMEDOUT:
        fprintf(stderr, "infer: no answer from inferd at %s in time (see --timeout)\n", w);
        return IFD_CLI_EXIT_UNREACHABLE;
    case IFD_ECLOSED:
    case -ECONNRESET:
    case -EPIPE:
        fprintf(stderr,
                "infer: inferd at %s closed the connection before the answer was complete "
                "(did it stop or restart? see its log)\n",
                w);
        return IFD_CLI_EXIT_SERVER;
    case IFD_EFORMAT:
        fprintf(stderr, "infer: malformed response from %s — is that inferd?\n", w);
        return IFD_CLI_EXIT_SERVER;
    case IFD_ENOMEM:
        fprintf(stderr, "infer: out of memory\n");
        return IFD_CLI_EXIT_FAIL;
    default:
        fprintf(stderr, "infer: talking to %s: %s\n", w, ifd_strerror(err));
        return IFD_CLI_EXIT_SERVER;
    }
}

int ifd_cli_report_http_error(const ifd_cli_http_target_t *t, int status, const char *body,
                              size_t len, const char *retry_after)
{
    char msg[512];
    ifd_cli_api_error_message(body, len, msg, sizeof(msg));
    fprintf(stderr, "infer: inferd answered HTTP %d: %s\n", status, msg[0] ? msg : "(no message)");
    if (status == 401)
        fprintf(stderr, "infer: %s wants an API key: pass --api-key KEY or set $INFERD_API_KEY\n",
                t->where);
    else if ((status == 503 || status == 429) && retry_after && retry_after[0])
        fprintf(stderr, "infer: the daemon is busy; retry after %s s\n", retry_after);
    return status >= 400 && status < 500 ? IFD_CLI_EXIT_REJECTED : IFD_CLI_EXIT_SERVER;
}

/* ---- the streaming request ------------------------------------------------------------------- */

typedef struct {
    ifd_cli_http_conn_t conn;
    ifd_cli_api_reader_t *r;
    FILE *out;
    ifd_buf_t *answer;
    ifd_buf_t errbody;
} complete_t;

static int on_text(void *ud, const char *text, size_t len)
{
    complete_t *c = ud;
    if (c->out) {
        fwrite(text, 1, len, c->out);
        fflush(c->out);
    }
    return c->answer ? ifd_buf_append(c->answer, text, len) : 0;
}

static int on_body(void *ud, const char *data, size_t len)
{
    complete_t *c = ud;
    if (c->conn.status != 200) /* keep error bodies small */
        return c->errbody.len < 65536 ? ifd_buf_append(&c->errbody, data, len) : 0;
    bool sse = strstr(c->conn.content_type, "text/event-stream") != NULL;
    return ifd_cli_api_reader_feed(c->r, sse, data, len);
}

int ifd_cli_complete(const ifd_cli_http_target_t *t, const ifd_cli_conn_t *o, const char *path,
                     const char *body, FILE *out, ifd_buf_t *answer, ifd_cli_api_reader_t *r)
{
    complete_t c = {.r = r, .out = out, .answer = answer};
    ifd_cli_http_conn_init(&c.conn);
    r->text_cb = on_text;
    r->ud = &c;
    ifd_cli_http_conn_set_cb(&c.conn, NULL, on_body, &c);
    int code = IFD_CLI_EXIT_OK;
    int rc = ifd_cli_http_conn_start(&c.conn, t, "POST", path,
                                     "text/event-stream, application/json", body, strlen(body));
    if (rc == 0)
        rc = ifd_cli_http_conn_wait(&c.conn, o->timeout_s * 1000, &ifd_cli_interrupted);
    if (rc == IFD_ECANCELED) {
        code = IFD_CLI_EXIT_INTERRUPTED;
        goto out;
    }
    if (rc < 0 && !(c.conn.status == 200 && r->done)) {
        if (c.conn.status != 0 && c.conn.status != 200)
            code = ifd_cli_report_http_error(t, c.conn.status, c.errbody.data, c.errbody.len,
                                             c.conn.retry_after);
        else
            code = ifd_cli_report(t, rc);
        goto out;
    }
    if (c.conn.status != 200) {
        code = ifd_cli_report_http_error(t, c.conn.status, c.errbody.data, c.errbody.len,
                                         c.conn.retry_after);
        goto out;
    }
    if (ifd_cli_api_reader_finish(r) < 0) {
        code = ifd_cli_report(t, IFD_EFORMAT);
        goto out;
    }
    if (r->error[0]) {
        fprintf(stderr, "%sinfer: inferd reported an error: %s\n", out ? "\n" : "", r->error);
        code = IFD_CLI_EXIT_SERVER;
    } else if (!r->done) {
        fprintf(stderr, "%sinfer: the stream from %s ended without [DONE]\n", out ? "\n" : "",
                t->where);
        code = IFD_CLI_EXIT_SERVER;
    }
out:
    ifd_cli_http_conn_close(&c.conn);
    ifd_buf_free(&c.errbody);
    r->text_cb = NULL;
    r->ud = NULL;
    return code;
}

int ifd_cli_get_json(const ifd_cli_http_target_t *t, const ifd_cli_conn_t *o, const char *method,
                     const char *path, const char *body, json_t **out)
{
    ifd_buf_t b = IFD_BUF_INIT;
    int status = 0;
    *out = NULL;
    int rc = ifd_cli_http_fetch(t, method, path, body, body ? strlen(body) : 0, o->timeout_s * 1000,
                                &status, &b);
    if (rc < 0)
        return ifd_cli_report(t, rc);
    int code = IFD_CLI_EXIT_OK;
    if (status != 200) {
        code = ifd_cli_report_http_error(t, status, b.data, b.len, NULL);
    } else if (!(*out = json_loadb(b.data, b.len, 0, NULL))) {
        fprintf(stderr, "infer: %s%s answered with something that is not JSON\n", t->where, path);
        code = IFD_CLI_EXIT_SERVER;
    }
    ifd_buf_free(&b);
    return code;
}
