/*
 * images.c — see images.h. The decode keeps one image's bytes and decoded
 * RGB at a time (freed before the next image), so a request's memory is its
 * pictures (at most max_pictures × h × w × 3) plus one image in flight.
 */
#include "images.h"

#include "error.h"
#include "hash.h"
#include "image/dataurl.h"
#include "image/image.h"
#include "imgurl.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* Room an ADD keeps for the prompt's tokens and fields beside its pictures. */
#define IFD__FRAME_SLACK (4u << 20)

uint32_t ifd_images_frame_fit(uint32_t height, uint32_t width)
{
    uint64_t pic = (uint64_t)height * width * 3;
    if (!pic)
        return 0;
    uint64_t n = (IFD_WIRE_MAX_BODY - IFD__FRAME_SLACK) / pic;
    return n > IFD_WIRE_MAX_IMAGES ? IFD_WIRE_MAX_IMAGES : (uint32_t)n;
}

void ifd_images_setup(ifd_images_setup_t *s, const ifd_wire_vision_t *v, const ifd_config_t *cfg)
{
    memset(s, 0, sizeof *s);
    s->max_bytes = cfg->max_image_bytes;
    s->max_pixels = (uint64_t)cfg->max_image_pixels;
    s->allow_urls = cfg->allow_image_urls;
    s->url_timeout = cfg->image_url_timeout;
    s->max_redirects = (uint32_t)cfg->image_url_max_redirects;
    if (!v->tokens_per_image)
        return;
    s->tokens_per_image = v->tokens_per_image;
    s->prep = ifd_image_prep_gemma3(); /* rescale/mean/std: the worker's half */
    s->prep.height = v->height;
    s->prep.width = v->width;
    s->prep.resample = (ifd_resample_t)v->resample;
    s->prep.do_pan_and_scan = v->do_pan_and_scan;
    s->prep.pas_min_crop_size = v->pas_min_crop_size;
    s->prep.pas_max_num_crops = v->pas_max_num_crops;
    s->prep.pas_min_ratio = v->pas_min_ratio;
    s->ip = (ifd_image_prompt_t){.boi = v->boi_id,
                                 .eoi = v->eoi_id,
                                 .soft = v->image_id,
                                 .n_soft = (int32_t)v->tokens_per_image};
    s->max_pictures = ifd_images_frame_fit(v->height, v->width);
    uint32_t lim = (uint32_t)cfg->limit_images_per_prompt;
    s->max_images = lim && lim < s->max_pictures ? lim : s->max_pictures;
}

static bool ifd__has_prefix(const char *s, size_t n, const char *p)
{
    size_t pl = strlen(p);
    return n >= pl && !strncasecmp(s, p, pl);
}

/* An http(s) URL against allow_image_urls: 0, or IFD_EINVAL with *e a 400. */
static int ifd__check_web(const ifd_images_setup_t *s, const ifd_oai_image_t *im,
                          ifd_oai_error_t *e)
{
    ifd_imgurl_t u;
    char why[160];
    if (ifd_imgurl_parse(&u, im->url, im->url_len, why, sizeof why)) {
        ifd_oai_error_set(e, 400, NULL, "invalid_value", im->param,
                          "Invalid image URL in '%s': %s.", im->param, why);
        return IFD_EINVAL;
    }
    if (!ifd_imgurl_host_allowed(s->allow_urls, u.host)) {
        ifd_oai_error_set(e, 400, NULL, "invalid_value", im->param,
                          "Image URL in '%s': the host '%s' is not one this server fetches "
                          "from (allow_image_urls).",
                          im->param, u.host);
        return IFD_EINVAL;
    }
    return 0;
}

