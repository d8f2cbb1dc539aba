/*
 * httpframe.c — see httpframe.h. One state per position in the grammar,
 * one step function per phase (request line, head, chunk framing); bulk
 * data (a Content-Length body, chunk data) is skipped in one step.
 * Only three fields are interpreted (Host, Content-Length,
 * Transfer-Encoding): their names are matched case-insensitively and their
 * values kept (trimmed of OWS) in a small buffer; anything longer than it
 * cannot be a valid Content-Length or "chunked" and fails as such.
 */
#include "httpframe.h"

#include <string.h>
#include <strings.h>

/* In grammar order: ifd_httpframe_feed picks a phase's step by range. */
enum {
    S_START = 0,  /* before the request line (empty lines allowed) */
    S_START_LF,   /* CR of an empty line seen */
    S_METHOD,     /* in the method */
    S_TARGET0,    /* first byte of the request target */
    S_TARGET,     /* in the target */
    S_VERSION,    /* "HTTP/x.y" */
    S_RL_LF,      /* CR after the version seen */
    S_FIELD0,     /* start of a field line, or CR of the empty line */
    S_NAME,       /* in a field name */
    S_VALUE,      /* in a field value */
    S_VALUE_LF,   /* CR after a value seen */
    S_HEAD_LF,    /* CR of the empty line ending the head seen */
    S_BODY,       /* Content-Length bytes */
    S_CSIZE0,     /* first hex digit of a chunk size */
    S_CSIZE,      /* in a chunk size */
    S_CEXT,       /* in chunk extensions */
    S_CSIZE_LF,   /* CR after the size line seen */
    S_CDATA,      /* in chunk data */
    S_CDATA_CR,   /* CR after chunk data */
    S_CDATA_LF,   /* LF after it */
    S_TRAILER0,   /* after the last chunk: CR of the final empty line */
    S_TRAILER_LF, /* its LF */
    S_DONE,
    S_FAILED,
};

#define IFD__METHOD_MAX 32
#define IFD__CSIZE_MAX  15 /* hex digits: < 2^60 */
#define IFD__CEXT_MAX   1024

