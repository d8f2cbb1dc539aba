/*
 * image_internal.h — what image.c shares with the decoders (image_jpeg.c,
 * image_png.c, image_webp.c, image_gif.c, preprocess.c, dataurl.c): private to
 * common/image/, not a public interface.
 *
 * A decoder fills an ifd__image_rgba_t: RGBA, 4 bytes a pixel, and whether
 * Pillow would see transparency (an alpha band, or a "transparency" entry in
 * its info); image.c then turns it into RGB as transformers' convert_to_rgb
 * does. A decoder checks the header's size with ifd__image_check_size before
 * allocating pixels, and on failure frees what it allocated and leaves
 * px NULL.
 */
#ifndef IFD_IMAGE_INTERNAL_H
#define IFD_IMAGE_INTERNAL_H

#include "image.h"

#include <stdarg.h>

typedef struct {
    uint32_t w, h;
    uint8_t *px;     /* [h][w][4] RGBA, malloc'd */
    int has_alpha;   /* composite on white (alpha band or tRNS / GIF transparency) */
    int orientation; /* EXIF orientation to apply (ifd__image_orientation); 0 or 1: none */
} ifd__image_rgba_t;

/* One line into errbuf (when not NULL); returns rc. */
int ifd__image_fail(char *errbuf, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* IFD_ETOOBIG (with its message) when w × h or a side passes lim, IFD_EFORMAT for a zero
 * side; else 0. `what` names the format in the message. */
int ifd__image_check_size(uint32_t w, uint32_t h, const ifd_image_limits_t *lim, const char *what,
                          char *errbuf, size_t errlen);

/* malloc'd w × h × 4 bytes (the size was checked), or NULL. */
uint8_t *ifd__image_alloc_rgba(uint32_t w, uint32_t h);

/* exif.c: the EXIF Orientation tag of an EXIF block (a TIFF file after "Exif\0\0"), as Pillow
 * reads it: 2..8, 1 for a value that is no orientation, -1 when the block has no such tag or
 * is no TIFF file Pillow reads. */
int ifd__image_exif_orientation(const uint8_t *d, size_t n);
/* The first tiff:Orientation digit of an XMP packet (Pillow's regex), or -1. */
int ifd__image_xmp_orientation(const uint8_t *d, size_t n);
/* What exif_transpose does with an image's EXIF block and XMP packet (either NULL): the EXIF
 * tag, else the XMP's, as 2..8, else 1 (nothing to do). */
int ifd__image_orientation(const uint8_t *exif, size_t n_exif, const uint8_t *xmp, size_t n_xmp);
/* Transposes a malloc'd RGB picture as Pillow's Image.transpose for orientation 2..8 (w and
 * h swap for 5..8), replacing *rgb; other values do nothing. 0, or -1 out of memory (the
 * picture then unchanged). */
int ifd__image_transpose_rgb(uint8_t **rgb, uint32_t *w, uint32_t *h, int orientation);

int ifd__image_jpeg(ifd__image_rgba_t *o, const uint8_t *d, size_t n, const ifd_image_limits_t *lim,
                    char *errbuf, size_t errlen);
int ifd__image_png(ifd__image_rgba_t *o, const uint8_t *d, size_t n, const ifd_image_limits_t *lim,
                   char *errbuf, size_t errlen);
int ifd__image_webp(ifd__image_rgba_t *o, const uint8_t *d, size_t n, const ifd_image_limits_t *lim,
                    char *errbuf, size_t errlen);
int ifd__image_gif(ifd__image_rgba_t *o, const uint8_t *d, size_t n, const ifd_image_limits_t *lim,
                   char *errbuf, size_t errlen);

#endif
