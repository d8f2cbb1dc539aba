/*
 * image_prep.c — test tool: common/image's decode, resize and preprocessing
 * on a file, written raw for the comparison against Pillow and transformers
 * (tests/integration/test_image_vs_transformers.py).
 *
 *   image_prep decode IMAGE OUT
 *       OUT: u32 width, u32 height, then width × height × 3 RGB bytes.
 *   image_prep resize IMAGE W H FILTER OUT
 *       the decoded image resized with PIL filter number FILTER; OUT as above.
 *   image_prep prep IMAGE CONFIG OUT
 *       pixel_values with preprocessor_config.json CONFIG ("-": Gemma 3's);
 *       OUT: u32 count, 3, height, width (little-endian), then the float32s.
 *
 * Exit status 0; 2 when the image is refused, with "NAME: message" on stderr
 * (NAME from ifd_err_name); 1 on any other error.
 */
#include "error.h"
#include "image/image.h"
#include "image/preprocess.h"
#include "image/resample.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    uint8_t *b = malloc(cap);
    for (size_t r; b && (r = fread(b + n, 1, cap - n, f)) > 0;) {
        n += r;
        if (n == cap) {
            uint8_t *nb = realloc(b, cap *= 2);
            if (!nb)
                free(b);
            b = nb;
        }
    }
    fclose(f);
    *len = n;
    return b;
}

static int write_out(const char *path, const uint32_t *hdr, int nh, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return 1;
    int bad = fwrite(hdr, 4, (size_t)nh, f) != (size_t)nh || fwrite(data, 1, n, f) != n;
    return fclose(f) != 0 || bad;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: image_prep decode|resize|prep IMAGE ... OUT\n");
        return 1;
    }
    const char *cmd = argv[1], *out = argv[argc - 1];
    size_t len = 0;
    uint8_t *data = read_all(argv[2], &len);
    if (!data) {
        perror(argv[2]);
        return 1;
    }
    ifd_image_t img;
    char err[256];
    int rc = ifd_image_decode(&img, data, len, NULL, err, sizeof err);
    free(data);
    if (rc) {
        fprintf(stderr, "%s: %s\n", ifd_err_name(rc), err);
        return 2;
    }
    int status = 1;
    if (strcmp(cmd, "decode") == 0 && argc == 4) {
        uint32_t hdr[2] = {img.width, img.height};
        status = write_out(out, hdr, 2, img.rgb, (size_t)img.width * img.height * 3);
    } else if (strcmp(cmd, "resize") == 0 && argc == 7) {
        uint32_t w = (uint32_t)atoi(argv[3]), h = (uint32_t)atoi(argv[4]);
        uint8_t *dst = malloc((size_t)w * h * 3 + 1);
        rc = dst ? ifd_image_resize(dst, w, h, img.rgb, img.width, img.height,
                                    (size_t)img.width * 3, (ifd_resample_t)atoi(argv[5]))
                 : IFD_ENOMEM;
        uint32_t hdr[2] = {w, h};
        status = rc ? 1 : write_out(out, hdr, 2, dst, (size_t)w * h * 3);
        free(dst);
    } else if (strcmp(cmd, "prep") == 0 && argc == 5) {
        ifd_image_prep_t p = ifd_image_prep_gemma3();
        if (strcmp(argv[3], "-") != 0) {
            size_t clen = 0;
            char *cfg = (char *)read_all(argv[3], &clen);
            rc = cfg ? ifd_image_prep_from_json(&p, cfg, clen, err, sizeof err) : -1;
            free(cfg);
            if (rc) {
                fprintf(stderr, "%s: %s\n", argv[3], cfg ? err : "cannot read");
                goto done;
            }
        }
        size_t n = ifd_image_prep_floats(&p, &img);
        float *pv = malloc(n * sizeof(float));
        rc = pv ? ifd_image_preprocess(pv, n, &img, &p) : IFD_ENOMEM;
        uint32_t hdr[4] = {(uint32_t)(n / ((size_t)3 * p.height * p.width)), 3, p.height, p.width};
        status = rc ? 1 : write_out(out, hdr, 4, pv, n * sizeof(float));
        free(pv);
    } else {
        fprintf(stderr, "image_prep: bad command line\n");
    }
done:
    if (status)
        fprintf(stderr, "image_prep: %s failed (%s)\n", cmd, rc ? ifd_err_name(rc) : "write");
    ifd_image_free(&img);
    return status;
}
