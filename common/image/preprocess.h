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
 * Threading: reentrant. Memory: the caller's output buffers;
 * ifd_image_preprocess also holds the resized pictures (count × height ×
 * width × 3 bytes) while it runs.
 */
#ifndef IFD_IMAGE_PREPROCESS_H
#define IFD_IMAGE_PREPROCESS_H

#include "image/image.h"
#include "image/resample.h"

#include <stddef.h>
#include <stdint.h>

/* Pan-and-scan crops an image may yield at most (pan_and_scan_max_num_crops; Gemma 3's is 4). */
#define IFD_IMAGE_MAX_CROPS 15

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

/* Pictures img yields: 1 + its pan-and-scan crops. */
uint32_t ifd_image_prep_count(const ifd_image_prep_t *p, const ifd_image_t *img);

/* Floats ifd_image_preprocess writes for img: count × 3 × height × width (also the bytes
 * ifd_image_prep_resize writes). */
size_t ifd_image_prep_floats(const ifd_image_prep_t *p, const ifd_image_t *img);

/*
 * The first half: the whole image then its crops, each resized, into out
 * ([count][height][width][3] u8, n bytes) — what a router would hand a
 * worker (a quarter of the floats' size; the rest is elementwise). Returns
 * 0; IFD_ERANGE when n is too small; IFD_EINVAL for an empty image or a crop
 * of zero size; IFD_ENOTSUP for an unsupported filter or over
 * IFD_IMAGE_MAX_CROPS crops; IFD_ENOMEM.
 */
int ifd_image_prep_resize(uint8_t *out, size_t n, const ifd_image_t *img,
                          const ifd_image_prep_t *p);

/* The second half: count resized pictures (as ifd_image_prep_resize writes them) rescaled and
 * normalized into out ([count][3][height][width] float32). */
void ifd_image_prep_normalize(float *out, const uint8_t *pics, uint32_t count,
                              const ifd_image_prep_t *p);

/*
 * Both halves: img's pixel_values into out ([count][3][height][width]
 * float32), which holds n floats. Returns what ifd_image_prep_resize returns
 * (IFD_ERANGE when n is too small); the temporary pictures are freed.
 */
int ifd_image_preprocess(float *out, size_t n, const ifd_image_t *img, const ifd_image_prep_t *p);

#endif
