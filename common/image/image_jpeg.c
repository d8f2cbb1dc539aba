/*
 * image_jpeg.c — JPEG through libjpeg(-turbo), set up as Pillow's JpegDecode
 * does: the decoder's own colour-space guess, default IDCT (islow) and fancy
 * upsampling; 1 component is grey (L), 3 are RGB, 4 are Adobe CMYK (or YCCK
 * converted to CMYK by libjpeg) read inverted ("CMYK;I") and turned into RGB
 * with Pillow's cmyk2rgb. A premature end of data is an error (Pillow:
 * "image file is truncated"); the other corrupt-data warnings are not (Pillow
 * ignores them). libjpeg reports fatal errors by calling error_exit, which
 * longjmps back here; what was allocated is freed on that path. The APP1
 * segments (Exif, XMP) give the EXIF orientation (exif.c).
 */
#include "image_internal.h"

#include "error.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

typedef struct {
    struct jpeg_error_mgr pub;
    struct jpeg_progress_mgr progress;
    jmp_buf jmp;
    int rc;             /* the code of the failure longjmp reports */
    uint32_t max_scans; /* 0: no limit */
    char msg[JMSG_LENGTH_MAX];
} ifd__jpeg_err_t;

static void ifd__jpeg_error_exit(j_common_ptr cinfo)
{
    ifd__jpeg_err_t *e = (ifd__jpeg_err_t *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, e->msg);
    e->rc = IFD_EFORMAT;
    longjmp(e->jmp, 1);
}

/* Warnings (level -1) other than a premature end are ignored, as Pillow does. */
static void ifd__jpeg_emit(j_common_ptr cinfo, int level)
{
    ifd__jpeg_err_t *e = (ifd__jpeg_err_t *)cinfo->err;
    if (level == -1 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
        (*cinfo->err->format_message)(cinfo, e->msg);
        e->rc = IFD_ETRUNC;
        longjmp(e->jmp, 1);
    }
}

/* A progressive file with thousands of tiny scans costs minutes of CPU (a known
 * libjpeg-turbo bomb): stop after max_scans. */
static void ifd__jpeg_progress(j_common_ptr cinfo)
{
    ifd__jpeg_err_t *e = (ifd__jpeg_err_t *)cinfo->err;
    j_decompress_ptr d = (j_decompress_ptr)cinfo;
    if (e->max_scans && d->input_scan_number > (int)e->max_scans) {
        snprintf(e->msg, sizeof e->msg, "progressive JPEG has over %u scans", e->max_scans);
        e->rc = IFD_ETOOBIG;
        longjmp(e->jmp, 1);
    }
}