/* tchar (RFC 9110 §5.6.2) */
static bool ifd__tchar(unsigned char ch)
{
    if ((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'))
        return true;
    return ch && strchr("!#$%&'*+-.^_`|~", ch) != NULL;
}

static char ifd__lower(unsigned char ch)
{
    return (char)(ch >= 'A' && ch <= 'Z' ? ch | 0x20 : ch);
}

static int ifd__hex(unsigned char ch)
{
    return ch >= '0' && ch <= '9'   ? ch - '0'
           : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
           : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                    : -1;
}

/* field-value bytes: VCHAR, obs-text, SP, HTAB */
static bool ifd__vbyte(unsigned char ch)
{
    return ch == '\t' || (ch >= 0x20 && ch != 0x7f);
}

void ifd_httpframe_init(ifd_httpframe_t *f)
{
    memset(f, 0, sizeof *f);
    f->state = S_START;
}

void ifd_httpframe_reset(ifd_httpframe_t *f)
{
    ifd_httpframe_init(f);
}

/* What one byte did: the step of each phase (below) returns one of these. */
enum { STEP_NEXT = 0, STEP_DONE, STEP_FAILED };

static int ifd__fail(ifd_httpframe_t *f, int status, const char *why)
{
    f->state = S_FAILED;
    f->status = status;
    f->why = why;
    return STEP_FAILED;
}

enum { F_OTHER = 0, F_HOST, F_CL, F_TE };

static int ifd__field_kind(const ifd_httpframe_t *f)
{
    if (f->name_len >= sizeof f->name)
        return F_OTHER;
    if (!strcmp(f->name, "host"))
        return F_HOST;
    if (!strcmp(f->name, "content-length"))
        return F_CL;
    if (!strcmp(f->name, "transfer-encoding"))
        return F_TE;
    return F_OTHER;
}

/* A field line ended: record what framing depends on. 0 or a status. */
static int ifd__field_done(ifd_httpframe_t *f, const char **why)
{
    int kind = ifd__field_kind(f);
    if (kind == F_OTHER)
        return 0;
    /* trim trailing OWS (leading OWS was never stored) */
    while (f->val_len && (f->val[f->val_len - 1] == ' ' || f->val[f->val_len - 1] == '\t'))
        f->val_len--;
    f->val[f->val_len < sizeof f->val ? f->val_len : sizeof f->val - 1] = '\0';
    if (kind == F_HOST) {
        f->n_host++;
        return 0;
    }
    if (kind == F_TE) {
        f->n_te++;
        if (f->val_long || strcasecmp(f->val, "chunked") != 0) {
            *why = "Only 'Transfer-Encoding: chunked' is supported.";
            return 501;
        }
        return 0;
    }
    /* Content-Length */
    if (++f->n_cl > 1) {
        *why = "More than one Content-Length field.";
        return 400;
    }
    if (f->val_long || f->val_len == 0 || f->val_len > 18) {
        *why = "Content-Length is not a decimal number of at most 18 digits.";
        return 400;
    }
    uint64_t v = 0;
    for (uint32_t i = 0; i < f->val_len; i++) {
        if (f->val[i] < '0' || f->val[i] > '9') {
            *why = "Content-Length is not a decimal number of at most 18 digits.";
            return 400;
        }
        v = v * 10 + (uint64_t)(f->val[i] - '0');
    }
    f->cl = v;
    return 0;
}

/* The head is complete: decide how the body is framed. 0 or a status. */
static int ifd__head_done(ifd_httpframe_t *f, const char **why)
{
    if (!f->http10 && f->n_host != 1) {
        *why = f->n_host ? "More than one Host field." : "An HTTP/1.1 request needs a Host field.";
        return 400;
    }
    if (f->n_te > 1) {
        *why = "Only one 'Transfer-Encoding: chunked' field is supported.";
        return 501;
    }
    if (f->n_te && f->n_cl) {
        *why = "Both Content-Length and Transfer-Encoding are present.";
        return 400;
    }
    if (f->n_te && f->http10) {
        *why = "Transfer-Encoding in an HTTP/1.0 request.";
        return 400;
    }
    f->chunked = f->n_te == 1;
    f->remain = f->n_cl ? f->cl : 0;
    return 0;
}

/* A state that takes exactly one byte: want (else a 400 saying why), then
 * the state next. */
static int ifd__expect(ifd_httpframe_t *f, unsigned char ch, unsigned char want, int next,
                       const char *why)
{
    if (ch != want)
        return ifd__fail(f, 400, why);
    f->state = next;
    return STEP_NEXT;
}

/* A byte of free text up to a CR (a field value, chunk extensions): CR
 * ends it (state next), a control character breaks the rule why. -1: a text
 * byte, the caller's to take. */
static int ifd__text_byte(ifd_httpframe_t *f, unsigned char ch, int next, const char *why)
{
    if (ch == '\r') {
        f->state = next;
        return STEP_NEXT;
    }
    return ifd__vbyte(ch) ? -1 : ifd__fail(f, 400, why);
}

/* The request line: S_START .. S_RL_LF. */
static int ifd__step_line(ifd_httpframe_t *f, unsigned char ch)
{
    switch (f->state) {
    case S_START:
        if (ch == '\r') {
            f->state = S_START_LF;
        } else if (ifd__tchar(ch)) {
            f->state = S_METHOD;
            f->n = 1;
        } else {
            return ifd__fail(f, 400, "The request line does not start with a method.");
        }
        return STEP_NEXT;
    case S_START_LF:
        return ifd__expect(f, ch, '\n', S_START, "A bare CR in the request.");
    case S_METHOD:
        if (ch == ' ') {
            f->state = S_TARGET0;
        } else if (!ifd__tchar(ch) || ++f->n > IFD__METHOD_MAX) {
            return ifd__fail(f, 400, "The method is not a token of at most 32 characters.");
        }
        return STEP_NEXT;
    case S_TARGET0:
    case S_TARGET:
        if (ch == ' ' && f->state == S_TARGET) {
            f->state = S_VERSION;
            f->n = 0;
        } else if (ch == '\r' || ch == '\n') {
            return ifd__fail(f, 400, "The request line has no HTTP version.");
        } else if (ch <= 0x20 || ch >= 0x7f) {
            return ifd__fail(f, 400, "The request target holds a byte that is not visible ASCII.");
        } else {
            f->state = S_TARGET;
        }
        return STEP_NEXT;
    case S_VERSION:
        if (f->n < sizeof f->ver) {
            f->ver[f->n++] = (char)ch;
            return STEP_NEXT;
        }
        if (ch != '\r')
            return ifd__fail(f, 400, "The request line does not end with HTTP/x.y and CRLF.");
        if (memcmp(f->ver, "HTTP/", 5) != 0 || f->ver[5] < '0' || f->ver[5] > '9' ||
            f->ver[6] != '.' || f->ver[7] < '0' || f->ver[7] > '9')
            return ifd__fail(f, 400, "The HTTP version is malformed.");
        if (f->ver[5] != '1' || f->ver[7] > '1')
            return ifd__fail(f, 505, "Only HTTP/1.0 and HTTP/1.1 are supported.");
        f->http10 = f->ver[7] == '0';
        f->state = S_RL_LF;
        return STEP_NEXT;
    default: /* S_RL_LF */
        return ifd__expect(f, ch, '\n', S_FIELD0, "A bare CR in the request line.");
    }
}

/* The field lines and the empty line ending the head: S_FIELD0 .. S_HEAD_LF. */
static int ifd__step_head(ifd_httpframe_t *f, unsigned char ch)
{
    const char *why = NULL;
    int st;
    switch (f->state) {
    case S_FIELD0:
        if (ch == '\r') {
            f->state = S_HEAD_LF;
        } else if (ch == ' ' || ch == '\t') {
            return ifd__fail(f, 400, "A field line starts with whitespace (obs-fold).");
        } else if (ifd__tchar(ch)) {
            f->state = S_NAME;
            f->name_len = 0;
            f->val_len = 0;
            f->val_long = false;
            f->name[f->name_len++] = ifd__lower(ch);
        } else {
            return ifd__fail(f, 400, "A field line does not start with a name.");
        }
        return STEP_NEXT;
    case S_NAME:
        if (ch == ':') {
            if (f->name_len < sizeof f->name)
                f->name[f->name_len] = '\0';
            f->state = S_VALUE;
        } else if (ch == ' ' || ch == '\t') {
            return ifd__fail(f, 400, "Whitespace between a field name and its colon.");
        } else if (!ifd__tchar(ch)) {
            return ifd__fail(f, 400, "A field name holds a byte that is not a token character.");
        } else {
            if (f->name_len + 1 < sizeof f->name)
                f->name[f->name_len] = ifd__lower(ch);
            if (f->name_len < sizeof f->name)
                f->name_len++;
        }
        return STEP_NEXT;
    case S_VALUE:
        st = ifd__text_byte(f, ch, S_VALUE_LF, "A field value holds a control character.");
        if (st >= 0)
            return st;
        if ((ch == ' ' || ch == '\t') && f->val_len == 0) {
            /* leading OWS */
        } else if (f->val_len + 1 < sizeof f->val) {
            f->val[f->val_len++] = (char)ch;
        } else if (ch != ' ' && ch != '\t') {
            f->val_long = true; /* (trailing OWS past the buffer is dropped) */
        }
        return STEP_NEXT;
    case S_VALUE_LF:
        if (ch != '\n')
            return ifd__fail(f, 400, "A bare CR in a field line.");
        if ((st = ifd__field_done(f, &why)) != 0)
            return ifd__fail(f, st, why);
        f->state = S_FIELD0;
        return STEP_NEXT;
    default: /* S_HEAD_LF */
        if (ch != '\n')
            return ifd__fail(f, 400, "A bare CR at the end of the head.");
        if ((st = ifd__head_done(f, &why)) != 0)
            return ifd__fail(f, st, why);
        if (f->chunked) {
            f->state = S_CSIZE0;
        } else if (f->remain) {
            f->state = S_BODY;
        } else {
            f->state = S_DONE;
            f->done = true;
            return STEP_DONE;
        }
        return STEP_NEXT;
    }
}

/* The framing bytes of a chunked body (chunk data itself is skipped in bulk
 * by the caller): S_CSIZE0 .. S_TRAILER_LF but S_CDATA. */
static int ifd__step_chunk(ifd_httpframe_t *f, unsigned char ch)
{
    int h, st;
    switch (f->state) {
    case S_CSIZE0:
    case S_CSIZE:
        if ((h = ifd__hex(ch)) >= 0) {
            if (f->state == S_CSIZE0) {
                f->state = S_CSIZE;
                f->remain = 0;
                f->n = 0;
            }
            if (++f->n > IFD__CSIZE_MAX)
                return ifd__fail(f, 400, "A chunk size has more than 15 hex digits.");
            f->remain = f->remain << 4 | (uint64_t)h;
        } else if (f->state == S_CSIZE0) {
            return ifd__fail(f, 400, "A chunk does not start with its size in hex.");
        } else if (ch == ';' || ch == ' ' || ch == '\t') {
            f->state = S_CEXT;
            f->n = 0;
        } else if (ch == '\r') {
            f->state = S_CSIZE_LF;
        } else {
            return ifd__fail(f, 400,
                             "A chunk size is followed by something other than an "
                             "extension or CRLF.");
        }
        return STEP_NEXT;
    case S_CEXT:
        st = ifd__text_byte(f, ch, S_CSIZE_LF, "A chunk extension holds a control character.");
        if (st >= 0)
            return st;
        if (++f->n > IFD__CEXT_MAX)
            return ifd__fail(f, 400, "Chunk extensions longer than 1 KiB.");
        return STEP_NEXT;
    case S_CSIZE_LF:
        return ifd__expect(f, ch, '\n', f->remain ? S_CDATA : S_TRAILER0,
                           "A bare CR in a chunk size line.");
    case S_CDATA_CR:
        return ifd__expect(f, ch, '\r', S_CDATA_LF, "Chunk data is not followed by CRLF.");
    case S_CDATA_LF:
        return ifd__expect(f, ch, '\n', S_CSIZE0, "Chunk data is not followed by CRLF.");
    case S_TRAILER0:
        return ifd__expect(f, ch, '\r', S_TRAILER_LF, "Trailer fields are not accepted.");
    default: /* S_TRAILER_LF */
        if (ch != '\n')
            return ifd__fail(f, 400, "A bare CR after the last chunk.");
        f->state = S_DONE;
        f->done = true;
        return STEP_DONE;
    }
}

/* The byte loop: bulk data (a Content-Length body, chunk data) is skipped
 * here in one step, every other byte goes to the step of its phase. */
size_t ifd_httpframe_feed(ifd_httpframe_t *f, const char *data, size_t len)
{
    const unsigned char *p = (const unsigned char *)data;
    size_t i = 0;
    while (i < len) {
        if (f->state == S_DONE || f->state == S_FAILED)
            return i;
        if (f->state == S_BODY || f->state == S_CDATA) {
            size_t k = len - i;
            if (k > f->remain)
                k = (size_t)f->remain;
            f->remain -= k;
            i += k;
            if (f->remain == 0) {
                if (f->state == S_BODY) {
                    f->state = S_DONE;
                    f->done = true;
                    return i;
                }
                f->state = S_CDATA_CR;
            }
            continue;
        }
        int r = f->state <= S_RL_LF     ? ifd__step_line(f, p[i])
                : f->state <= S_HEAD_LF ? ifd__step_head(f, p[i])
                                        : ifd__step_chunk(f, p[i]);
        if (r == STEP_FAILED)
            return i; /* before the offending byte */
        i++;
        if (r == STEP_DONE)
            return i;
    }
    return i;
}
