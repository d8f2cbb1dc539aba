/*
 * outcheck.c — see outcheck.h. The pool thread writes only the job's rc and
 * why; the loop reads them in the after-work callback (libuv orders the
 * two).
 */
#include "outcheck.h"

#include "error.h"
#include "grammar/schema_check.h"

#include <stdio.h>
#include <string.h>

static void ifd__outcheck_run(uv_work_t *w)
{
    ifd_outcheck_t *j = w->data;
    j->why[0] = '\0';
    j->rc = ifd_schema_check_text(j->schema, j->text ? j->text : "", j->n, j->why, sizeof j->why);
}

static void ifd__outcheck_done(uv_work_t *w, int status)
{
    ifd_outcheck_t *j = w->data;
    if (status == UV_ECANCELED) {
        j->rc = IFD_ECANCELED;
        snprintf(j->why, sizeof j->why, "(the value): the check was cancelled");
    }
    j->cb(j, j->rc, j->why, j->ud);
}

int ifd_outcheck_queue(uv_loop_t *loop, ifd_outcheck_t *job, const json_t *schema, const char *text,
                       size_t n, ifd_outcheck_cb cb, void *ud)
{
    job->schema = schema;
    job->text = text;
    job->n = n;
    job->cb = cb;
    job->ud = ud;
    job->work.data = job;
    if (uv_queue_work(loop, &job->work, ifd__outcheck_run, ifd__outcheck_done) == 0)
        return 0;
    ifd__outcheck_run(&job->work); /* the pool refused it: bounded by the check's limits */
    return IFD_EAGAIN;
}
