/*
 * preprocess.c — Gemma3ImageProcessor's pixel_values (preprocess.h). The
 * float arithmetic is numpy's, step by step: rescale multiplies the uint8
 * value as float64 by rescale_factor and rounds to float32; normalize
 * subtracts and divides in float32 with mean and std rounded to float32 —
 * computed once per channel for the 256 byte values and looked up.
 * Pan-and-scan is the processor's pan_and_scan: crop counts in float64
 * (floor(w / h + 0.5), capped by floor(w / min_crop) and max_num_crops, at
 * least 2), crop sides ceil(w / n), crops clipped at the image's edge as a
 * numpy slice is.
 */
#include "preprocess.h"

#include "image_internal.h"

#include "error.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

ifd_image_prep_t ifd_image_prep_gemma3(void)
{
    return (ifd_image_prep_t){
        .height = 896,
        .width = 896,
        .resample = IFD_RESAMPLE_BILINEAR,
        .rescale_factor = 0.00392156862745098,
        .mean = {0.5, 0.5, 0.5},
        .std = {0.5, 0.5, 0.5},
        .do_pan_and_scan = 0,
        .pas_min_crop_size = 256,
        .pas_max_num_crops = 4,
        .pas_min_ratio = 1.2,
    };
}

uint32_t ifd_image_prep_crops(const ifd_image_prep_t *p, uint32_t w, uint32_t h,
                              uint32_t (*boxes)[4], uint32_t max)
{
    if (!p->do_pan_and_scan || !w || !h || !p->pas_min_crop_size || !p->pas_max_num_crops)
        return 0;
    /* long = the longer side, short = the other; n crops along the long side. */
    int wide = w >= h;
    uint32_t lg = wide ? w : h, sh = wide ? h : w;
    if ((double)lg / sh < p->pas_min_ratio)
        return 0;
    double n = floor((double)lg / sh + 0.5);
    n = fmin(floor((double)lg / p->pas_min_crop_size), n);
    n = fmax(2, n);
    n = fmin(p->pas_max_num_crops, n);
    uint32_t ncw = wide ? (uint32_t)n : 1, nch = wide ? 1 : (uint32_t)n;
    uint32_t cw = (uint32_t)ceil((double)w / ncw), chh = (uint32_t)ceil((double)h / nch);
    if ((cw < chh ? cw : chh) < p->pas_min_crop_size)
        return 0;
    uint32_t count = 0;
    for (uint32_t i = 0; i < nch; i++) {
        for (uint32_t j = 0; j < ncw; j++, count++) {
            if (!boxes || count >= max)
                continue;
            uint32_t x = cw * j, y = chh * i;
            boxes[count][0] = x;
            boxes[count][1] = y;
            boxes[count][2] = x < w ? (w - x < cw ? w - x : cw) : 0;
            boxes[count][3] = y < h ? (h - y < chh ? h - y : chh) : 0;
        }
    }
    return count;
}

uint32_t ifd_image_prep_count(const ifd_image_prep_t *p, const ifd_image_t *img)
{
    return 1 + ifd_image_prep_crops(p, img->width, img->height, NULL, 0);
}

size_t ifd_image_prep_floats(const ifd_image_prep_t *p, const ifd_image_t *img)
{
    return (size_t)ifd_image_prep_count(p, img) * 3 * p->height * p->width;
}

