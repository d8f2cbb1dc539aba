/*
 * outcheck.h — the checks of a finished structured output against JSON
 * Schemas (common/grammar/schema_check.h), run on the uv thread pool: the
 * whole output against response_format's schema where its grammar
 * over-approximates it, each tool call's arguments against its tool's
 * parameters where the tool is enforced. Their cost grows with the output
 * and the schemas (up to a million keyword evaluations and PCRE2 searches
 * at their match limit, per item), so they never run on the router's loop
 * (docs/structured-outputs.md, "When the check fails").
 *
 * A job is embedded by its owner (gen.c: one per finished choice) and
 * lives until its callback has run. The schemas are parsed schemas shared
 * with the grammar cache (gcache.h): read only, by any number of jobs at
 * once (jansson's reads and atomic reference counts are thread-safe). The
 * items and their texts must not change until the callback.
 *
 * Threading: ifd_outcheck_queue and the callback on the loop's thread; the
 * checks themselves on a pool thread.
 */
#ifndef IFD_DAEMON_OUTCHECK_H
#define IFD_DAEMON_OUTCHECK_H

#include <jansson.h>
#include <stddef.h>
#include <uv.h>

/* One text and the schema it must satisfy (borrowed); what: the caller's
 * label for its message (unused here). */
typedef struct {
    const json_t *schema;
    const char *text;
    size_t n;
    const char *what;
} ifd_outcheck_item_t;

typedef struct ifd_outcheck ifd_outcheck_t;

/* The checks' result: rc as ifd_schema_check_text returns it for the first
 * item that is not valid (0: every item valid; IFD_EINVAL invalid;
 * IFD_ENOTSUP / IFD_ETOOBIG not checkable; IFD_ECANCELED: the job was
 * cancelled before it ran), item that one (NULL when rc is 0), why its
 * message ("<JSON pointer>: <reason>"; may be empty). The job may be
 * reused or freed from the callback on. */
typedef void (*ifd_outcheck_cb)(ifd_outcheck_t *job, int rc, const ifd_outcheck_item_t *item,
                                const char *why, void *ud);

struct ifd_outcheck {
    uv_work_t work; /* private, as the fields below */
    const ifd_outcheck_item_t *items;
    size_t n_items, failed;
    int rc;
    char why[256];
    ifd_outcheck_cb cb;
    void *ud;
};

/* Checks items[0..n) in order, stopping at the first that is not valid,
 * on the thread pool, then calls cb on the loop: returns 0. Where the pool
 * refuses the job, the checks run at once and IFD_EAGAIN is returned with
 * the result in job->rc, job->why and job->failed (the item's index); cb
 * is then never called (so a caller is never freed inside its own call). */
int ifd_outcheck_queue(uv_loop_t *loop, ifd_outcheck_t *job, const ifd_outcheck_item_t *items,
                       size_t n, ifd_outcheck_cb cb, void *ud);

#endif
