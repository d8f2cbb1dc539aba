/*
 * exif.c — the EXIF Orientation of an image and the transposition it asks
 * for, as transformers' load_image applies it (PIL.ImageOps.exif_transpose
 * before convert("RGB")), read the way Pillow 13 reads it:
 *
 *   - the EXIF block is a TIFF file (after one or two "Exif\0\0" prefixes):
 *     "II*\0" / "MM\0*" (and Pillow's two wrong-endian variants), IFD0 at
 *     the header's offset, 12-byte entries; the Orientation tag (0x0112) is
 *     the first entry of IFD0 with that tag whose type Pillow can load and
 *     whose data it reads (out-of-line data past the block's size in all is
 *     skipped; data that starts inside but ends outside it ends the IFD, as
 *     Pillow's OSError does). A value is an
 *     orientation when it equals an integer 2..8 (SHORT, LONG, the signed
 *     types, IFD, LONG8, RATIONAL, FLOAT, DOUBLE: the first of a count > 1,
 *     as Pillow truncates a one-value tag); BYTE, ASCII and UNDEFINED values
 *     are bytes or text to Pillow and never transpose;
 *   - with no Orientation tag in the EXIF block (or no block), the first
 *     `tiff:Orientation="D"` or `tiff:Orientation>D` of the XMP packet;
 *   - a block Pillow would refuse (no TIFF header, BigTIFF, IFD0 outside the
 *     block) makes Pillow raise, and transformers with it; here it is read as
 *     no orientation (an upright picture, not a 400: the pixels are fine).
 *
 * Private to common/image/ (image_internal.h). Reentrant, no allocation.
 */
#include "image_internal.h"

#include <stdlib.h>
#include <string.h>

static uint64_t ifd__exif_u(const uint8_t *p, int n, int be)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[be ? i : n - 1 - i] << (8 * (n - 1 - i));
    return v;
}

/* Pillow's unit size of a TIFF type it loads, 0 for a type it skips. */
static int ifd__exif_unit(int typ)
{
    static const int units[] = {[1] = 1, [2] = 1, [3] = 2,  [4] = 4,  [5] = 8,  [6] = 1,  [7] = 1,
                                [8] = 2, [9] = 4, [10] = 8, [11] = 4, [12] = 8, [13] = 4, [16] = 8};
    return typ > 0 && typ < (int)(sizeof units / sizeof units[0]) ? units[typ] : 0;
}

/* The first value of an entry's data as an orientation 2..8, or 1 when it equals none. */
static int ifd__exif_value(const uint8_t *v, int typ, int be)
{
    double x;
    switch (typ) {
    case 3:
        x = (double)ifd__exif_u(v, 2, be);
        break;
    case 4:
    case 13:
        x = (double)ifd__exif_u(v, 4, be);
        break;
    case 16:
        x = (double)ifd__exif_u(v, 8, be);
        break;
    case 6:
        x = (int8_t)v[0];
        break;
    case 8:
        x = (int16_t)ifd__exif_u(v, 2, be);
        break;
    case 9:
        x = (int32_t)ifd__exif_u(v, 4, be);
        break;
    case 5:
    case 10: {
        int64_t num = typ == 5 ? (int64_t)ifd__exif_u(v, 4, be) : (int32_t)ifd__exif_u(v, 4, be);
        int64_t den =
            typ == 5 ? (int64_t)ifd__exif_u(v + 4, 4, be) : (int32_t)ifd__exif_u(v + 4, 4, be);
        for (int k = 2; k <= 8; k++)
            if (den != 0 && num == k * den)
                return k;
        return 1;
    }
    case 11: {
        uint32_t b = (uint32_t)ifd__exif_u(v, 4, be);
        float f;
        memcpy(&f, &b, 4);
        x = f;
        break;
    }
    case 12: {
        uint64_t b = ifd__exif_u(v, 8, be);
        memcpy(&x, &b, 8);
        break;
    }
    default: /* BYTE, ASCII, UNDEFINED: bytes or text to Pillow */
        return 1;
    }
    for (int k = 2; k <= 8; k++)
        if (x == k)
            return k;
    return 1;
}