int ifd_images_check(const ifd_images_setup_t *s, const ifd_oai_request_t *rq, ifd_oai_error_t *e)
{
    if (!rq->n_images)
        return 0;
    const ifd_oai_image_t *im = &rq->images[0];
    char param[160];
    if (!s->tokens_per_image) { /* today's 400s of each endpoint */
        snprintf(param, sizeof param, "%s.type", im->param);
        if (!strncmp(im->param, "input[", 6))
            ifd_oai_error_set(e, 400, NULL, "unsupported_parameter", param,
                              "Unsupported content part 'input_image': this model does not "
                              "accept images: it has no vision encoder.");
        else
            ifd_oai_error_set(e, 400, NULL, "invalid_value", param,
                              "Invalid value: 'image_url'. This model does not accept images: "
                              "it has no vision encoder.");
        return IFD_EINVAL;
    }
    if (rq->prompt_logprobs) { /* the engine computes none over image rows (vision.md) */
        ifd_oai_error_set(e, 400, NULL, "invalid_value", "prompt_logprobs",
                          "prompt_logprobs is not supported with images.");
        return IFD_EINVAL;
    }
    if (rq->n_images > s->max_images) {
        ifd_oai_error_set(e, 400, NULL, "invalid_value", rq->images[s->max_images].param,
                          "At most %u image(s) may be provided in one request (%zu given).",
                          s->max_images, rq->n_images);
        return IFD_EINVAL;
    }
    for (size_t k = 0; k < rq->n_images; k++) {
        im = &rq->images[k];
        if (ifd__has_prefix(im->url, im->url_len, "data:"))
            continue;
        bool web = ifd__has_prefix(im->url, im->url_len, "http://") ||
                   ifd__has_prefix(im->url, im->url_len, "https://");
        if (web && ifd_imgurl_enabled(s->allow_urls)) {
            if (ifd__check_web(s, im, e))
                return IFD_EINVAL;
            continue;
        }
        ifd_oai_error_set(e, 400, NULL, "invalid_value", im->param,
                          web ? "Image URLs are not fetched by this server: send the image as a "
                                "base64 data: URL (data:image/png;base64,...)."
                              : "Invalid image URL: expected a base64 data: URL "
                                "(data:image/png;base64,...).");
        return IFD_EINVAL;
    }
    return 0;
}

/* The steps of one image's decode, as its errors name them. */
typedef enum { IFD__URL, IFD__FETCH, IFD__DECODE, IFD__RESIZE } ifd__step_t;

/* Why step failed with rc, in a client's words (IFD_EFORMAT and the rest: corrupt). */
static const char *ifd__why(ifd__step_t step, int rc)
{
    if (step == IFD__URL)
        return rc == IFD_ETOOBIG ? "the image is too big" : "not a base64 data: URL";
    if (step == IFD__FETCH)
        return rc == IFD_ETOOBIG ? "the image is too big" : "the image URL could not be fetched";
    switch (rc) {
    case IFD_ENOTSUP:
        return "not an image (JPEG, PNG, WebP or GIF)";
    case IFD_ETOOBIG:
        return "the image is too big";
    case IFD_ETRUNC:
        return "the image is truncated";
    default:
        return "the image is corrupt";
    }
}

/* The 400 of a failed step of image im (detail: the library's words, may be
 * NULL); a resize failure is the model's preprocessing (500, IFD_ENOTSUP);
 * IFD_ENOMEM passes through. */
static int ifd__fail(ifd_oai_error_t *e, const ifd_oai_image_t *im, int rc, ifd__step_t step,
                     const ifd_images_setup_t *s, const char *detail)
{
    if (rc == IFD_ENOMEM || rc == IFD_ECANCELED)
        return rc;
    if (step == IFD__RESIZE) {
        ifd_oai_error_set(e, 500, NULL, NULL, NULL,
                          "The model's image preprocessing cannot be run: %s", ifd_strerror(rc));
        return IFD_ENOTSUP;
    }
    char lim[96] = "";
    if (rc == IFD_ETOOBIG)
        snprintf(lim, sizeof lim, " (%s is %llu)",
                 step == IFD__DECODE ? "max_image_pixels" : "max_image_bytes",
                 (unsigned long long)(step == IFD__DECODE ? s->max_pixels : s->max_bytes));
    ifd_oai_error_set(e, 400, NULL, "invalid_value", im->param,
                      "Invalid image in '%s': %s%s%s%.200s", im->param, ifd__why(step, rc), lim,
                      detail && *detail ? ": " : "", detail ? detail : "");
    return IFD_EINVAL;
}

