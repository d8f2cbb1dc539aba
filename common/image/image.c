/*
 * image.c — format sniffing, the size limits, and the last step every
 * decoder shares: RGBA to RGB as transformers' convert_to_rgb does it.
 *
 * convert_to_rgb (transformers/image_transforms.py) composites an image
 * with transparency onto opaque white with PIL.Image.alpha_composite and
 * then drops the alpha band; any other image is PIL's convert("RGB"), which
 * the decoders have already produced. ifd__image_composite_white is Pillow's
 * integer alpha_composite (libImaging/AlphaComposite.c: 7 extra bits of
 * precision, divisions by 255 rounded by shift-and-add) with the destination
 * fixed to (255, 255, 255, 255), so every output byte is the one Pillow
 * writes. Then the EXIF orientation, as transformers' load_image applies it
 * (exif_transpose; exif.c).
 */
#include "image_internal.h"

#include "error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ifd_image_limits_t ifd_image_default_limits(void)
{
    return (ifd_image_limits_t){
        .max_pixels = 40u * 1000 * 1000, .max_side = 16384, .max_scans = 256};
}

ifd_image_format_t ifd_image_sniff(const void *data, size_t len)
{
    const uint8_t *d = data;
    if (len >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF)
        return IFD_IMAGE_JPEG;
    if (len >= 8 && memcmp(d, "\x89PNG\r\n\x1a\n", 8) == 0)
        return IFD_IMAGE_PNG;
    if (len >= 12 && memcmp(d, "RIFF", 4) == 0 && memcmp(d + 8, "WEBP", 4) == 0)
        return IFD_IMAGE_WEBP;
    if (len >= 6 && (memcmp(d, "GIF87a", 6) == 0 || memcmp(d, "GIF89a", 6) == 0))
        return IFD_IMAGE_GIF;
    return IFD_IMAGE_UNKNOWN;
}

const char *ifd_image_format_name(ifd_image_format_t f)
{
    static const char *const names[] = {"unknown", "jpeg", "png", "webp", "gif"};
    return (unsigned)f < sizeof names / sizeof names[0] ? names[f] : "unknown";
}

int ifd__image_fail(char *errbuf, size_t errlen, int rc, const char *fmt, ...)
{
    if (errbuf && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(errbuf, errlen, fmt, ap);
        va_end(ap);
    }
    return rc;
}

int ifd__image_check_size(uint32_t w, uint32_t h, const ifd_image_limits_t *lim, const char *what,
                          char *errbuf, size_t errlen)
{
    if (w == 0 || h == 0)
        return ifd__image_fail(errbuf, errlen, IFD_EFORMAT, "%s image has a zero side (%ux%u)",
                               what, w, h);
    if (lim->max_side && (w > lim->max_side || h > lim->max_side))
        return ifd__image_fail(errbuf, errlen, IFD_ETOOBIG,
                               "%s image is %ux%u: a side is over the limit of %u pixels", what, w,
                               h, lim->max_side);
    uint64_t px = (uint64_t)w * h;
    if (lim->max_pixels && px > lim->max_pixels)
        return ifd__image_fail(errbuf, errlen, IFD_ETOOBIG,
                               "%s image is %ux%u (%llu pixels): over the limit of %llu pixels",
                               what, w, h, (unsigned long long)px,
                               (unsigned long long)lim->max_pixels);
    if (px > SIZE_MAX / 4)
        return ifd__image_fail(errbuf, errlen, IFD_ETOOBIG, "%s image is %ux%u: too large", what, w,
                               h);
    return 0;
}

uint8_t *ifd__image_alloc_rgba(uint32_t w, uint32_t h)
{
    return malloc((size_t)w * h * 4);
}

/* Pillow's alpha_composite of (r, g, b, a) over opaque white, one channel. */
static uint8_t ifd__composite_white(uint32_t c, uint32_t a)
{
    enum { PREC = 7 };
    const uint32_t dst = 255, dst_a = 255;
    uint32_t blend = dst_a * (255 - a);
    uint32_t outa255 = a * 255 + blend;
    uint32_t coef1 = a * 255 * 255 * (1u << PREC) / outa255;
    uint32_t coef2 = 255 * (1u << PREC) - coef1;
    uint32_t t = c * coef1 + dst * coef2 + (0x80u << PREC);
    return (uint8_t)((((t >> 8) + t) >> 8) >> PREC);
}

/* RGBA → RGB in place (the buffer shrinks to 3 bytes a pixel). */
static void ifd__rgba_to_rgb(uint8_t *px, size_t n, int composite)
{
    for (size_t i = 0; i < n; i++) {
        const uint8_t *s = px + i * 4;
        uint8_t *d = px + i * 3;
        uint8_t r = s[0], g = s[1], b = s[2], a = s[3];
        if (composite && a != 255) {
            if (a == 0) {
                r = g = b = 255;
            } else {
                r = ifd__composite_white(r, a);
                g = ifd__composite_white(g, a);
                b = ifd__composite_white(b, a);
            }
        }
        d[0] = r;
        d[1] = g;
        d[2] = b;
    }
}

int ifd_image_decode(ifd_image_t *out, const void *data, size_t len, const ifd_image_limits_t *lim,
                     char *errbuf, size_t errlen)
{
    typedef int (*decode_fn)(ifd__image_rgba_t *, const uint8_t *, size_t,
                             const ifd_image_limits_t *, char *, size_t);
    static const decode_fn decoders[] = {
        [IFD_IMAGE_JPEG] = ifd__image_jpeg,
        [IFD_IMAGE_PNG] = ifd__image_png,
        [IFD_IMAGE_WEBP] = ifd__image_webp,
        [IFD_IMAGE_GIF] = ifd__image_gif,
    };
    memset(out, 0, sizeof *out);
    if (errbuf && errlen)
        errbuf[0] = '\0';
    ifd_image_limits_t dl = ifd_image_default_limits();
    if (!lim)
        lim = &dl;
    ifd_image_format_t f = ifd_image_sniff(data, len);
    if (f == IFD_IMAGE_UNKNOWN)
        return ifd__image_fail(errbuf, errlen, IFD_ENOTSUP,
                               "not an image: the bytes are no JPEG, PNG, WebP or GIF");
    ifd__image_rgba_t raw = {0};
    int rc = decoders[f](&raw, data, len, lim, errbuf, errlen);
    if (rc) {
        IFD_ASSERT(raw.px == NULL);
        return rc;
    }
    size_t n = (size_t)raw.w * raw.h;
    ifd__rgba_to_rgb(raw.px, n, raw.has_alpha);
    uint8_t *rgb = realloc(raw.px, n * 3);
    out->rgb = rgb ? rgb : raw.px;
    out->width = raw.w;
    out->height = raw.h;
    out->format = f;
    out->orientation = 1;
    if (raw.orientation >= 2 && raw.orientation <= 8) {
        if (ifd__image_transpose_rgb(&out->rgb, &out->width, &out->height, raw.orientation)) {
            ifd_image_free(out);
            return ifd__image_fail(errbuf, errlen, IFD_ENOMEM,
                                   "out of memory for the EXIF orientation's copy");
        }
        out->orientation = (uint8_t)raw.orientation;
    }
    return 0;
}

void ifd_image_free(ifd_image_t *img)
{
    if (!img)
        return;
    free(img->rgb);
    memset(img, 0, sizeof *img);
}
