/*
 * image_webp.c — WebP through libwebp's animation decoder, as Pillow's
 * WebPImagePlugin reads every WebP (still or animated): the first frame on
 * the canvas, non-premultiplied RGBA. Pillow's mode is RGBA when the
 * bitstream's features say it has alpha (then it is composited on white),
 * else RGB (the alpha byte ignored). The canvas size comes from
 * WebPGetFeatures and is checked before the decoder allocates anything.
 */
#include "image_internal.h"

#include "error.h"

#include <stdlib.h>
#include <string.h>

#include <webp/decode.h>
#include <webp/demux.h>

int ifd__image_webp(ifd__image_rgba_t *o, const uint8_t *d, size_t n, const ifd_image_limits_t *lim,
                    char *errbuf, size_t errlen)
{
    WebPBitstreamFeatures f;
    VP8StatusCode st = WebPGetFeatures(d, n, &f);
    if (st == VP8_STATUS_NOT_ENOUGH_DATA)
        return ifd__image_fail(errbuf, errlen, IFD_ETRUNC, "webp: file is truncated");
    if (st != VP8_STATUS_OK)
        return ifd__image_fail(errbuf, errlen, IFD_EFORMAT, "webp: corrupt header (status %d)",
                               (int)st);
    int rc =
        ifd__image_check_size((uint32_t)f.width, (uint32_t)f.height, lim, "webp", errbuf, errlen);
    if (rc)
        return rc;
    WebPAnimDecoderOptions opt;
    if (!WebPAnimDecoderOptionsInit(&opt))
        return ifd__image_fail(errbuf, errlen, IFD_EINTERNAL, "webp: decoder version mismatch");
    opt.color_mode = MODE_RGBA;
    opt.use_threads = 0;
    WebPData data = {.bytes = d, .size = n};
    WebPAnimDecoder *dec = WebPAnimDecoderNew(&data, &opt);
    if (!dec)
        return ifd__image_fail(errbuf, errlen, IFD_EFORMAT, "webp: corrupt or truncated file");
    WebPAnimInfo info;
    uint8_t *frame = NULL;
    int ts = 0;
    if (!WebPAnimDecoderGetInfo(dec, &info) || info.canvas_width != (uint32_t)f.width ||
        info.canvas_height != (uint32_t)f.height) {
        rc = ifd__image_fail(errbuf, errlen, IFD_EFORMAT, "webp: inconsistent canvas size");
        goto out;
    }
    if (!WebPAnimDecoderGetNext(dec, &frame, &ts)) {
        rc = ifd__image_fail(errbuf, errlen, IFD_EFORMAT, "webp: corrupt or truncated frame");
        goto out;
    }
    o->px = ifd__image_alloc_rgba(info.canvas_width, info.canvas_height);
    if (!o->px) {
        rc = ifd__image_fail(errbuf, errlen, IFD_ENOMEM, "webp: out of memory");
        goto out;
    }
    memcpy(o->px, frame, (size_t)info.canvas_width * info.canvas_height * 4);
    o->w = info.canvas_width;
    o->h = info.canvas_height;
    o->has_alpha = f.has_alpha;
out:
    WebPAnimDecoderDelete(dec);
    return rc;
}