/* Grows out->pics by the n pictures of one image (zeroed). */
static int ifd__grow(ifd_images_t *out, uint32_t n)
{
    ifd_wire_image_t *p = realloc(out->pics, (out->n_pics + n) * sizeof *p);
    if (!p)
        return IFD_ENOMEM;
    memset(p + out->n_pics, 0, n * sizeof *p);
    out->pics = p;
    return 0;
}

/* Image k's pictures appended to out: resized, split, hashed. */
static int ifd__add_pictures(ifd_images_t *out, const ifd_images_setup_t *s,
                             const ifd_image_prep_t *prep, const ifd_image_t *img,
                             const ifd_oai_image_t *im, ifd_oai_error_t *e)
{
    uint32_t n = ifd_image_prep_count(prep, img);
    if (out->n_pics + n > s->max_pictures) {
        ifd_oai_error_set(e, 400, NULL, "invalid_value", im->param,
                          "Too many pictures: the request's images and their pan-and-scan crops "
                          "make more than %u, what one request may carry.",
                          s->max_pictures);
        return IFD_EINVAL;
    }
    size_t bytes = ifd_image_prep_floats(prep, img), one = bytes / n;
    uint8_t *buf = malloc(bytes);
    int rc = buf ? ifd_image_prep_resize(buf, bytes, img, prep) : IFD_ENOMEM;
    bool grown = !rc && !(rc = ifd__grow(out, n));
    for (uint32_t j = 0; !rc && j < n; j++) {
        ifd_wire_image_t *p = &out->pics[out->n_pics + j];
        uint8_t *px = malloc(one);
        if (!px) {
            rc = IFD_ENOMEM;
            break;
        }
        memcpy(px, buf + j * one, one);
        p->pixels = px;
        p->n_pixels = (uint32_t)one;
        p->width = prep->width;
        p->height = prep->height;
        ifd_hash_bytes128(px, one, &p->hash_lo, &p->hash_hi);
    }
    free(buf);
    if (rc) { /* this image's pictures so far (the rest: the caller's unwind) */
        for (uint32_t j = 0; grown && j < n; j++)
            free((void *)out->pics[out->n_pics + j].pixels);
        return ifd__fail(e, im, rc, IFD__RESIZE, s, NULL);
    }
    out->n_pics += n;
    out->n_crops[out->n_images++] = n - 1;
    return 0;
}

/* What a request's image URL fetches share: its cancel flag, and one
 * deadline (CLOCK_MONOTONIC seconds) for all of them, image_url_timeout
 * from the decode's start, so a request holds a pool thread that long at
 * most however many URLs it sends. */
typedef struct {
    const atomic_int *cancel;
    double deadline;
} ifd__job_t;

static double ifd__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Image im's bytes: a data URL's, or an http(s) URL's fetched (checked on
 * the loop by ifd_images_check) within the job's deadline. */