int ifd_image_prep_resize(uint8_t *out, size_t n, const ifd_image_t *img, const ifd_image_prep_t *p)
{
    if (!img->rgb || !img->width || !img->height || !p->width || !p->height)
        return IFD_EINVAL;
    uint32_t boxes[IFD_IMAGE_MAX_CROPS + 1][4];
    uint32_t nc = ifd_image_prep_crops(p, img->width, img->height, boxes + 1, IFD_IMAGE_MAX_CROPS);
    if (nc > IFD_IMAGE_MAX_CROPS)
        return IFD_ENOTSUP;
    size_t per = (size_t)3 * p->height * p->width;
    if (n < per * (1 + nc))
        return IFD_ERANGE;
    memcpy(boxes[0], (uint32_t[4]){0, 0, img->width, img->height}, sizeof boxes[0]);
    size_t stride = (size_t)img->width * 3;
    int rc = 0;
    for (uint32_t i = 0; i <= nc && !rc; i++) {
        const uint8_t *src = img->rgb + (size_t)boxes[i][1] * stride + (size_t)boxes[i][0] * 3;
        rc = ifd_image_resize(out + per * i, p->width, p->height, src, boxes[i][2], boxes[i][3],
                              stride, p->resample);
    }
    return rc;
}

void ifd_image_prep_normalize(float *out, const uint8_t *pics, uint32_t count,
                              const ifd_image_prep_t *p)
{
    /* A byte has 256 values: each channel's are computed once, with numpy's steps. */
    float lut[3][256];
    for (int c = 0; c < 3; c++) {
        float m = (float)p->mean[c], s = (float)p->std[c];
        for (int v = 0; v < 256; v++)
            lut[c][v] = ((float)((double)v * p->rescale_factor) - m) / s;
    }
    size_t plane = (size_t)p->height * p->width;
    for (uint32_t k = 0; k < count; k++) {
        const uint8_t *pic = pics + plane * 3 * k;
        for (int c = 0; c < 3; c++) {
            float *o = out + plane * (3 * (size_t)k + c);
            for (size_t i = 0; i < plane; i++)
                o[i] = lut[c][pic[i * 3 + c]];
        }
    }
}

int ifd_image_preprocess(float *out, size_t n, const ifd_image_t *img, const ifd_image_prep_t *p)
{
    if (!img->rgb || !img->width || !img->height || !p->width || !p->height)
        return IFD_EINVAL;
    size_t floats = ifd_image_prep_floats(p, img);
    if (n < floats)
        return IFD_ERANGE;
    uint8_t *pics = malloc(floats);
    if (!pics)
        return IFD_ENOMEM;
    int rc = ifd_image_prep_resize(pics, floats, img, p);
    if (!rc)
        ifd_image_prep_normalize(out, pics, ifd_image_prep_count(p, img), p);
    free(pics);
    return rc;
}

/* ---- preprocessor_config.json ------------------------------------------- */

static int ifd__prep_u32(const json_t *o, const char *key, uint32_t *dst, char *errbuf,
                         size_t errlen)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 65535) {
        return ifd__image_fail(errbuf, errlen, IFD_EFORMAT,
                               "preprocessor_config.json: '%s' must be an integer from 1 to 65535",
                               key);
    }
    *dst = (uint32_t)json_integer_value(v);
    return 0;
}

static int ifd__prep_num(const json_t *o, const char *key, double *dst, char *errbuf, size_t errlen)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v) || !isfinite(json_number_value(v))) {
        return ifd__image_fail(errbuf, errlen, IFD_EFORMAT,
                               "preprocessor_config.json: '%s' must be a number", key);
    }
    *dst = json_number_value(v);
    return 0;
}

/* image_mean / image_std: three numbers or one for every channel. */
static int ifd__prep_triple(const json_t *o, const char *key, double dst[3], char *errbuf,
                            size_t errlen)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (json_is_number(v)) {
        dst[0] = dst[1] = dst[2] = json_number_value(v);
        return 0;
    }
    if (json_is_array(v) && json_array_size(v) == 3) {
        double t[3];
        for (int i = 0; i < 3; i++) {
            const json_t *e = json_array_get(v, i);
            if (!json_is_number(e))
                goto bad;
            t[i] = json_number_value(e);
        }
        memcpy(dst, t, sizeof t);
        return 0;
    }
bad:
    return ifd__image_fail(errbuf, errlen, IFD_EFORMAT,
                           "preprocessor_config.json: '%s' must be a number or 3 numbers", key);
}

