/*
 * serve_vision.c — see serve_vision.h.
 *
 * One encode at a time: the queue's first job's next picture without
 * cached rows. Its pixels are normalized into a float buffer for
 * ifd_vision_encode_begin (which uploads them), each later call runs a
 * budget of it (step_ms at the measured rate, or one phase), and the
 * finished rows go into the job and the cache.
 */
#include "serve_vision.h"

#include "error.h"
#include "image/preprocess.h"
#include "image_cache.h"
#include "log.h"
#include "modelfile/model_source.h"
#include "vision.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

struct ifd_serve_vision {
    ifd_backend_t *be;
    ifd_vision_t *tower;
    ifd_image_prep_t prep;
    int32_t boi_id, eoi_id, image_id;
    uint32_t tokens, width; /* rows per picture and their width */
    ifd_image_cache_t *cache;
    ifd_serve_vision_job_t *head, *tail;
    uint32_t n_jobs;
    ifd_vision_enc_t *enc; /* the head job's picture `done` being encoded, or NULL */
    double enc_t0;
    uint32_t step_ms;    /* params' (0: a phase per step) */
    double step_flops;   /* params' (> 0: a fixed budget) */
    double flops_per_ms; /* the encode's measured rate (0: none yet) */
};

static double ifd__sv_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* dir/preprocessor_config.json over the Gemma 3 defaults: 0 (also when the
 * directory has none), or its parse error. */
static int ifd__sv_prep_json(ifd_image_prep_t *p, const char *dir, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/preprocessor_config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    char *buf = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n >= 0 && n <= (1 << 20) && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)))
        n = (long)fread(buf, 1, (size_t)n, f);
    fclose(f);
    if (!buf)
        return ifd_fail_msg(err, errlen, IFD_EFORMAT, "%s: cannot read it (or over 1 MiB)", path);
    char why[256] = "";
    int rc = ifd_image_prep_from_json(p, buf, (size_t)n, why, sizeof why);
    free(buf);
    return rc ? ifd_fail_msg(err, errlen, rc, "%s: %s", path, why) : 0;
}

/* An mmproj's clip.vision.image_mean / image_std (three floats each) when present. */
static void ifd__sv_prep_gguf(ifd_image_prep_t *p, const ifd_gguf_t *g)
{
    static const char *const keys[2] = {"clip.vision.image_mean", "clip.vision.image_std"};
    double *dst[2] = {p->mean, p->std};
    for (int k = 0; k < 2; k++) {
        const ifd_gguf_value_t *arr;
        double v[3];
        if (ifd_gguf_get_arr(g, keys[k], &arr) || arr->v.arr.count != 3)
            continue;
        int ok = 1;
        for (uint64_t i = 0; i < 3 && ok; i++) {
            ifd_gguf_value_t e;
            ok = ifd_gguf_arr_get(g, arr, i, &e) == 0 &&
                 (e.type == IFD_GGUF_FLOAT32 || e.type == IFD_GGUF_FLOAT64) &&
                 (k == 0 || e.v.f > 0);
            v[i] = ok ? e.v.f : 0;
        }
        if (ok)
            memcpy(dst[k], v, sizeof v);
    }
}

/* The tower's source: the mmproj when given, else the model directory. */
static int ifd__sv_open(ifd_model_source_t **src, const ifd_serve_vision_params_t *p, char *err,
                        size_t errlen)
{
    *src = NULL;
    if (p->mmproj_path && p->mmproj_path[0])
        return ifd_model_source_open_mmproj(src, p->mmproj_path, err, errlen);
    struct stat st;
    if (!p->model_path || stat(p->model_path, &st) != 0 || !S_ISDIR(st.st_mode))
        return IFD_ENOTFOUND; /* a GGUF text model brings no tower */
    return ifd_model_source_open(src, p->model_path, err, errlen);
}

/* The processor of the tower from src (above), its size checked against
 * the tower's; an mmproj's special ids from the tokenizer when it has them. */
