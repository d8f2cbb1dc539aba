/*
 * image.h — decoding an image file held in memory into 8-bit RGB, exactly as
 * transformers' image processors see it: PIL's Image.open, then
 * transformers' convert_to_rgb (image_transforms.py), which composites any
 * transparency onto white (PIL.Image.alpha_composite, bit for bit) and
 * otherwise does PIL's convert("RGB").
 *
 * Formats are sniffed from the bytes, never from a declared MIME type:
 * JPEG (libjpeg-turbo), PNG (libpng), WebP (libwebp, first frame of an
 * animation through libwebpdemux, as Pillow does) and GIF (giflib, the first
 * frame on the logical screen, as Pillow's first frame). The conversions
 * follow Pillow where it differs from a colour-exact decode:
 *   - 16-bit PNG samples keep their high byte (Pillow's "RGB;16B" raw
 *     modes); a 16-bit grey PNG without alpha is Pillow's "I;16" and so
 *     clips to 255 (I16_RGB);
 *   - grey and RGB tRNS colours compare the 8-bit pixel against the chunk's
 *     raw value (Pillow's convert_transparent); palette tRNS is per entry;
 *   - CMYK and YCCK JPEGs follow the Adobe convention (inverted samples,
 *     Pillow's "CMYK;I") and Pillow's cmyk2rgb;
 *   - no gamma or ICC profile is applied (Pillow applies none);
 *   - the EXIF orientation is, as transformers' load_image does it (every
 *     URL, path or base64 image it loads goes through
 *     PIL.ImageOps.exif_transpose): the Orientation tag of a JPEG's Exif
 *     APP1 segments, a PNG's eXIf chunk or a WebP's EXIF chunk, else the
 *     tiff:Orientation of its XMP packet, read as Pillow reads them
 *     (exif.c), transposes the picture (orientations 5..8 swap the sides;
 *     the copy briefly holds a second w × h × 3 buffer).
 *     A malformed EXIF block, which makes Pillow raise, is read as no
 *     orientation. GIFs carry none.
 *
 * Hostile input: the pixel count and sides are checked from the header
 * before any pixel buffer is allocated (decompression bombs); a truncated or
 * corrupt file is an error (Pillow raises on both); a progressive JPEG is
 * limited in its scans (the libjpeg-turbo CPU bomb). Nothing is kept after
 * a failure.
 *
 * Threading: every function is reentrant; decoders keep no global state.
 */
#ifndef IFD_IMAGE_H
#define IFD_IMAGE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    IFD_IMAGE_UNKNOWN = 0,
    IFD_IMAGE_JPEG,
    IFD_IMAGE_PNG,
    IFD_IMAGE_WEBP,
    IFD_IMAGE_GIF,
} ifd_image_format_t;

/* A decoded picture: rgb holds height rows of width pixels, 3 bytes each
 * (R, G, B), no padding. Owned by the caller: ifd_image_free. */
typedef struct {
    uint32_t width;
    uint32_t height;
    uint8_t *rgb;
    ifd_image_format_t format; /* what the bytes were */
    uint8_t orientation;       /* the EXIF orientation applied: 1 (none) .. 8 */
} ifd_image_t;

typedef struct {
    uint64_t max_pixels; /* width × height, checked from the header (0: no limit) */
    uint32_t max_side;   /* either side (0: no limit) */
    uint32_t max_scans;  /* scans of a progressive JPEG (0: no limit) */
} ifd_image_limits_t;

/* 40 megapixels (an RGBA decode of it is 160 MiB), 16384 on a side, 256 scans. */
ifd_image_limits_t ifd_image_default_limits(void);

/* The format of the bytes by their signature; IFD_IMAGE_UNKNOWN when none matches. */
ifd_image_format_t ifd_image_sniff(const void *data, size_t len);

/* "jpeg", "png", "webp", "gif" or "unknown". A static string. */
const char *ifd_image_format_name(ifd_image_format_t f);

/*
 * Decodes `data` into `out` (zeroed first). lim NULL means the defaults.
 * Returns 0; IFD_ENOTSUP when the bytes are no supported image format;
 * IFD_ETOOBIG when the header's size passes a limit (nothing decoded);
 * IFD_ETRUNC for a file that ends early; IFD_EFORMAT for a corrupt one;
 * IFD_ENOMEM. On failure one line goes to errbuf (when not NULL) and out
 * holds nothing to free. `data` is only read, and only during the call.
 */
int ifd_image_decode(ifd_image_t *out, const void *data, size_t len, const ifd_image_limits_t *lim,
                     char *errbuf, size_t errlen);

/* Frees out->rgb and zeroes *img. NULL or an empty image is a no-op. */
void ifd_image_free(ifd_image_t *img);

#endif
