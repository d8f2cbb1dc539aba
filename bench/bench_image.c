/*
 * bench_image.c — what an image costs before the vision tower: decoding
 * (common/image's decoders, RGB conversion included), the processor's resize
 * of the whole image and its crops to the model's size (the router's half),
 * and rescale + normalize (the worker's half), each the median and minimum
 * of --reps runs on one thread, per file given.
 *
 * Usage: bench_image [--reps N] [--pan-and-scan] [--config preprocessor_config.json] FILE...
 *        → JSON on stdout. Figures are to be taken on a quiet machine.
 */
#include "error.h"
#include "image/image.h"
#include "image/preprocess.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    uint8_t *b = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            uint8_t *nb = realloc(b, cap = cap ? cap * 2 : 1 << 16);
            if (!nb)
                break;
            b = nb;
        }
        size_t r = fread(b + n, 1, cap - n, f);
        if (!r)
            break;
        n += r;
    }
    fclose(f);
    *len = n;
    return b;
}

/* Median and minimum of t[0..n) (sorts t). */
static void put_stat(const char *name, double *t, int n, int last)
{
    qsort(t, (size_t)n, sizeof *t, cmp_d);
    printf("\"%s\": {\"median\": %.3f, \"min\": %.3f}%s", name, t[n / 2], t[0], last ? "" : ", ");
}

/* One file's line of JSON; returns 0 or the first error. */
static int bench_file(const char *path, const ifd_image_prep_t *p, int reps, double *t)
{
    size_t len = 0;
    uint8_t *data = read_all(path, &len);
    if (!data) {
        fprintf(stderr, "bench_image: cannot read %s\n", path);
        return -1;
    }
    ifd_image_t img = {0};
    char err[256];
    int rc = 0;
    for (int r = 0; r < reps && !rc; r++) {
        ifd_image_free(&img);
        double t0 = now_ms();
        rc = ifd_image_decode(&img, data, len, NULL, err, sizeof err);
        t[r] = now_ms() - t0;
    }
    free(data);
    if (rc) {
        fprintf(stderr, "bench_image: %s: %s\n", path, err);
        return rc;
    }
    uint32_t count = ifd_image_prep_count(p, &img);
    size_t n = ifd_image_prep_floats(p, &img);
    uint8_t *pics = malloc(n);
    float *out = malloc(n * sizeof(float));
    double *t2 = t + reps, *t3 = t + 2 * reps;
    for (int r = 0; r < reps && !rc && pics && out; r++) {
        double t0 = now_ms();
        rc = ifd_image_prep_resize(pics, n, &img, p);
        double t1 = now_ms();
        ifd_image_prep_normalize(out, pics, count, p);
        t2[r] = t1 - t0;
        t3[r] = now_ms() - t1;
    }
    if (!pics || !out)
        rc = IFD_ENOMEM;
    if (!rc) {
        printf("    {\"file\": \"%s\", \"format\": \"%s\", \"bytes\": %zu, \"width\": %u, "
               "\"height\": %u, \"pictures\": %u, ",
               path, ifd_image_format_name(img.format), len, img.width, img.height, count);
        put_stat("decode_ms", t, reps, 0);
        put_stat("resize_ms", t2, reps, 0);
        put_stat("normalize_ms", t3, reps, 1);
        printf("}");
    }
    free(pics);
    free(out);
    ifd_image_free(&img);
    return rc;
}

int main(int argc, char **argv)
{
    int reps = 5, first = 1;
    ifd_image_prep_t p = ifd_image_prep_gemma3();
    char err[256];
    for (; first < argc && argv[first][0] == '-'; first++) {
        if (!strcmp(argv[first], "--reps") && first + 1 < argc) {
            reps = atoi(argv[++first]);
        } else if (!strcmp(argv[first], "--pan-and-scan")) {
            p.do_pan_and_scan = 1;
        } else if (!strcmp(argv[first], "--config") && first + 1 < argc) {
            size_t len = 0;
            char *cfg = (char *)read_all(argv[++first], &len);
            if (!cfg || ifd_image_prep_from_json(&p, cfg, len, err, sizeof err)) {
                fprintf(stderr, "bench_image: %s: %s\n", argv[first], cfg ? err : "cannot read");
                free(cfg);
                return 1;
            }
            free(cfg);
        } else {
            break;
        }
    }
    if (first >= argc || reps < 1) {
        fprintf(stderr, "usage: bench_image [--reps N] [--pan-and-scan] [--config FILE] FILE...\n");
        return 1;
    }
    double *t = malloc(sizeof(double) * 3 * (size_t)reps);
    if (!t)
        return 1;
    printf("{\"bench\": \"image\", \"size\": [%u, %u], \"resample\": %d, \"pan_and_scan\": %s, "
           "\"reps\": %d, \"files\": [\n",
           p.height, p.width, (int)p.resample, p.do_pan_and_scan ? "true" : "false", reps);
    int rc = 0;
    for (int i = first; i < argc && !rc; i++) {
        rc = bench_file(argv[i], &p, reps, t);
        printf(i + 1 < argc && !rc ? ",\n" : "\n");
    }
    printf("]}\n");
    free(t);
    return rc ? 1 : 0;
}
