/*
 * reply.c — see reply.h. The one place that turns an ifd_oai_error_t into
 * an HTTP answer, so every endpoint's errors carry the same headers.
 */
#include "reply.h"

#include <stdarg.h>
#include <stdio.h>

void ifd_reply_error(ifd_http_conn_t *c, const ifd_oai_error_t *e, int retry_after)
{
    ifd_buf_t b = IFD_BUF_INIT;
    char extra[128] = "";
    if (retry_after > 0)
        snprintf(extra, sizeof extra, "Retry-After: %d\r\n", retry_after);
    else if (e->status == 401)
        snprintf(extra, sizeof extra, "WWW-Authenticate: Bearer\r\n");
    if (ifd_oai_error_json(&b, e) == 0)
        ifd_http_respond(c, e->status, "application/json", extra[0] ? extra : NULL, b.data, b.len);
    else
        ifd_http_respond(c, 500, "text/plain", NULL, "out of memory\n", 14);
    ifd_buf_free(&b);
}

void ifd_reply_errorf(ifd_http_conn_t *c, int status, const char *code, const char *param,
                      const char *fmt, ...)
{
    ifd_oai_error_t e;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ifd_oai_error_set(&e, status, NULL, code, param, "%s", msg);
    ifd_reply_error(c, &e, status == 503 ? 1 : 0);
}

void ifd_reply_parse_error(ifd_http_conn_t *c, ifd_oai_error_t *e)
{
    if (!e->status)
        ifd_oai_error_set(e, 500, NULL, NULL, NULL, "Out of memory.");
    ifd_reply_error(c, e, 0);
}

void ifd_reply_json(ifd_http_conn_t *c, int rc, const ifd_buf_t *b)
{
    if (rc == 0)
        ifd_http_respond(c, 200, "application/json", NULL, b->data, b->len);
    else
        ifd_reply_errorf(c, 500, NULL, NULL, "Out of memory.");
}
