/*
 * fuzz_image.c — the image path a request's bytes take: a base64 data URL
 * (when the input starts with "data:"), then common/image's decoder under
 * small limits (so a mutated header cannot ask for gigabytes), then the
 * preprocessing into a small picture with pan-and-scan on. Properties: no
 * memory error, no leak; a refusal carries a message and leaves nothing to
 * free; a decoded picture fits its limits; every pixel value is finite and
 * within the normalized range [-1, 1].
 */
#include "fuzz.h"

#include "error.h"
#include "image/dataurl.h"
#include "image/image.h"
#include "image/preprocess.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256] = "";
    uint8_t *decoded = NULL;
    if (size >= 5 && memcmp(data, "data:", 5) == 0) {
        size_t len = 0;
        int rc = ifd_image_data_url((const char *)data, size, 1 << 20, &decoded, &len, NULL, NULL,
                                    err, sizeof err);
        if (rc) {
            IFD_FUZZ_CHECK(rc < 0 && err[0] && !decoded);
            return 0;
        }
        data = decoded;
        size = len;
    }
    ifd_image_limits_t lim = {.max_pixels = 1 << 20, .max_side = 4096, .max_scans = 64};
    ifd_image_t img;
    err[0] = '\0';
    int rc = ifd_image_decode(&img, data, size, &lim, err, sizeof err);
    if (rc) {
        IFD_FUZZ_CHECK(rc < 0 && err[0] && !img.rgb);
        free(decoded);
        return 0;
    }
    IFD_FUZZ_CHECK(img.rgb && img.width && img.height && img.width <= lim.max_side &&
                   img.height <= lim.max_side &&
                   (uint64_t)img.width * img.height <= lim.max_pixels);
    ifd_image_prep_t p = ifd_image_prep_gemma3();
    p.width = 24;
    p.height = 16;
    p.do_pan_and_scan = 1;
    p.pas_min_crop_size = 4;
    size_t n = ifd_image_prep_floats(&p, &img);
    float *out = malloc(n * sizeof(float));
    IFD_FUZZ_CHECK(out && ifd_image_preprocess(out, n, &img, &p) == 0);
    for (size_t i = 0; i < n; i++)
        IFD_FUZZ_CHECK(isfinite(out[i]) && out[i] >= -1.0f && out[i] <= 1.0f);
    free(out);
    ifd_image_free(&img);
    free(decoded);
    return 0;
}
