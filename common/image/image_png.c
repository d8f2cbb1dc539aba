/*
 * image_png.c — PNG through libpng, giving the pixels Pillow's PngImagePlugin
 * gives, then what PIL's convert("RGBA") / convert("RGB") make of them:
 *   - palette: expanded through PLTE, tRNS as per-entry alpha (Pillow's
 *     int or bytes "transparency" both come to that);
 *   - grey 1/2/4/8-bit: expanded to 8 bits (×255, ×85, ×17: Pillow's "1",
 *     "L;2", "L;4" unpackers); a tRNS grey is compared against the 8-bit
 *     value as the chunk gives it (Pillow's convert_transparent), except for
 *     1-bit, whose tRNS Pillow maps to 0 or 255;
 *   - grey 16-bit: Pillow's "I;16", which convert("RGB") clips to 255;
 *   - other 16-bit images: the high byte of each sample ("RGB;16B" etc.);
 *   - RGB tRNS: the 8-bit pixel compared against the chunk's raw values.
 * Gamma, sRGB, iCCP and sBIT chunks are not applied (Pillow applies none).
 * libpng reports errors through longjmp; the row buffers are freed on that
 * path. Truncation is told from corruption by whether the reader ran out.
 * The eXIf chunk (or an XMP text chunk) gives the EXIF orientation (exif.c).
 */
#include "image_internal.h"

#include "error.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <png.h>

typedef struct {
    const uint8_t *d;
    size_t n, off;
    int short_read;
    char msg[160];
} ifd__png_src_t;

static void ifd__png_read(png_structp png, png_bytep out, png_size_t len)
{
    ifd__png_src_t *s = png_get_io_ptr(png);
    if (len > s->n - s->off) {
        s->short_read = 1;
        png_error(png, "file ends early");
    }
    memcpy(out, s->d + s->off, len);
    s->off += len;
}