int ifd_image_prep_from_json(ifd_image_prep_t *p, const char *json, size_t len, char *errbuf,
                             size_t errlen)
{
    static const char *const steps[] = {"do_resize", "do_rescale", "do_normalize",
                                        "do_convert_rgb"};
    json_error_t je = {0};
    json_t *o = json_loadb(json, len, 0, &je);
    if (!o || !json_is_object(o)) {
        json_decref(o);
        return ifd__image_fail(errbuf, errlen, IFD_EFORMAT,
                               "preprocessor_config.json: not a JSON object (%s)", je.text);
    }
    ifd_image_prep_t t = ifd_image_prep_gemma3();
    int rc = 0;
    for (size_t i = 0; i < sizeof steps / sizeof steps[0] && !rc; i++)
        if (json_is_false(json_object_get(o, steps[i]))) {
            rc =
                ifd__image_fail(errbuf, errlen, IFD_ENOTSUP,
                                "preprocessor_config.json: '%s': false is not supported", steps[i]);
        }
    const json_t *size = json_object_get(o, "size");
    if (!rc && size && !json_is_null(size)) {
        if (!json_is_object(size) || !json_object_get(size, "height") ||
            !json_object_get(size, "width")) {
            rc = ifd__image_fail(errbuf, errlen, IFD_ENOTSUP,
                                 "preprocessor_config.json: 'size' must hold 'height' and 'width'");
        } else {
            rc = ifd__prep_u32(size, "height", &t.height, errbuf, errlen);
            if (!rc)
                rc = ifd__prep_u32(size, "width", &t.width, errbuf, errlen);
        }
    }
    uint32_t resample = t.resample;
    const json_t *rs = json_object_get(o, "resample");
    if (!rc && json_is_integer(rs) && json_integer_value(rs) == 0) {
        rc = ifd__image_fail(errbuf, errlen, IFD_ENOTSUP,
                             "preprocessor_config.json: 'resample': 0 (NEAREST) is not supported");
    }
    if (!rc)
        rc = ifd__prep_u32(o, "resample", &resample, errbuf, errlen);
    if (!rc && resample > IFD_RESAMPLE_HAMMING) {
        rc = ifd__image_fail(errbuf, errlen, IFD_EFORMAT,
                             "preprocessor_config.json: 'resample': %u is no PIL filter", resample);
    }
    t.resample = (ifd_resample_t)resample;
    if (!rc)
        rc = ifd__prep_num(o, "rescale_factor", &t.rescale_factor, errbuf, errlen);
    if (!rc)
        rc = ifd__prep_triple(o, "image_mean", t.mean, errbuf, errlen);
    if (!rc)
        rc = ifd__prep_triple(o, "image_std", t.std, errbuf, errlen);
    const json_t *pas = json_object_get(o, "do_pan_and_scan");
    if (!rc && pas && !json_is_null(pas)) {
        if (!json_is_boolean(pas)) {
            rc = ifd__image_fail(errbuf, errlen, IFD_EFORMAT,
                                 "preprocessor_config.json: 'do_pan_and_scan' must be a boolean");
        }
        t.do_pan_and_scan = json_is_true(pas);
    }
    if (!rc)
        rc = ifd__prep_u32(o, "pan_and_scan_min_crop_size", &t.pas_min_crop_size, errbuf, errlen);
    if (!rc)
        rc = ifd__prep_u32(o, "pan_and_scan_max_num_crops", &t.pas_max_num_crops, errbuf, errlen);
    if (!rc)
        rc = ifd__prep_num(o, "pan_and_scan_min_ratio_to_activate", &t.pas_min_ratio, errbuf,
                           errlen);
    if (!rc && t.pas_max_num_crops > IFD_IMAGE_MAX_CROPS) {
        rc = ifd__image_fail(errbuf, errlen, IFD_ENOTSUP,
                             "preprocessor_config.json: 'pan_and_scan_max_num_crops' over %d",
                             IFD_IMAGE_MAX_CROPS);
    }
    json_decref(o);
    if (!rc)
        *p = t;
    return rc;
}