static int ifd__sv_setup(ifd_serve_vision_t *v, const ifd_serve_vision_params_t *p,
                         const ifd_model_source_t *src, char *err, size_t errlen)
{
    const ifd_vision_config_t *c = ifd_vision_config(v->tower);
    v->prep = ifd_image_prep_gemma3();
    v->prep.width = v->prep.height = c->image_size;
    const bool mmproj = p->mmproj_path && p->mmproj_path[0];
    int rc = mmproj ? 0 : ifd__sv_prep_json(&v->prep, p->model_path, err, errlen);
    if (rc)
        return rc;
    if (mmproj)
        ifd__sv_prep_gguf(&v->prep, ifd_model_source_gguf(src));
    if (v->prep.width != c->image_size || v->prep.height != c->image_size)
        return ifd_fail_msg(err, errlen, IFD_EFORMAT,
                            "the image processor's size %ux%u is not the tower's %u pixels",
                            v->prep.width, v->prep.height, c->image_size);
    if ((uint32_t)ifd_vision_text_width(v->tower) != p->text_embd)
        return ifd_fail_msg(err, errlen, IFD_EFORMAT,
                            "the tower's rows have width %d, the text model's %u",
                            ifd_vision_text_width(v->tower), p->text_embd);
    v->boi_id = c->boi_id;
    v->eoi_id = c->eoi_id;
    v->image_id = c->image_id;
    if (mmproj && p->tok) { /* an mmproj has no ids: the tokenizer's special tokens */
        static const char *const names[3] = {"<start_of_image>", "<end_of_image>",
                                             "<image_soft_token>"};
        int32_t *ids[3] = {&v->boi_id, &v->eoi_id, &v->image_id};
        for (int i = 0; i < 3; i++) {
            ifd_token_t t = ifd_tokenizer_find(p->tok, names[i], strlen(names[i]));
            if (t != IFD_TOKEN_NONE)
                *ids[i] = (int32_t)t;
        }
    }
    v->tokens = (uint32_t)ifd_vision_tokens_per_image(v->tower);
    v->width = p->text_embd;
    return 0;
}

/* Opens the source and loads its tower and processor into v. IFD_ENOTFOUND
 * with err empty: no tower there (nothing to report). */
static int ifd__sv_load(ifd_serve_vision_t *v, const ifd_serve_vision_params_t *p, char *err,
                        size_t errlen)
{
    ifd_model_source_t *src = NULL;
    int rc = ifd__sv_open(&src, p, err, errlen);
    if (rc)
        return rc;
    const char *why = NULL;
    if (!ifd_model_source_vision(src, &why))
        rc = why ? ifd_fail_msg(err, errlen, IFD_ENOTFOUND, "%s", why) : IFD_ENOTFOUND;
    if (!rc && !(rc = ifd_vision_load(&v->tower, src, v->be, err, errlen)))
        rc = ifd__sv_setup(v, p, src, err, errlen);
    ifd_model_source_close(src);
    return rc ? rc : ifd_image_cache_create(&v->cache, p->cache_bytes);
}

int ifd_serve_vision_create(ifd_serve_vision_t **out, const ifd_serve_vision_params_t *p,
                            ifd_backend_t *be, char *err, size_t errlen)
{
    *out = NULL;
    err[0] = '\0';
    const bool explicit = p->mmproj_path && p->mmproj_path[0];
    ifd_serve_vision_t *v = calloc(1, sizeof *v);
    if (!v)
        return ifd_fail_msg(err, errlen, IFD_ENOMEM, "out of memory");
    v->be = be;
    v->step_ms = p->step_ms;
    v->step_flops = p->step_flops;
    int rc = ifd__sv_load(v, p, err, errlen);
    if (rc) {
        const bool none = rc == IFD_ENOTFOUND && !err[0]; /* a text model: nothing to report */
        ifd_serve_vision_destroy(v);
        if (!err[0])
            snprintf(err, errlen, "no vision tower (%s)", ifd_strerror(rc));
        if (explicit) {
            char e[1024];
            snprintf(e, sizeof e, "%s", err);
            if (strstr(e, p->mmproj_path)) /* the reader's message names the file */
                return ifd_fail_msg(err, errlen, rc, "--mmproj: %s", e);
            return ifd_fail_msg(err, errlen, rc, "--mmproj %s: %s", p->mmproj_path, e);
        }
        if (!none)
            IFD_WARN("worker: the model's vision tower is not served (text only): %s", err);
        err[0] = '\0';
        return 0;
    }
    IFD_INFO("worker: vision tower of %s: %u tokens per %ux%u picture, %.1f MiB of weights",
             explicit ? p->mmproj_path : p->model_path, v->tokens, v->prep.width, v->prep.height,
             (double)ifd_vision_weight_bytes(v->tower) / (1 << 20));
    *out = v;
    return 0;
}

void ifd_serve_vision_job_free(ifd_serve_vision_job_t *j)
{
    if (!j)
        return;
    ifd_wire_msg_free(&j->msg);
    free(j->images);
    free(j->rows);
    free(j);
}

void ifd_serve_vision_destroy(ifd_serve_vision_t *v)
{
    if (!v)
        return;
    ifd_vision_encode_free(v->enc);
    while (v->head) {
        ifd_serve_vision_job_t *j = v->head;
        v->head = j->next;
        ifd_serve_vision_job_free(j);
    }
    ifd_image_cache_destroy(v->cache);
    ifd_vision_destroy(v->tower);
    free(v);
}

