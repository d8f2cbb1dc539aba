/*
 * resample.h — Pillow's convolution resize of 8-bit RGB (Image.resize with
 * the LANCZOS, BILINEAR, BICUBIC, BOX and HAMMING filters), output byte for
 * byte what Pillow 13 produces: the same filter supports and weights
 * (double), the weights normalized per output pixel and turned into 22-bit
 * fixed point with Pillow's rounding, two passes each rounding to 8 bits
 * (horizontal first, over only the source rows the vertical pass reads,
 * unless the height shrinks much more than the width: then vertical first,
 * as Pillow 13 does), and a pass skipped when its size does not change.
 * libImaging/Resample.c's algorithm, written from its description;
 * tests/integration/test_image_vs_transformers.py compares the outputs.
 *
 * Threading: reentrant. Memory: a temporary of at most max(dst_w, src_w) × src_h × 3 bytes
 * and the weight tables, freed before returning.
 */
#ifndef IFD_IMAGE_RESAMPLE_H
#define IFD_IMAGE_RESAMPLE_H

#include <stddef.h>
#include <stdint.h>

/* PIL.Image.Resampling's numbers (preprocessor_config.json's "resample"). */
typedef enum {
    IFD_RESAMPLE_NEAREST = 0, /* not supported here */
    IFD_RESAMPLE_LANCZOS = 1,
    IFD_RESAMPLE_BILINEAR = 2,
    IFD_RESAMPLE_BICUBIC = 3,
    IFD_RESAMPLE_BOX = 4,
    IFD_RESAMPLE_HAMMING = 5,
} ifd_resample_t;

/*
 * Resizes the src_w × src_h RGB picture at src (rows src_stride bytes apart:
 * a crop of a larger picture works) into dst, dst_w × dst_h packed RGB.
 * Returns 0; IFD_EINVAL for a zero size; IFD_ENOTSUP for another filter;
 * IFD_ENOMEM. dst and src must not overlap.
 */
int ifd_image_resize(uint8_t *dst, uint32_t dst_w, uint32_t dst_h, const uint8_t *src,
                     uint32_t src_w, uint32_t src_h, size_t src_stride, ifd_resample_t filter);

#endif
