/*
 * error.h — inferd's error codes, their names and messages, and IFD_ASSERT.
 *
 * Convention (STYLE.md "Errors"): functions return int, 0 on success, a
 * negative IFD_E* code on failure, or -errno for a failed system call. The
 * IFD_E* codes live below -10000 so they never collide with -errno values.
 * Expected outcomes (IFD_EAGAIN, IFD_ENOBLOCKS) have their own codes.
 *
 * The one table below defines every code; ifd_strerror() and ifd_err_name()
 * are generated from it. Both are thread-safe and return static strings.
 */
#ifndef IFD_ERROR_H
#define IFD_ERROR_H

#include <stdio.h>
#include <stdlib.h>

/* X(NAME, value, message) */
#define IFD_ERRORS(X)                                                                       \
    X(EFORMAT, -10001, "malformed input")                                                   \
    X(ETRUNC, -10002, "input truncated")                                                    \
    X(ENOTFOUND, -10003, "not found")                                                       \
    X(ETYPE, -10004, "wrong type")                                                          \
    X(ERANGE, -10005, "value out of range")                                                 \
    X(ENOTSUP, -10006, "not supported")                                                     \
    X(ENOMEM, -10007, "out of memory")                                                      \
    X(EINVAL, -10008, "invalid argument")                                                   \
    X(EAGAIN, -10009, "try again")                                                          \
    X(ENOBLOCKS, -10010, "no free KV blocks")                                               \
    X(EMISMATCH, -10011, "mismatch")                                                        \
    X(EVERSION, -10012, "unsupported version")                                              \
    X(EOVERFLOW, -10013, "size overflow")                                                   \
    X(ETOOBIG, -10014, "too large")                                                         \
    X(ECLOSED, -10015, "connection closed")                                                 \
    X(ETIMEDOUT, -10016, "timed out")                                                       \
    X(ECANCELED, -10017, "canceled")                                                        \
    X(ENODEV, -10018, "no such device")                                                     \
    X(ECUDA, -10019, "CUDA error")                                                          \
    X(EBUSY, -10020, "busy")                                                                \
    X(EEXIST, -10021, "already exists")                                                     \
    X(EINTERNAL, -10022, "internal error")

enum {
    IFD_OK = 0,
#define IFD__ERR_ENUM(name, value, msg) IFD_##name = (value),
    IFD_ERRORS(IFD__ERR_ENUM)
#undef IFD__ERR_ENUM
};

/* Message for any code: an IFD_E* code, -errno, or 0. Never NULL. */
const char *ifd_strerror(int err);

/* Symbolic name ("IFD_ENOBLOCKS", "ENOENT", "OK"). Never NULL. */
const char *ifd_err_name(int err);

/* Formats a message into a caller's error buffer (err, errlen), as the
 * functions taking `char *err, size_t errlen` report why they failed; a NULL
 * or empty buffer is left alone. */
void ifd_errbuf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Broken invariants abort with the expression, file and line. Always on. */
#define IFD_ASSERT(expr)                                                                    \
    do {                                                                                    \
        if (!(expr)) {                                                                      \
            fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__, __LINE__, #expr);    \
            abort();                                                                        \
        }                                                                                   \
    } while (0)

#endif