void ifd_serve_vision_ready(const ifd_serve_vision_t *v, ifd_wire_vision_t *out)
{
    memset(out, 0, sizeof *out);
    if (!v)
        return;
    out->tokens_per_image = v->tokens;
    out->boi_id = v->boi_id;
    out->eoi_id = v->eoi_id;
    out->image_id = v->image_id;
    out->height = v->prep.height;
    out->width = v->prep.width;
    out->resample = (uint32_t)v->prep.resample;
    out->do_pan_and_scan = v->prep.do_pan_and_scan;
    out->pas_min_crop_size = v->prep.pas_min_crop_size;
    out->pas_max_num_crops = v->prep.pas_max_num_crops;
    out->pas_min_ratio = v->prep.pas_min_ratio;
}

/* The checks of submit (serve_vision.h), picture by picture. The wire's
 * decoder has checked that the pictures are in order, disjoint and inside
 * the prompt, and that n_pixels is width × height × 3 (proto/wire.c): the
 * tokens read here are the prompt's. */
static int ifd__sv_check(const ifd_serve_vision_t *v, const ifd_wire_add_t *a, char *err,
                         size_t errlen)
{
    if (a->prompt_logprobs) /* the engine refuses them (engine.h): say so before any encode */
        return ifd_fail_msg(err, errlen, IFD_ENOTSUP,
                            "prompt_logprobs with images are not supported yet");
    for (uint32_t i = 0; i < a->n_images; i++) {
        const ifd_wire_image_t *im = &a->images[i];
        if (im->width != v->prep.width || im->height != v->prep.height)
            return ifd_fail_msg(err, errlen, IFD_EINVAL,
                                "image %u is %ux%u: the vision tower takes %ux%u pictures", i,
                                im->width, im->height, v->prep.width, v->prep.height);
        if (im->n_tokens != v->tokens)
            return ifd_fail_msg(err, errlen, IFD_EINVAL,
                                "image %u replaces %u tokens: the vision tower makes %u", i,
                                im->n_tokens, v->tokens);
        for (uint32_t k = im->pos; k < im->pos + im->n_tokens; k++)
            if (a->tokens[k] != v->image_id)
                return ifd_fail_msg(err, errlen, IFD_EINVAL,
                                    "image %u: prompt token %u is %d, not the image token %d", i, k,
                                    a->tokens[k], v->image_id);
    }
    return 0;
}

int ifd_serve_vision_submit(ifd_serve_vision_t *v, ifd_wire_msg_t *m, char *err, size_t errlen)
{
    if (!v)
        return ifd_fail_msg(err, errlen, IFD_ENOTSUP,
                            "this model takes no images (no vision tower is loaded: a "
                            "Gemma 3 directory with one, or --mmproj)");
    const ifd_wire_add_t *a = &m->u.add;
    int rc = ifd__sv_check(v, a, err, errlen);
    if (rc)
        return rc;
    const size_t per = (size_t)v->tokens * v->width;
    ifd_serve_vision_job_t *j = calloc(1, sizeof *j);
    if (j) {
        j->images = calloc(a->n_images, sizeof *j->images);
        j->rows = malloc(per * a->n_images * sizeof(float));
    }
    if (!j || !j->images || !j->rows) {
        ifd_serve_vision_job_free(j);
        return ifd_fail_msg(err, errlen, IFD_ENOMEM, "out of memory for %u images' rows",
                            a->n_images);
    }
    for (uint32_t i = 0; i < a->n_images; i++)
        j->images[i] = (ifd_engine_image_t){.start = (int32_t)a->images[i].pos,
                                            .len = (int32_t)a->images[i].n_tokens,
                                            .hash = {a->images[i].hash_lo, a->images[i].hash_hi},
                                            .embd = j->rows + per * i};
    j->msg = *m; /* the frame's allocations move into the job */
    memset(&m->u, 0, sizeof m->u);
    if (v->tail)
        v->tail->next = j;
    else
        v->head = j;
    v->tail = j;
    v->n_jobs++;
    return 0;
}

static ifd_serve_vision_job_t *ifd__sv_pop(ifd_serve_vision_t *v)
{
    ifd_serve_vision_job_t *j = v->head;
    v->head = j->next;
    if (!v->head)
        v->tail = NULL;
    j->next = NULL;
    v->n_jobs--;
    return j;
}

/* Starts encoding picture j->done: normalized, then begun (its patches
 * uploaded; the patch embedding runs in the later steps). */
static int ifd__sv_begin(ifd_serve_vision_t *v, ifd_serve_vision_job_t *j)
{
    const ifd_wire_image_t *im = &j->msg.u.add.images[j->done];
    float *pv = malloc((size_t)3 * im->width * im->height * sizeof(float));
    if (!pv)
        return IFD_ENOMEM;
    ifd_image_prep_normalize(pv, im->pixels, 1, &v->prep);
    v->enc_t0 = ifd__sv_now_ms();
    int rc = ifd_vision_encode_begin(&v->enc, v->tower, pv);
    free(pv);
    return rc;
}

