/*
 * test_client_http.c — the CLI's HTTP client (client/http.h): URL targets
 * (ports, IPv6, the /v1 suffix, https refused), and one request per
 * connection against a forked server on a temporary Unix socket that
 * answers with Content-Length, chunked (split across writes), and
 * close-delimited bodies, an early hang-up (IFD_ECLOSED), garbage
 * (IFD_EFORMAT), a missing socket (-ENOENT), and the stop flag.
 */
#include "testutil.h"

#include "client/http.h"
#include "error.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

START_TEST(test_url)
{
    ifd_cli_http_target_t t;
    char err[256];
    ck_assert_int_eq(ifd_cli_http_target_url(&t, "http://127.0.0.1:8080/v1/", err, sizeof(err)), 0);
    ck_assert(t.tcp);
    ck_assert_str_eq(t.host, "127.0.0.1:8080");
    ck_assert_str_eq(t.prefix, "");
    ck_assert_str_eq(t.where, "http://127.0.0.1:8080");
    ck_assert_int_eq(ifd_cli_http_target_url(&t, "http://localhost/api/v1", err, sizeof(err)), 0);
    ck_assert_str_eq(t.prefix, "/api");
    ck_assert_int_eq(ifd_cli_http_target_url(&t, "http://[::1]:9000", err, sizeof(err)), 0);
    ck_assert_int_eq(t.addr.ss_family, AF_INET6);
    ck_assert_int_eq(ifd_cli_http_target_url(&t, "https://x", err, sizeof(err)), IFD_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "https"));
    ck_assert_int_eq(ifd_cli_http_target_url(&t, "ftp://x", err, sizeof(err)), IFD_EINVAL);
    ck_assert_int_eq(ifd_cli_http_target_url(&t, "http://h:8x", err, sizeof(err)), IFD_EINVAL);
    ck_assert_int_eq(ifd_cli_http_target_url(&t, "http://", err, sizeof(err)), IFD_EINVAL);
    char longp[200];
    memset(longp, 'a', sizeof(longp) - 1);
    longp[sizeof(longp) - 1] = '\0';
    ck_assert_int_eq(ifd_cli_http_target_unix(&t, longp), IFD_ETOOBIG);
    ck_assert_int_eq(ifd_cli_http_target_unix(&t, "/tmp/x.sock"), 0);
    ck_assert(!t.tcp);
}
END_TEST

/* A server that answers `n` connections, the i-th with replies[i] written in
 * pieces of `step` bytes (step 0: at once), then closes. */