static int ifd__bytes(const ifd_images_setup_t *s, const ifd_oai_image_t *im, const ifd__job_t *job,
                      uint8_t **bytes, size_t *n, ifd_oai_error_t *e)
{
    char msg[256] = "";
    size_t mime_len;
    const char *mime;
    ifd_imgurl_t u;
    if (ifd__has_prefix(im->url, im->url_len, "data:")) {
        int rc = ifd_image_data_url(im->url, im->url_len, s->max_bytes, bytes, n, &mime, &mime_len,
                                    msg, sizeof msg);
        return rc ? ifd__fail(e, im, rc, IFD__URL, s, msg) : 0;
    }
    int rc = ifd_imgurl_parse(&u, im->url, im->url_len, msg, sizeof msg);
    double left = job->deadline - ifd__now();
    if (!rc && left > 0) {
        ifd_imgurl_limits_t lim = {.max_bytes = s->max_bytes,
                                   .timeout_s = left,
                                   .cancel = job->cancel,
                                   .allow = s->allow_urls,
                                   .max_redirects = s->max_redirects};
        rc = ifd_imgurl_fetch(&u, im->url, im->url_len, &lim, bytes, n, msg, sizeof msg);
    }
    if (!rc && left <= 0)
        rc = IFD_ETIMEDOUT;
    if (rc == IFD_ETIMEDOUT)
        snprintf(msg, sizeof msg,
                 "the request's image URLs took longer than image_url_timeout (%g s)",
                 s->url_timeout);
    return rc ? ifd__fail(e, im, rc, IFD__FETCH, s, msg) : 0;
}

/* One image: its URL's bytes, decoded, then its pictures. */
static int ifd__decode_one(ifd_images_t *out, const ifd_images_setup_t *s,
                           const ifd_image_prep_t *prep, const ifd_oai_image_t *im,
                           const ifd__job_t *job, ifd_oai_error_t *e)
{
    char msg[256] = "";
    uint8_t *bytes = NULL;
    size_t n_bytes = 0;
    int rc = ifd__bytes(s, im, job, &bytes, &n_bytes, e);
    if (rc)
        return rc;
    ifd_image_limits_t lim = ifd_image_default_limits();
    lim.max_pixels = s->max_pixels;
    ifd_image_t img;
    rc = ifd_image_decode(&img, bytes, n_bytes, &lim, msg, sizeof msg);
    free(bytes);
    if (rc)
        return ifd__fail(e, im, rc, IFD__DECODE, s, msg);
    rc = ifd__add_pictures(out, s, prep, &img, im, e);
    ifd_image_free(&img);
    return rc;
}

int ifd_images_decode(ifd_images_t *out, const ifd_images_setup_t *s, const ifd_oai_request_t *rq,
                      const atomic_int *cancel, ifd_oai_error_t *e)
{
    memset(out, 0, sizeof *out);
    if (!rq->n_images)
        return 0;
    ifd_image_prep_t prep = s->prep;
    if (rq->do_pan_and_scan >= 0)
        prep.do_pan_and_scan = rq->do_pan_and_scan;
    ifd__job_t job = {cancel, ifd__now() + s->url_timeout};
    out->n_crops = calloc(rq->n_images, sizeof *out->n_crops);
    int rc = out->n_crops ? 0 : IFD_ENOMEM;
    for (size_t k = 0; !rc && k < rq->n_images; k++) {
        if (cancel && atomic_load(cancel))
            rc = IFD_ECANCELED;
        else
            rc = ifd__decode_one(out, s, &prep, &rq->images[k], &job, e);
    }
    if (rc)
        ifd_images_free(out);
    return rc;
}

int ifd_images_place(ifd_images_t *im, const ifd_images_setup_t *s, const ifd_image_pos_t *spans,
                     size_t n_spans)
{
    if (n_spans != im->n_pics)
        return IFD_EINVAL;
    for (size_t k = 0; k < n_spans; k++) {
        if (spans[k].start < 0 || spans[k].len != (int32_t)s->tokens_per_image)
            return IFD_EINVAL;
        im->pics[k].pos = (uint32_t)spans[k].start;
        im->pics[k].n_tokens = (uint32_t)spans[k].len;
    }
    return 0;
}

void ifd_images_free(ifd_images_t *im)
{
    if (!im)
        return;
    for (uint32_t k = 0; k < im->n_pics; k++)
        free((void *)im->pics[k].pixels);
    free(im->pics);
    free(im->n_crops);
    memset(im, 0, sizeof *im);
}