static void ifd__png_error(png_structp png, png_const_charp msg)
{
    ifd__png_src_t *s = png_get_error_ptr(png);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void ifd__png_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

/* The tRNS colour of a grey or RGB image as Pillow compares it, or -1 per channel. */
typedef struct {
    int on;
    int v[3];
} ifd__png_key_t;

static ifd__png_key_t ifd__png_key(png_structp png, png_infop info, int ctype, int depth)
{
    ifd__png_key_t k = {0, {-1, -1, -1}};
    png_color_16p c = NULL;
    if (!png_get_valid(png, info, PNG_INFO_tRNS) || png_get_tRNS(png, info, NULL, NULL, &c) == 0 ||
        !c)
        return k;
    k.on = 1;
    if (ctype == PNG_COLOR_TYPE_GRAY) {
        k.v[0] = depth == 1 ? (c->gray ? 255 : 0) : c->gray;
    } else {
        k.v[0] = c->red, k.v[1] = c->green, k.v[2] = c->blue;
    }
    return k;
}

/* Row `y` of the libpng output (ch channels, 8 or 16 bits) into RGBA. */
static void ifd__png_row(uint8_t *dst, const uint8_t *src, uint32_t w, int ch, int b16,
                         const ifd__png_key_t *key)
{
    for (uint32_t x = 0; x < w; x++, dst += 4) {
        uint8_t v[4] = {0, 0, 0, 255};
        int raw16 = 0;
        for (int c = 0; c < ch; c++) {
            if (b16) {
                const uint8_t *p = src + ((size_t)x * ch + c) * 2;
                v[c] = p[0];
                raw16 = p[0] << 8 | p[1];
            } else {
                v[c] = src[(size_t)x * ch + c];
            }
        }
        if (ch <= 2) { /* grey, grey + alpha */
            uint8_t a = ch == 2 ? v[1] : 255;
            if (ch == 1 && b16) /* "I;16" → RGB clips */
                v[0] = raw16 > 255 ? 255 : (uint8_t)raw16;
            if (key->on && (b16 ? raw16 : v[0]) == key->v[0])
                a = 0;
            v[1] = v[2] = v[0];
            v[3] = a;
        } else if (ch == 3 && key->on && v[0] == key->v[0] && v[1] == key->v[1] &&
                   v[2] == key->v[2]) {
            v[3] = 0;
        }
        memcpy(dst, v, 4);
    }
}

/* The EXIF orientation of a decoded PNG, from its chunks as Pillow reads them before and after
 * the image data: the last eXIf chunk, else the XMP packet of the last tEXt or uncompressed
 * iTXt "XML:com.adobe.xmp" (zTXt, compressed iTXt and ImageMagick's "Raw profile type exif"
 * text are not read). A walk over the bytes that stops at IEND or at a chunk that does not
 * fit: libpng has already accepted the file. */
static int ifd__png_orientation(const uint8_t *d, size_t n)
{
    static const char xmp_key[] = "XML:com.adobe.xmp";
    const uint8_t *exif = NULL, *xmp = NULL;
    size_t n_exif = 0, n_xmp = 0;
    for (size_t at = 8; at + 12 <= n;) {
        size_t len =
            (size_t)d[at] << 24 | (size_t)d[at + 1] << 16 | (size_t)d[at + 2] << 8 | d[at + 3];
        const uint8_t *type = d + at + 4, *data = d + at + 8;
        if (len > n - at - 12 || memcmp(type, "IEND", 4) == 0)
            break;
        if (memcmp(type, "eXIf", 4) == 0) {
            exif = data, n_exif = len;
        } else if ((memcmp(type, "tEXt", 4) == 0 || memcmp(type, "iTXt", 4) == 0) &&
                   len > sizeof xmp_key && memcmp(data, xmp_key, sizeof xmp_key) == 0) {
            const uint8_t *t = data + sizeof xmp_key, *end = data + len;
            if (type[0] == 'i') { /* compression flag, method, language\0, translated\0 */
                if (end - t < 2 || t[0] != 0)
                    goto next;
                t += 2;
                for (int z = 0; z < 2; z++) {
                    const uint8_t *nul = memchr(t, 0, (size_t)(end - t));
                    if (!nul)
                        goto next;
                    t = nul + 1;
                }
            }
            xmp = t, n_xmp = (size_t)(end - t);
        }
    next:
        at += len + 12;
    }
    return ifd__image_orientation(exif, n_exif, xmp, n_xmp);
}

int ifd__image_png(ifd__image_rgba_t *o, const uint8_t *d, size_t n, const ifd_image_limits_t *lim,
                   char *errbuf, size_t errlen)
{
    ifd__png_src_t src = {.d = d, .n = n};
    png_structp png =
        png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, ifd__png_error, ifd__png_warning);
    if (!png)
        return ifd__image_fail(errbuf, errlen, IFD_ENOMEM, "png: out of memory");
    png_infop info = png_create_info_struct(png);
    uint8_t *volatile px = NULL, *volatile rowbuf = NULL;
    png_bytep *volatile rows = NULL;
    int rc = 0;
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return ifd__image_fail(errbuf, errlen, IFD_ENOMEM, "png: out of memory");
    }
    if (setjmp(png_jmpbuf(png))) {
        rc = ifd__image_fail(errbuf, errlen, src.short_read ? IFD_ETRUNC : IFD_EFORMAT, "png: %s",
                             src.short_read ? "file is truncated" : src.msg);
        goto out;
    }
    png_set_read_fn(png, &src, ifd__png_read);
    png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
    png_set_chunk_malloc_max(png, 16u << 20);
    png_read_info(png, info);
    uint32_t w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    int depth = png_get_bit_depth(png, info), ctype = png_get_color_type(png, info);
    rc = ifd__image_check_size(w, h, lim, "png", errbuf, errlen);
    if (rc)
        goto out;
    ifd__png_key_t key = {0, {-1, -1, -1}};
    if (ctype == PNG_COLOR_TYPE_PALETTE) {
        png_set_palette_to_rgb(png);
        if (png_get_valid(png, info, PNG_INFO_tRNS)) {
            png_set_tRNS_to_alpha(png);
            o->has_alpha = 1;
        }
    } else if (ctype == PNG_COLOR_TYPE_GRAY || ctype == PNG_COLOR_TYPE_RGB) {
        key = ifd__png_key(png, info, ctype, depth);
        o->has_alpha = key.on;
        if (depth < 8)
            png_set_expand_gray_1_2_4_to_8(png);
    } else {
        o->has_alpha = 1; /* grey + alpha, RGBA */
    }
    int gray16 = ctype == PNG_COLOR_TYPE_GRAY && depth == 16;
    if (depth == 16 && !gray16)
        png_set_strip_16(png);
    /* An interlaced image needs all its rows at once; another is read a row at a time. */
    int passes = png_set_interlace_handling(png);
    png_read_update_info(png, info);
    int ch = png_get_channels(png, info);
    size_t rowbytes = png_get_rowbytes(png, info);
    uint32_t nrows = passes > 1 ? h : 1;
    px = ifd__image_alloc_rgba(w, h);
    rowbuf = malloc(rowbytes * nrows);
    rows = malloc(sizeof(png_bytep) * nrows);
    if (!px || !rowbuf || !rows) {
        rc = ifd__image_fail(errbuf, errlen, IFD_ENOMEM, "png: out of memory for %ux%u", w, h);
        goto out;
    }
    for (uint32_t y = 0; y < nrows; y++)
        rows[y] = rowbuf + rowbytes * y;
    if (passes > 1)
        png_read_image(png, rows);
    for (uint32_t y = 0; y < h; y++) {
        if (passes == 1)
            png_read_row(png, rows[0], NULL);
        ifd__png_row(px + (size_t)y * w * 4, rows[passes > 1 ? y : 0], w, ch, gray16, &key);
    }
    o->w = w;
    o->h = h;
    o->px = px;
    o->orientation = ifd__png_orientation(d, n);
    px = NULL;
out:
    png_destroy_read_struct(&png, &info, NULL);
    free(rows);
    free(rowbuf);
    free(px);
    if (rc)
        o->px = NULL;
    return rc;
}