/* Pillow's cmyk2rgb on "CMYK;I" input (c = 255 - raw): MULDIV255 and CLIP8. */
static uint8_t ifd__cmyk_channel(uint8_t raw_c, uint8_t raw_k)
{
    int nk = raw_k; /* 255 - (255 - raw_k) */
    int t = (255 - raw_c) * nk + 128;
    int v = nk - (((t >> 8) + t) >> 8);
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* The EXIF orientation of the APP1 segments libjpeg saved (read before SOS, as Pillow's
 * header loop reads them): the Exif segments joined as Pillow joins them (the first whole,
 * later ones without their "Exif\0\0"), else the last XMP segment after its first NUL. */
static int ifd__jpeg_orientation(j_decompress_ptr cinfo)
{
    static const char xmp_id[] = "http://ns.adobe.com/xap/1.0/";
    size_t total = 0;
    const jpeg_saved_marker_ptr first = cinfo->marker_list;
    const uint8_t *xmp = NULL;
    size_t n_xmp = 0;
    for (jpeg_saved_marker_ptr m = first; m; m = m->next) {
        if (m->marker != JPEG_APP0 + 1)
            continue;
        if (m->data_length >= 6 && memcmp(m->data, "Exif\0\0", 6) == 0)
            total += total ? m->data_length - 6 : m->data_length;
        else if (m->data_length >= sizeof xmp_id && memcmp(m->data, xmp_id, sizeof xmp_id) == 0)
            xmp = m->data + sizeof xmp_id, n_xmp = m->data_length - sizeof xmp_id;
    }
    if (!total)
        return ifd__image_orientation(NULL, 0, xmp, n_xmp);
    uint8_t *exif = malloc(total);
    if (!exif)
        return 1;
    size_t at = 0;
    for (jpeg_saved_marker_ptr m = first; m; m = m->next) {
        if (m->marker != JPEG_APP0 + 1 || m->data_length < 6 || memcmp(m->data, "Exif\0\0", 6))
            continue;
        size_t skip = at ? 6 : 0;
        memcpy(exif + at, m->data + skip, m->data_length - skip);
        at += m->data_length - skip;
    }
    int o = ifd__image_orientation(exif, total, xmp, n_xmp);
    free(exif);
    return o;
}

/* Expands row `y` (decoded in place at the end of its RGBA row) to RGBA. */
static void ifd__jpeg_expand(uint8_t *row, uint32_t w, int comps)
{
    const uint8_t *s = row + (size_t)w * 4 - (size_t)w * comps;
    for (uint32_t x = 0; x < w; x++, s += comps) {
        uint8_t *d = row + (size_t)x * 4;
        uint8_t r, g, b;
        if (comps == 1) {
            r = g = b = s[0];
        } else if (comps == 3) {
            r = s[0], g = s[1], b = s[2];
        } else {
            r = ifd__cmyk_channel(s[0], s[3]);
            g = ifd__cmyk_channel(s[1], s[3]);
            b = ifd__cmyk_channel(s[2], s[3]);
        }
        d[0] = r, d[1] = g, d[2] = b, d[3] = 255;
    }
}

int ifd__image_jpeg(ifd__image_rgba_t *o, const uint8_t *d, size_t n, const ifd_image_limits_t *lim,
                    char *errbuf, size_t errlen)
{
    struct jpeg_decompress_struct cinfo;
    ifd__jpeg_err_t e = {.max_scans = lim->max_scans};
    uint8_t *volatile px = NULL;
    int rc;

    cinfo.err = jpeg_std_error(&e.pub);
    e.pub.error_exit = ifd__jpeg_error_exit;
    e.pub.emit_message = ifd__jpeg_emit;
    if (setjmp(e.jmp)) {
        jpeg_destroy_decompress(&cinfo);
        free(px);
        o->px = NULL;
        return ifd__image_fail(errbuf, errlen, e.rc, "jpeg: %s", e.msg);
    }
    jpeg_create_decompress(&cinfo);
    e.progress.progress_monitor = ifd__jpeg_progress;
    cinfo.progress = &e.progress;
    jpeg_mem_src(&cinfo, d, (unsigned long)n);
    jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xFFFF);
    jpeg_read_header(&cinfo, TRUE);
    rc = ifd__image_check_size(cinfo.image_width, cinfo.image_height, lim, "jpeg", errbuf, errlen);
    if (rc)
        goto fail;
    int comps = cinfo.num_components;
    if (comps == 1)
        cinfo.out_color_space = JCS_GRAYSCALE;
    else if (comps == 3)
        cinfo.out_color_space = JCS_RGB;
    else if (comps == 4)
        cinfo.out_color_space = JCS_CMYK;
    else {
        rc = ifd__image_fail(errbuf, errlen, IFD_ENOTSUP, "jpeg: %d components are not supported",
                             comps);
        goto fail;
    }
    const int orientation = ifd__jpeg_orientation(&cinfo);
    jpeg_start_decompress(&cinfo);
    uint32_t w = cinfo.output_width, h = cinfo.output_height;
    px = ifd__image_alloc_rgba(w, h);
    if (!px) {
        rc = ifd__image_fail(errbuf, errlen, IFD_ENOMEM, "jpeg: out of memory for %ux%u", w, h);
        goto fail;
    }
    while (cinfo.output_scanline < h) {
        uint8_t *row = px + (size_t)cinfo.output_scanline * w * 4;
        JSAMPROW dst = row + (size_t)w * 4 - (size_t)w * comps;
        jpeg_read_scanlines(&cinfo, &dst, 1);
        ifd__jpeg_expand(row, w, comps);
    }
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    o->w = w;
    o->h = h;
    o->px = px;
    o->has_alpha = 0;
    o->orientation = orientation;
    return 0;
fail:
    jpeg_destroy_decompress(&cinfo);
    free(px);
    return rc;
}