/* One step's budget of the current encode: step_flops, or step_ms at the
 * rate the previous steps ran (kept as the mean of the last and the new
 * rate), or a phase. */
static int ifd__sv_encode_step(ifd_serve_vision_t *v)
{
    if (v->step_flops > 0)
        return ifd_vision_encode_step_flops(v->enc, v->step_flops, NULL);
    if (!v->step_ms)
        return ifd_vision_encode_step(v->enc, 1);
    const double t0 = ifd__sv_now_ms();
    double done = 0;
    int rc = ifd_vision_encode_step_flops(v->enc, v->flops_per_ms * v->step_ms, &done);
    const double ms = ifd__sv_now_ms() - t0;
    if (rc >= 0 && ms > 0.05) {
        const double rate = done / ms;
        v->flops_per_ms = v->flops_per_ms > 0 ? 0.5 * (v->flops_per_ms + rate) : rate;
    }
    return rc;
}

/* One step of the current encode; when it completes, the rows go to the
 * job and the cache. */
static int ifd__sv_phase(ifd_serve_vision_t *v, ifd_serve_vision_job_t *j)
{
    int rc = ifd__sv_encode_step(v);
    if (rc <= 0)
        return rc;
    ifd_engine_image_t *img = &j->images[j->done];
    rc = ifd_vision_encode_end(v->enc, (float *)img->embd, NULL);
    v->enc = NULL;
    if (rc)
        return rc;
    const size_t per = (size_t)v->tokens * v->width;
    IFD_DEBUG("worker: image %016llx%016llx of request %llu encoded in %.1f ms",
              (unsigned long long)img->hash[1], (unsigned long long)img->hash[0],
              (unsigned long long)j->msg.u.add.id, ifd__sv_now_ms() - v->enc_t0);
    if (ifd_image_cache_put(v->cache, img->hash, img->embd, per))
        IFD_WARN("worker: image cache: out of memory (the rows are not kept)");
    j->done++;
    return 0;
}

/* Pictures of the head job whose rows are cached, taken at no cost. */
static void ifd__sv_take_cached(ifd_serve_vision_t *v, ifd_serve_vision_job_t *j)
{
    const size_t per = (size_t)v->tokens * v->width;
    while (j->done < j->msg.u.add.n_images) {
        ifd_engine_image_t *img = &j->images[j->done];
        const float *rows = ifd_image_cache_get(v->cache, img->hash, per);
        if (!rows)
            return;
        IFD_DEBUG("worker: image %016llx%016llx of request %llu: cache hit",
                  (unsigned long long)img->hash[1], (unsigned long long)img->hash[0],
                  (unsigned long long)j->msg.u.add.id);
        memcpy((float *)img->embd, rows, per * sizeof(float));
        j->done++;
    }
}

ifd_serve_vision_job_t *ifd_serve_vision_step(ifd_serve_vision_t *v)
{
    if (!v || !v->head)
        return NULL;
    ifd_serve_vision_job_t *j = v->head;
    int rc = 0;
    if (v->enc)
        rc = ifd__sv_phase(v, j);
    else {
        ifd__sv_take_cached(v, j);
        if (j->done < j->msg.u.add.n_images)
            rc = ifd__sv_begin(v, j);
    }
    if (rc == 0 && !v->enc)
        ifd__sv_take_cached(v, j); /* a repeat of the picture just encoded */
    if (rc) {
        ifd_vision_encode_free(v->enc);
        v->enc = NULL;
        j->rc = rc;
        snprintf(j->err, sizeof j->err, "encoding image %u failed: %s", j->done, ifd_strerror(rc));
        IFD_ERROR("worker: request %llu: %s", (unsigned long long)j->msg.u.add.id, j->err);
        return ifd__sv_pop(v);
    }
    return j->done == j->msg.u.add.n_images ? ifd__sv_pop(v) : NULL;
}

uint32_t ifd_serve_vision_pending(const ifd_serve_vision_t *v)
{
    return v ? v->n_jobs : 0;
}

bool ifd_serve_vision_cancel(ifd_serve_vision_t *v, uint64_t id, uint32_t *n_prompt)
{
    if (!v)
        return false;
    ifd_serve_vision_job_t *prev = NULL;
    for (ifd_serve_vision_job_t *j = v->head; j; prev = j, j = j->next) {
        if (j->msg.u.add.id != id)
            continue;
        if (j == v->head) {
            ifd_vision_encode_free(v->enc);
            v->enc = NULL;
        }
        if (prev)
            prev->next = j->next;
        else
            v->head = j->next;
        if (v->tail == j)
            v->tail = prev;
        v->n_jobs--;
        *n_prompt = j->msg.u.add.n_tokens - j->msg.u.add.n_generated;
        ifd_serve_vision_job_free(j);
        return true;
    }
    return false;
}