static pid_t serve(const char *path, const char *const *replies, int n, size_t step)
{
    int ls = socket(AF_UNIX, SOCK_STREAM, 0);
    ck_assert_int_ge(ls, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, path, strlen(path) + 1);
    unlink(path);
    ck_assert_int_eq(bind(ls, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(ls, 8), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid > 0) {
        close(ls);
        return pid;
    }
    for (int i = 0; i < n; i++) {
        int c = accept(ls, NULL, NULL);
        if (c < 0)
            _exit(1);
        char req[8192];
        size_t got = 0;
        /* read the request head and its body (Content-Length) */
        for (;;) {
            ssize_t k = read(c, req + got, sizeof(req) - 1 - got);
            if (k <= 0)
                break;
            got += (size_t)k;
            req[got] = '\0';
            char *end = strstr(req, "\r\n\r\n");
            if (!end)
                continue;
            char *cl = strstr(req, "Content-Length: ");
            size_t need = (size_t)(end + 4 - req) + (cl ? strtoul(cl + 16, NULL, 10) : 0);
            if (got >= need)
                break;
        }
        const char *r = replies[i];
        size_t len = strlen(r), off = 0;
        while (off < len) {
            size_t k = step && len - off > step ? step : len - off;
            if (write(c, r + off, k) < 0)
                break;
            off += k;
            if (step)
                usleep(2000);
        }
        close(c);
    }
    _exit(0);
}

typedef struct {
    int heads, status;
    ifd_buf_t body;
} seen_t;

static void head_cb(void *ud, int status)
{
    seen_t *s = ud;
    s->heads++;
    s->status = status;
}

static int body_cb(void *ud, const char *d, size_t n)
{
    seen_t *s = ud;
    return ifd_buf_append(&s->body, d, n);
}

START_TEST(test_requests)
{
    char dir[] = "/tmp/ifd-http-XXXXXX", path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/s.sock", dir);
    static const char *const replies[] = {
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n"
        "{\"ok\":true}",
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        "6\r\ndata: \r\n5\r\nhello\r\n2\r\n\n\n\r\n0\r\n\r\n",
        "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 7\r\nContent-Type: "
        "application/json\r\n\r\n{\"error\":{\"message\":\"busy\"}}",
        "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort",
        "this is not http\r\n\r\n",
    };
    for (size_t step = 0; step <= 3; step += 3) {
        pid_t pid = serve(path, replies, 5, step);
        ifd_cli_http_target_t t;
        ck_assert_int_eq(ifd_cli_http_target_unix(&t, path), 0);

        int status = 0;
        ifd_buf_t out = IFD_BUF_INIT;
        ck_assert_int_eq(ifd_cli_http_fetch(&t, "POST", "/x", "{}", 2, 5000, &status, &out), 0);
        ck_assert_int_eq(status, 200);
        ck_assert_str_eq(out.data, "{\"ok\":true}");
        ifd_buf_free(&out);

        seen_t s = {0};
        ifd_cli_http_conn_t c;
        ifd_cli_http_conn_init(&c);
        ifd_cli_http_conn_set_cb(&c, head_cb, body_cb, &s);
        ck_assert_int_eq(
            ifd_cli_http_conn_start(&c, &t, "GET", "/sse", "text/event-stream", NULL, 0), 0);
        ck_assert_int_eq(ifd_cli_http_conn_wait(&c, 5000, NULL), 0);
        ck_assert_int_eq(s.heads, 1);
        ck_assert_int_eq(s.status, 200);
        ck_assert_str_eq(c.content_type, "text/event-stream");
        ck_assert_str_eq(s.body.data, "data: hello\n\n");
        ifd_cli_http_conn_close(&c);
        ifd_cli_http_conn_close(&c); /* twice is fine */
        ifd_buf_free(&s.body);

        ifd_cli_http_conn_init(&c);
        ck_assert_int_eq(ifd_cli_http_conn_start(&c, &t, "GET", "/busy", NULL, NULL, 0), 0);
        ck_assert_int_eq(ifd_cli_http_conn_wait(&c, 5000, NULL), 0);
        ck_assert_int_eq(c.status, 503);
        ck_assert_str_eq(c.retry_after, "7");
        ck_assert_ptr_nonnull(strstr(c.body.data, "busy"));
        ifd_cli_http_conn_close(&c);

        ck_assert_int_eq(ifd_cli_http_fetch(&t, "GET", "/short", NULL, 0, 5000, &status, &out),
                         IFD_ECLOSED);
        ck_assert_int_eq(ifd_cli_http_fetch(&t, "GET", "/junk", NULL, 0, 5000, &status, &out),
                         IFD_EFORMAT);
        int st;
        ck_assert_int_eq(waitpid(pid, &st, 0), pid);
        ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }

    /* nobody there */
    ifd_cli_http_target_t t;
    ifd_buf_t out = IFD_BUF_INIT;
    int status;
    unlink(path);
    ck_assert_int_eq(ifd_cli_http_target_unix(&t, path), 0);
    ck_assert_int_eq(ifd_cli_http_fetch(&t, "GET", "/", NULL, 0, 1000, &status, &out), -ENOENT);
    rmdir(dir);
}
END_TEST

START_TEST(test_stop_and_timeout)
{
    char dir[] = "/tmp/ifd-http-XXXXXX", path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/s.sock", dir);
    int ls = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, path, strlen(path) + 1);
    ck_assert_int_eq(bind(ls, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(ls, 8), 0); /* accepts (backlog) but never answers */
    ifd_cli_http_target_t t;
    ck_assert_int_eq(ifd_cli_http_target_unix(&t, path), 0);
    ifd_cli_http_conn_t c;
    ifd_cli_http_conn_init(&c);
    ck_assert_int_eq(ifd_cli_http_conn_start(&c, &t, "GET", "/", NULL, NULL, 0), 0);
    ck_assert_int_eq(ifd_cli_http_conn_wait(&c, 200, NULL), IFD_ETIMEDOUT);
    ifd_cli_http_conn_close(&c);
    volatile sig_atomic_t stop = 1;
    ifd_cli_http_conn_init(&c);
    ck_assert_int_eq(ifd_cli_http_conn_start(&c, &t, "GET", "/", NULL, NULL, 0), 0);
    ck_assert_int_eq(ifd_cli_http_conn_wait(&c, 0, &stop), IFD_ECANCELED);
    ifd_cli_http_conn_close(&c);
    close(ls);
    unlink(path);
    rmdir(dir);
}
END_TEST

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    Suite *s = suite_create("client_http");
    ifd_test_case(s, "http", 30, IFD_TESTS(test_url, test_requests, test_stop_and_timeout));
    return ifd_test_run(s);
}
