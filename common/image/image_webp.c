/*
 * image_webp.c — WebP through libwebp, as Pillow's WebPImagePlugin reads it
 * (its animation decoder for every file): the first frame on the canvas,
 * non-premultiplied RGBA. A still image is decoded straight into the output
 * (WebPDecodeRGBAInto: the same pixels without the decoder's two canvases);
 * an animation goes through WebPAnimDecoder, which decodes its first frame
 * only. Pillow's mode is RGBA when the bitstream's features say it has
 * alpha (then it is composited on white), else RGB (the alpha byte
 * ignored). The canvas size comes from WebPGetFeatures and is checked
 * before anything is allocated. An EXIF (or XMP) chunk gives the EXIF
 * orientation (exif.c).
 */
#include "image_internal.h"

#include "error.h"

#include <stdlib.h>
#include <string.h>

#include <webp/decode.h>
#include <webp/demux.h>

/* The EXIF orientation of an extended (VP8X) WebP: its first EXIF chunk, else its first
 * "XMP " chunk, as Pillow's WebPImagePlugin gets them from libwebpdemux. */
static int ifd__webp_orientation(const uint8_t *d, size_t n)
{
    WebPData data = {.bytes = d, .size = n};
    WebPDemuxer *dmx = WebPDemux(&data);
    if (!dmx)
        return 1;
    WebPChunkIterator ex, xm;
    int has_ex = WebPDemuxGetChunk(dmx, "EXIF", 1, &ex);
    int has_xm = WebPDemuxGetChunk(dmx, "XMP ", 1, &xm);
    int o = ifd__image_orientation(has_ex ? ex.chunk.bytes : NULL, has_ex ? ex.chunk.size : 0,
                                   has_xm ? xm.chunk.bytes : NULL, has_xm ? xm.chunk.size : 0);
    if (has_ex)
        WebPDemuxReleaseChunkIterator(&ex);
    if (has_xm)
        WebPDemuxReleaseChunkIterator(&xm);
    WebPDemuxDelete(dmx);
    return o;
}

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
    if (!f.has_animation) {
        /* A still image: decoded straight into our buffer (the animation decoder would hold
         * two canvases more); the same pixels as its first frame. */
        size_t bytes = (size_t)f.width * f.height * 4;
        o->px = ifd__image_alloc_rgba((uint32_t)f.width, (uint32_t)f.height);
        if (!o->px)
            return ifd__image_fail(errbuf, errlen, IFD_ENOMEM, "webp: out of memory");
        if (!WebPDecodeRGBAInto(d, n, o->px, bytes, f.width * 4)) {
            free(o->px);
            o->px = NULL;
            return ifd__image_fail(errbuf, errlen, IFD_EFORMAT, "webp: corrupt or truncated data");
        }
        o->w = (uint32_t)f.width;
        o->h = (uint32_t)f.height;
        o->has_alpha = f.has_alpha;
        o->orientation = ifd__webp_orientation(d, n);
        return 0;
    }
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
    o->orientation = ifd__webp_orientation(d, n);
out:
    WebPAnimDecoderDelete(dec);
    return rc;
}
