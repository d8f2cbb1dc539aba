/*
 * outcheck.h — the check of a finished structured output against its JSON
 * Schema (common/grammar/schema_check.h), run on the uv thread pool: its
 * cost grows with the output and the schema (up to a million keyword
 * evaluations and PCRE2 searches at their match limit), so it never runs on
 * the router's loop (docs/structured-outputs.md, "When the check fails").
 *
 * A job is embedded by its owner (gen.c: one per choice) and lives until
 * its callback has run. The schema is a parsed schema shared with the
 * grammar cache (gcache.h): read only, by any number of jobs at once
 * (jansson's reads and reference counts are thread-safe). The text must
 * not change until the callback.
 *
 * Threading: ifd_outcheck_queue and the callback on the loop's thread; the
 * check itself on a pool thread.
 */
#ifndef IFD_DAEMON_OUTCHECK_H
#define IFD_DAEMON_OUTCHECK_H

#include <jansson.h>
#include <stddef.h>
#include <uv.h>

typedef struct ifd_outcheck ifd_outcheck_t;

/* The check's result: rc as ifd_schema_check_text returns it (0 valid,
 * IFD_EINVAL invalid, IFD_ENOTSUP / IFD_ETOOBIG not checkable), why its
 * message ("<JSON pointer>: <reason>"; may be empty); IFD_ECANCELED when
 * the job was cancelled before it ran. The job may be reused or freed from
 * the callback on. */
typedef void (*ifd_outcheck_cb)(ifd_outcheck_t *job, int rc, const char *why, void *ud);

struct ifd_outcheck {
    uv_work_t work; /* private, as the fields below */
    const json_t *schema;
    const char *text;
    size_t n;
    int rc;
    char why[256];
    ifd_outcheck_cb cb;
    void *ud;
};

/* Checks text[0..n) against schema (both borrowed until the callback) on
 * the thread pool, then calls cb(job, rc, why, ud) on the loop: returns 0.
 * Where the pool refuses the job, the check runs at once and IFD_EAGAIN is
 * returned with the result in job->rc and job->why; cb is then never
 * called (so a caller is never freed inside its own call). */
int ifd_outcheck_queue(uv_loop_t *loop, ifd_outcheck_t *job, const json_t *schema, const char *text,
                       size_t n, ifd_outcheck_cb cb, void *ud);

#endif