int ifd__image_exif_orientation(const uint8_t *d, size_t n)
{
    for (int i = 0; i < 2 && n >= 6 && memcmp(d, "Exif\0\0", 6) == 0; i++)
        d += 6, n -= 6;
    if (n < 8)
        return -1;
    int be;
    if (memcmp(d, "MM\0*", 4) == 0 || memcmp(d, "MM*\0", 4) == 0 || memcmp(d, "MM\0+", 4) == 0)
        be = 1;
    else if (memcmp(d, "II*\0", 4) == 0 || memcmp(d, "II\0*", 4) == 0)
        be = 0;
    else
        return -1; /* no TIFF header, or BigTIFF ("II+\0"), which Pillow fails to read */
    uint64_t off = ifd__exif_u(d + 4, 4, be);
    if (off > n || n - off < 2)
        return -1;
    uint32_t count = (uint32_t)ifd__exif_u(d + off, 2, be);
    uint64_t total = 0; /* out-of-line bytes so far: Pillow skips tags once past the block */
    size_t e = off + 2;
    for (uint32_t i = 0; i < count; i++, e += 12) {
        if (e > n || n - e < 12)
            break; /* Pillow's short read: an OSError that ends the IFD */
        const uint8_t *ent = d + e;
        int tag = (int)ifd__exif_u(ent, 2, be), typ = (int)ifd__exif_u(ent + 2, 2, be);
        uint64_t cnt = ifd__exif_u(ent + 4, 4, be);
        int unit = ifd__exif_unit(typ);
        if (!unit)
            continue; /* a type Pillow does not load: skipped */
        uint64_t size = cnt * (uint64_t)unit;
        const uint8_t *val = ent + 8;
        if (size > 4) {
            uint64_t at = ifd__exif_u(ent + 8, 4, be);
            total += size;
            if (total > n)
                continue; /* "Tag data larger than file. Skipping tag" */
            if (at > n || n - at < size)
                break; /* a short read: the IFD ends */
            val = d + at;
        }
        if (size == 0 || tag != 0x0112)
            continue;
        return ifd__exif_value(val, typ, be); /* the first one Pillow stores wins */
    }
    return -1;
}

int ifd__image_xmp_orientation(const uint8_t *d, size_t n)
{
    static const char key[] = "tiff:Orientation";
    const size_t k = sizeof key - 1;
    for (size_t i = 0; i + k < n; i++) {
        if (d[i] != 't' || memcmp(d + i, key, k) != 0)
            continue;
        size_t j = i + k;
        if (j + 2 < n && d[j] == '=' && d[j + 1] == '"')
            j += 2;
        else if (j + 1 < n && d[j] == '>')
            j += 1;
        else
            continue;
        if (j < n && d[j] >= '0' && d[j] <= '9')
            return d[j] - '0';
    }
    return -1;
}

int ifd__image_orientation(const uint8_t *exif, size_t n_exif, const uint8_t *xmp, size_t n_xmp)
{
    int o = exif ? ifd__image_exif_orientation(exif, n_exif) : -1;
    if (o < 0 && xmp)
        o = ifd__image_xmp_orientation(xmp, n_xmp);
    return o >= 2 && o <= 8 ? o : 1;
}

/* Source pixel of output (x, y) for each transposition (Pillow's Image.transpose). */
int ifd__image_transpose_rgb(uint8_t **rgb, uint32_t *w, uint32_t *h, int orientation)
{
    if (orientation < 2 || orientation > 8)
        return 0;
    const uint32_t W = *w, H = *h;
    const int swap = orientation >= 5;
    const uint32_t ow = swap ? H : W, oh = swap ? W : H;
    uint8_t *out = malloc((size_t)W * H * 3);
    if (!out)
        return -1;
    const uint8_t *in = *rgb;
    for (uint32_t y = 0; y < oh; y++) {
        uint8_t *dst = out + (size_t)y * ow * 3;
        for (uint32_t x = 0; x < ow; x++, dst += 3) {
            uint32_t sx, sy;
            switch (orientation) {
            case 2: /* FLIP_LEFT_RIGHT */
                sx = W - 1 - x, sy = y;
                break;
            case 3: /* ROTATE_180 */
                sx = W - 1 - x, sy = H - 1 - y;
                break;
            case 4: /* FLIP_TOP_BOTTOM */
                sx = x, sy = H - 1 - y;
                break;
            case 5: /* TRANSPOSE */
                sx = y, sy = x;
                break;
            case 6: /* ROTATE_270 (90° clockwise) */
                sx = y, sy = H - 1 - x;
                break;
            case 7: /* TRANSVERSE */
                sx = W - 1 - y, sy = H - 1 - x;
                break;
            default: /* 8: ROTATE_90 (90° counter-clockwise) */
                sx = W - 1 - y, sy = x;
                break;
            }
            memcpy(dst, in + ((size_t)sy * W + sx) * 3, 3);
        }
    }
    free(*rgb);
    *rgb = out;
    *w = ow;
    *h = oh;
    return 0;
}
