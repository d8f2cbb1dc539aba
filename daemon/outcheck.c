/*
 * outcheck.c — see outcheck.h. The pool thread writes only the job's rc,
 * why and failed; the loop reads them in the after-work callback (libuv
 * orders the two).
 */
#include "outcheck.h"

#include "error.h"
#include "grammar/schema_check.h"

#include <stdio.h>
#include <string.h>

static void ifd__outcheck_run(uv_work_t *w)
{
    ifd_outcheck_t *j = w->data;
    j->rc = 0;
    for (j->failed = 0; j->failed < j->n_items; j->failed++) {
        const ifd_outcheck_item_t *it = &j->items[j->failed];
        j->why[0] = '\0';
        j->rc = ifd_schema_check_text(it->schema, it->text ? it->text : "", it->n, j->why,
                                      sizeof j->why);
        if (j->rc)
            return;
    }
}

static void ifd__outcheck_done(uv_work_t *w, int status)
{
    ifd_outcheck_t *j = w->data;
    if (status == UV_ECANCELED) {
        j->rc = IFD_ECANCELED;
        j->failed = 0;
        snprintf(j->why, sizeof j->why, "(the value): the check was cancelled");
    }
    j->cb(j, j->rc, j->rc && j->failed < j->n_items ? &j->items[j->failed] : NULL, j->why, j->ud);
}

int ifd_outcheck_queue(uv_loop_t *loop, ifd_outcheck_t *job, const ifd_outcheck_item_t *items,
                       size_t n, ifd_outcheck_cb cb, void *ud)
{
    job->items = items;
    job->n_items = n;
    job->cb = cb;
    job->ud = ud;
    job->work.data = job;
    if (uv_queue_work(loop, &job->work, ifd__outcheck_run, ifd__outcheck_done) == 0)
        return 0;
    ifd__outcheck_run(&job->work); /* the pool refused it: bounded by the check's limits */
    return IFD_EAGAIN;
}
