/*
 * preprocess.h — an image processor's pixel_values for a decoded image:
 * transformers' Gemma3ImageProcessor (its PIL backend, the one whose resize
 * is PIL's: Gemma3ImageProcessorPil in transformers 5, Gemma3ImageProcessor
 * in 4.x), bit for bit:
 *   optional pan-and-scan crops (the whole image first, then the crops),
 *   each resized to height × width with PIL's filter on 8-bit RGB
 *   (resample.h), rescaled as float64 × rescale_factor rounded to float32,
 *   normalized as (x - mean) / std in float32, channels first.
 * The parameters come from preprocessor_config.json
 * (ifd_image_prep_from_json) or ifd_image_prep_gemma3 (google/gemma-3-4b-it's).
 *
 * Threading: reentrant. Memory: the caller's output buffer and a temporary
 * height × width × 3 bytes.
 */
#ifndef IFD_IMAGE_PREPROCESS_H
#define IFD_IMAGE_PREPROCESS_H

#include "image/image.h"
#include "image/resample.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t height, width;     /* size: {"height", "width"} */
    ifd_resample_t resample;    /* resample (PIL's number) */
    double rescale_factor;      /* rescale_factor */
    double mean[3], std[3];     /* image_mean, image_std (used as float32, as numpy does) */
    int do_pan_and_scan;        /* do_pan_and_scan (null: off, as in vLLM) */
    uint32_t pas_min_crop_size; /* pan_and_scan_min_crop_size */
    uint32_t pas_max_num_crops; /* pan_and_scan_max_num_crops */
    double pas_min_ratio;       /* pan_and_scan_min_ratio_to_activate */
} ifd_image_prep_t;

/* google/gemma-3-4b-it's preprocessor_config.json: 896×896, BILINEAR, 1/255, mean = std =
 * 0.5, pan-and-scan off (min crop 256, at most 4 crops, ratio 1.2). */
ifd_image_prep_t ifd_image_prep_gemma3(void);

/*
 * Reads a preprocessor_config.json's text over the Gemma 3 defaults. Keys
 * that turn a step off (do_resize, do_rescale, do_normalize,
 * do_convert_rgb false) are IFD_ENOTSUP; a key of the wrong type or out of
 * range is IFD_EFORMAT; unknown keys are ignored. Message to errbuf.
 */
int ifd_image_prep_from_json(ifd_image_prep_t *p, const char *json, size_t len, char *errbuf,
                             size_t errlen);

/* The pan-and-scan crops of a w × h image: their count (0 when pan-and-scan is off or does not
 * apply), and when boxes is not NULL the first min(count, max) crops as x, y, w, h. */
uint32_t ifd_image_prep_crops(const ifd_image_prep_t *p, uint32_t w, uint32_t h,
                              uint32_t (*boxes)[4], uint32_t max);

/* Floats ifd_image_preprocess writes for img: (1 + crops) × 3 × height × width. */
size_t ifd_image_prep_floats(const ifd_image_prep_t *p, const ifd_image_t *img);

/*
 * Writes img's pixel_values into out ([1 + crops][3][height][width] float32),
 * which holds n floats. Returns 0; IFD_ERANGE when n is too small (see
 * ifd_image_prep_floats); IFD_EINVAL for an empty image; IFD_ENOTSUP for an
 * unsupported filter; IFD_ENOMEM.
 */
int ifd_image_preprocess(float *out, size_t n, const ifd_image_t *img, const ifd_image_prep_t *p);

#endif
