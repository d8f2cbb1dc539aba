/*
 * image_gif.c — the first frame of a GIF through giflib, as Pillow's
 * GifImagePlugin gives it: the picture is the logical screen (grown to hold
 * the frame if the frame reaches past it); outside the frame every pixel is
 * the transparent index when the frame's graphic control extension names
 * one, else index 0; indices map through the frame's local colour map, else
 * the global one; entries past the map are black, and a GIF without any
 * colour map (or whose map is the grey ramp) shows the index as grey — both
 * as Pillow does. The transparent index makes the image transparent
 * (composited on white).
 * Frames after the first are never read, so an animation costs one frame.
 */
#include "image_internal.h"

#include "error.h"

#include <stdlib.h>
#include <string.h>

#include <gif_lib.h>

typedef struct {
    const uint8_t *d;
    size_t n, off;
    int short_read;
} ifd__gif_src_t;

static int ifd__gif_read(GifFileType *g, GifByteType *out, int len)
{
    ifd__gif_src_t *s = g->UserData;
    size_t want = len < 0 ? 0 : (size_t)len;
    if (want > s->n - s->off) {
        want = s->n - s->off;
        s->short_read = 1;
    }
    memcpy(out, s->d + s->off, want);
    s->off += want;
    return (int)want;
}

/* The 256-entry RGB table of the frame, as Pillow builds it: entries past the map are black
 * (its palette is padded with zeros); no map, or a map that is the grey ramp itself (Pillow
 * then opens the frame as L, the index being the grey), gives the ramp for every index. */
static void ifd__gif_palette(uint8_t pal[256][3], const ColorMapObject *map)
{
    int ramp = 1;
    for (int i = 0; map && map->Colors && i < map->ColorCount && i < 256; i++) {
        const GifColorType *c = &map->Colors[i];
        ramp &= c->Red == i && c->Green == i && c->Blue == i;
    }
    for (int i = 0; i < 256; i++) {
        uint8_t v = ramp ? (uint8_t)i : 0;
        pal[i][0] = pal[i][1] = pal[i][2] = v;
    }
    if (ramp)
        return;
    for (int i = 0; i < map->ColorCount && i < 256; i++) {
        pal[i][0] = map->Colors[i].Red;
        pal[i][1] = map->Colors[i].Green;
        pal[i][2] = map->Colors[i].Blue;
    }
}

static int ifd__gif_error(const ifd__gif_src_t *s, int code, char *errbuf, size_t errlen)
{
    if (s->short_read)
        return ifd__image_fail(errbuf, errlen, IFD_ETRUNC, "gif: file is truncated");
    const char *m = GifErrorString(code);
    return ifd__image_fail(errbuf, errlen, IFD_EFORMAT, "gif: %s", m ? m : "corrupt file");
}

/* Reads the frame's rows (interlaced ones in their four passes) into idx. */
static int ifd__gif_rows(GifFileType *g, uint8_t *idx, uint32_t fw, uint32_t fh)
{
    static const uint32_t start[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
    if (!g->Image.Interlace) {
        for (uint32_t y = 0; y < fh; y++)
            if (DGifGetLine(g, idx + (size_t)y * fw, (int)fw) != GIF_OK)
                return -1;
        return 0;
    }
    for (int p = 0; p < 4; p++)
        for (uint32_t y = start[p]; y < fh; y += step[p])
            if (DGifGetLine(g, idx + (size_t)y * fw, (int)fw) != GIF_OK)
                return -1;
    return 0;
}

int ifd__image_gif(ifd__image_rgba_t *o, const uint8_t *d, size_t n, const ifd_image_limits_t *lim,
                   char *errbuf, size_t errlen)
{
    ifd__gif_src_t src = {.d = d, .n = n};
    int err = 0, rc = 0, trans = -1;
    uint8_t *idx = NULL;
    GifFileType *g = DGifOpen(&src, ifd__gif_read, &err);
    if (!g)
        return ifd__gif_error(&src, err, errbuf, errlen);
    rc = ifd__image_check_size((uint32_t)g->SWidth, (uint32_t)g->SHeight, lim, "gif", errbuf,
                               errlen);
    for (GifRecordType t = UNDEFINED_RECORD_TYPE; !rc && t != IMAGE_DESC_RECORD_TYPE;) {
        if (DGifGetRecordType(g, &t) != GIF_OK) {
            rc = ifd__gif_error(&src, g->Error, errbuf, errlen);
        } else if (t == EXTENSION_RECORD_TYPE) {
            int code;
            GifByteType *ext = NULL;
            if (DGifGetExtension(g, &code, &ext) != GIF_OK) {
                rc = ifd__gif_error(&src, g->Error, errbuf, errlen);
                break;
            }
            GraphicsControlBlock gcb;
            if (code == GRAPHICS_EXT_FUNC_CODE && ext &&
                DGifExtensionToGCB(ext[0], ext + 1, &gcb) == GIF_OK)
                trans = gcb.TransparentColor;
            while (ext && !rc)
                if (DGifGetExtensionNext(g, &ext) != GIF_OK)
                    rc = ifd__gif_error(&src, g->Error, errbuf, errlen);
        } else if (t == TERMINATE_RECORD_TYPE) {
            rc = ifd__image_fail(errbuf, errlen, IFD_EFORMAT, "gif: no frame");
        } else if (t == IMAGE_DESC_RECORD_TYPE && DGifGetImageDesc(g) != GIF_OK) {
            rc = ifd__gif_error(&src, g->Error, errbuf, errlen);
        }
    }
    if (rc)
        goto out;
    const GifImageDesc *fd = &g->Image;
    uint32_t fx = (uint32_t)fd->Left, fy = (uint32_t)fd->Top;
    uint32_t fw = (uint32_t)fd->Width, fh = (uint32_t)fd->Height;
    uint32_t w = (uint32_t)g->SWidth, h = (uint32_t)g->SHeight;
    if (fx + fw > w)
        w = fx + fw;
    if (fy + fh > h)
        h = fy + fh;
    rc = ifd__image_check_size(w, h, lim, "gif", errbuf, errlen);
    if (!rc)
        rc = ifd__image_check_size(fw, fh, lim, "gif frame of", errbuf, errlen);
    if (rc)
        goto out;
    idx = malloc((size_t)fw * fh);
    o->px = ifd__image_alloc_rgba(w, h);
    if (!idx || !o->px) {
        rc = ifd__image_fail(errbuf, errlen, IFD_ENOMEM, "gif: out of memory for %ux%u", w, h);
        goto out;
    }
    if (ifd__gif_rows(g, idx, fw, fh)) {
        rc = ifd__gif_error(&src, g->Error, errbuf, errlen);
        goto out;
    }
    uint8_t pal[256][3];
    ifd__gif_palette(pal, fd->ColorMap ? fd->ColorMap : g->SColorMap);
    uint8_t fill = trans >= 0 ? (uint8_t)trans : 0;
    for (uint32_t y = 0; y < h; y++) {
        for (uint32_t x = 0; x < w; x++) {
            int inside = x >= fx && x < fx + fw && y >= fy && y < fy + fh;
            uint8_t i = inside ? idx[(size_t)(y - fy) * fw + (x - fx)] : fill;
            uint8_t *p = o->px + ((size_t)y * w + x) * 4;
            memcpy(p, pal[i], 3);
            p[3] = (int)i == trans ? 0 : 255;
        }
    }
    o->w = w;
    o->h = h;
    o->has_alpha = trans >= 0;
out:
    free(idx);
    if (rc) {
        free(o->px);
        o->px = NULL;
    }
    DGifCloseFile(g, &err);
    return rc;
}
