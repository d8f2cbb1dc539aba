/*
 * cors.c — see cors.h. The request headers a preflight may ask for are one
 * table (ifd__allowed_headers); origins are matched exactly, ignoring case,
 * as browsers serialize them (scheme://host[:port], no path).
 */
#include "cors.h"

#include "error.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* What a browser client of an OpenAI-compatible API sends beyond the
 * CORS-safelisted headers: the key, JSON, a request id, the OpenAI SDKs'
 * headers, and the ORCA load report request (api.md). */
static const char *const ifd__allowed_headers[] = {
    "authorization",    "content-type",
    "x-request-id",     "openai-organization",
    "openai-project",   "openai-beta",
    "accept",           "accept-language",
    "content-language", "endpoint-load-metrics-format",
};
#define IFD__TELEMETRY_PREFIX "x-stainless-" /* the openai SDKs' x-stainless-os, -lang, … */

static const char *const ifd__allowed_methods[] = {"GET", "HEAD", "POST", "DELETE", "OPTIONS"};

/* One origin: scheme "://" host [":" port], nothing after. */
static bool ifd__origin_ok(const char *o, size_t n)
{
    const char *sep = NULL;
    for (size_t i = 0; i + 2 < n; i++)
        if (o[i] == ':' && o[i + 1] == '/' && o[i + 2] == '/') {
            sep = o + i;
            break;
        }
    if (!sep || sep == o)
        return false;
    const char *host = sep + 3, *end = o + n;
    if (host == end)
        return false;
    for (const char *p = host; p < end; p++)
        if (*p == '/' || *p == '?' || *p == '#' || *p == '@' || *p <= ' ' || *p == 0x7f)
            return false;
    return true;
}

int ifd_cors_parse(ifd_cors_t *out, const char *list, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    for (const char *p = list ? list : ""; *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        if (!*p)
            break;
        const char *e = p;
        while (*e && *e != ',')
            e++;
        size_t n = (size_t)(e - p);
        while (n && p[n - 1] == ' ')
            n--;
        if (n == 1 && *p == '*') {
            out->any = true;
        } else if (!ifd__origin_ok(p, n)) {
            ifd_errbuf(err, errlen,
                     "allowed_origins: '%.*s' is not an origin (scheme://host[:port], no path) "
                     "or '*'",
                     (int)(n > 200 ? 200 : n), p);
            return IFD_EINVAL;
        } else if (n >= IFD_CORS_ORIGIN_MAX || out->n == IFD_CORS_MAX_ORIGINS) {
            ifd_errbuf(err, errlen, "allowed_origins: at most %d origins of %d bytes",
                     IFD_CORS_MAX_ORIGINS, IFD_CORS_ORIGIN_MAX - 1);
            return IFD_EINVAL;
        } else {
            memcpy(out->origins[out->n], p, n);
            out->origins[out->n][n] = '\0';
            out->n++;
        }
        p = e;
    }
    if (out->any && out->n) {
        ifd_errbuf(err, errlen, "allowed_origins: '*' allows every origin; list none beside it");
        return IFD_EINVAL;
    }
    return 0;
}

bool ifd_cors_enabled(const ifd_cors_t *cors)
{
    return cors->any || cors->n > 0;
}

/* The Allow-Origin value for origin, or NULL when it is not allowed. */
static const char *ifd__allow(const ifd_cors_t *cors, const char *origin)
{
    if (!origin || !*origin)
        return NULL;
    if (cors->any)
        return "*";
    for (int i = 0; i < cors->n; i++)
        if (!strcasecmp(cors->origins[i], origin))
            return origin;
    return NULL;
}

int ifd_cors_response_headers(const ifd_cors_t *cors, const char *origin, ifd_buf_t *out)
{
    int rc = 0;
    if (cors->n)
        rc = ifd_buf_puts(out, "Vary: Origin\r\n");
    const char *allow = ifd__allow(cors, origin);
    if (!rc && allow)
        rc = ifd_buf_printf(out,
                            "Access-Control-Allow-Origin: %s\r\n"
                            "Access-Control-Expose-Headers: " IFD_CORS_EXPOSE_HEADERS "\r\n",
                            allow);
    return rc ? IFD_ENOMEM : 0;
}

bool ifd_cors_is_preflight(bool method_is_options, const char *origin, const char *req_method)
{
    return method_is_options && origin && *origin && req_method && *req_method;
}

static bool ifd__header_allowed(const char *name, size_t n)
{
    size_t tp = strlen(IFD__TELEMETRY_PREFIX);
    if (n > tp && !strncasecmp(name, IFD__TELEMETRY_PREFIX, tp))
        return true;
    for (size_t i = 0; i < sizeof ifd__allowed_headers / sizeof ifd__allowed_headers[0]; i++)
        if (strlen(ifd__allowed_headers[i]) == n && !strncasecmp(ifd__allowed_headers[i], name, n))
            return true;
    return false;
}

/* Checks each comma-separated name of req_headers; the first refused one
 * goes into why. */
static bool ifd__headers_allowed(const char *req_headers, char *why, size_t whylen)
{
    for (const char *p = req_headers ? req_headers : ""; *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        const char *e = p;
        while (*e && *e != ',')
            e++;
        size_t n = (size_t)(e - p);
        while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
            n--;
        if (n && !ifd__header_allowed(p, n)) {
            ifd_errbuf(why, whylen,
                     "The request header '%.*s' is not allowed from a browser "
                     "(Access-Control-Request-Headers).",
                     (int)(n > 100 ? 100 : n), p);
            return false;
        }
        p = e;
    }
    return true;
}

int ifd_cors_preflight(const ifd_cors_t *cors, const char *origin, const char *req_method,
                       const char *req_headers, ifd_buf_t *hdrs, char *why, size_t whylen)
{
    const char *allow = ifd__allow(cors, origin);
    if (!allow) {
        ifd_errbuf(why, whylen,
                 ifd_cors_enabled(cors)
                     ? "The origin '%.200s' is not allowed (allowed_origins)."
                     : "The origin '%.200s' is not allowed: no origin is (allowed_origins is "
                       "not set).",
                 origin);
        return 403;
    }
    bool method_ok = false;
    for (size_t i = 0; i < sizeof ifd__allowed_methods / sizeof ifd__allowed_methods[0]; i++)
        method_ok |= !strcmp(ifd__allowed_methods[i], req_method);
    if (!method_ok) {
        ifd_errbuf(why, whylen,
                 "The method '%.40s' is not allowed (Access-Control-Request-Method; "
                 "allowed: " IFD_CORS_METHODS ").",
                 req_method);
        return 403;
    }
    if (!ifd__headers_allowed(req_headers, why, whylen))
        return 403;
    int rc = ifd_buf_printf(hdrs,
                            "Access-Control-Allow-Methods: " IFD_CORS_METHODS "\r\n"
                            "Access-Control-Max-Age: %d\r\n",
                            IFD_CORS_MAX_AGE);
    if (!rc && req_headers && *req_headers)
        rc = ifd_buf_printf(hdrs, "Access-Control-Allow-Headers: %s\r\n", req_headers);
    return rc ? IFD_ENOMEM : 204;
}
