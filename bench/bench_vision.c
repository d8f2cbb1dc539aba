/*
 * bench_vision.c — one image through Gemma 3's vision tower and projector
 * (worker/vision.h) on the CPU backend: the encode time of a random image,
 * the median and minimum of --reps runs after one warm-up.
 *
 * Usage: bench_vision [--reps N] [--threads N] (--model DIR | --mmproj FILE |
 *                     --random [--layers N] [--image-size S] [--tokens T])
 *                     [--image FILE [--dump-pixels F] [--dump-features F]]
 *   --model   a Gemma3ForConditionalGeneration directory (its tower);
 *   --mmproj  a llama.cpp mmproj GGUF;
 *   --random  google/gemma-3-4b's tower shape with random bf16 weights (the
 *             issue's benchmark shape), optionally cut to N layers or
 *             another image size / token count for a quick run.
 *   --image   encode this image file instead of random pixels: decoded and
 *             preprocessed as the serving path does (common/image: Gemma 3's
 *             processor at the tower's size, mean = std = 0.5 — what every
 *             Gemma 3 preprocessor_config.json and mmproj states; pan-and-scan
 *             off); --dump-pixels writes the resized picture (size × size × 3
 *             u8, RGB), --dump-features the projector's rows (tokens × text
 *             width f32) of the first encode (tools/mtmd_check.py compares them
 *             with llama.cpp's).
 * → JSON on stdout. Figures are to be taken on a quiet machine.
 */
#include "error.h"
#include "image/image.h"
#include "image/preprocess.h"
#include "worker/vision.h"

#include <errno.h>
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

typedef struct {
    int reps, threads;
    const char *model, *mmproj, *image, *dump_pixels, *dump_features;
    bool random;
    int layers, image_size, tokens;
} opts_t;

static int parse(opts_t *o, int argc, char **argv)
{
    *o = (opts_t){.reps = 3};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--random") == 0) {
            o->random = true;
            continue;
        }
        if (!v)
            return -1;
        if (strcmp(a, "--reps") == 0)
            o->reps = atoi(v);
        else if (strcmp(a, "--threads") == 0)
            o->threads = atoi(v);
        else if (strcmp(a, "--model") == 0)
            o->model = v;
        else if (strcmp(a, "--mmproj") == 0)
            o->mmproj = v;
        else if (strcmp(a, "--layers") == 0)
            o->layers = atoi(v);
        else if (strcmp(a, "--image-size") == 0)
            o->image_size = atoi(v);
        else if (strcmp(a, "--tokens") == 0)
            o->tokens = atoi(v);
        else if (strcmp(a, "--image") == 0)
            o->image = v;
        else if (strcmp(a, "--dump-pixels") == 0)
            o->dump_pixels = v;
        else if (strcmp(a, "--dump-features") == 0)
            o->dump_features = v;
        else
            return -1;
        i++;
    }
    if ((o->dump_pixels || o->dump_features) && !o->image)
        return -1;
    return o->reps >= 1 && (!!o->model + !!o->mmproj + o->random) == 1 ? 0 : -1;
}

static int load(ifd_vision_t **v, const opts_t *o, ifd_backend_t *be, char *err, size_t len)
{
    if (o->random) {
        ifd_vision_config_t c;
        ifd_vision_config_gemma3_4b(&c);
        if (o->layers > 0)
            c.n_layer = (uint32_t)o->layers;
        if (o->image_size > 0)
            c.image_size = (uint32_t)o->image_size;
        if (o->tokens > 0)
            c.tokens_per_image = (uint32_t)o->tokens;
        return ifd_vision_load_random(v, &c, 28, be, err, len);
    }
    ifd_model_source_t *src = NULL;
    int rc = o->model ? ifd_model_source_open(&src, o->model, err, len)
                      : ifd_model_source_open_mmproj(&src, o->mmproj, err, len);
    if (rc == 0)
        rc = ifd_vision_load(v, src, be, err, len);
    ifd_model_source_close(src);
    return rc;
}

static int write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "bench_vision: cannot write %s\n", path);
        return -EIO;
    }
    const bool ok = fwrite(p, 1, n, f) == n;
    if (fclose(f) != 0 || !ok) {
        fprintf(stderr, "bench_vision: cannot write %s\n", path);
        return -EIO;
    }
    return 0;
}

/* pv (3 × s × s) from the image file as the serving path makes it; the resized picture is
 * dumped when asked. */
static int image_pixels(const opts_t *o, uint32_t s, float *pv)
{
    FILE *f = fopen(o->image, "rb");
    if (!f) {
        fprintf(stderr, "bench_vision: cannot open %s\n", o->image);
        return IFD_ENOTFOUND;
    }
    uint8_t *buf = NULL, *pic = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (;;) {
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap = cap ? 2 * cap : 1 << 16);
            if (!nb) {
                rc = IFD_ENOMEM;
                break;
            }
            buf = nb;
        }
        const size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    fclose(f);
    ifd_image_t img = {0};
    char err[256];
    ifd_image_prep_t p = ifd_image_prep_gemma3();
    p.width = p.height = s;
    if (rc == 0 && (rc = ifd_image_decode(&img, buf, n, NULL, err, sizeof err)))
        fprintf(stderr, "bench_vision: %s: %s\n", o->image, err);
    const size_t npic = (size_t)3 * s * s;
    if (rc == 0 && !(pic = malloc(npic)))
        rc = IFD_ENOMEM;
    if (rc == 0 && (rc = ifd_image_prep_resize(pic, npic, &img, &p)))
        fprintf(stderr, "bench_vision: resize: %s\n", ifd_strerror(rc));
    if (rc == 0) {
        ifd_image_prep_normalize(pv, pic, 1, &p);
        if (o->dump_pixels)
            rc = write_file(o->dump_pixels, pic, npic);
    }
    ifd_image_free(&img);
    free(pic);
    free(buf);
    return rc;
}

/* Warm-up, then reps timed encodes of one image (random unless --image) into t[]. */
static int run(ifd_vision_t *v, const opts_t *o, double *t)
{
    const int reps = o->reps;
    const size_t s = (size_t)ifd_vision_image_size(v), npx = 3 * s * s;
    const size_t nfeat = (size_t)ifd_vision_tokens_per_image(v) * (size_t)ifd_vision_text_width(v);
    float *pv = malloc(npx * sizeof(float));
    float *feat = malloc(nfeat * sizeof(float));
    int rc = pv && feat ? 0 : IFD_ENOMEM;
    if (rc == 0 && o->image) {
        rc = image_pixels(o, (uint32_t)s, pv);
    } else {
        uint64_t x = 88172645463325252ull;
        for (size_t i = 0; i < npx && rc == 0; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            pv[i] = (float)(x >> 40) / 8388608.0f - 1.0f; /* [-1, 1): normalized pixels */
        }
    }
    for (int r = -1; r < reps && rc == 0; r++) {
        const double t0 = now_ms();
        rc = ifd_vision_encode(v, pv, feat, NULL);
        if (r >= 0)
            t[r] = now_ms() - t0;
        if (rc == 0 && r == -1 && o->dump_features)
            rc = write_file(o->dump_features, feat, nfeat * sizeof(float));
    }
    free(pv);
    free(feat);
    return rc;
}

int main(int argc, char **argv)
{
    opts_t o;
    if (parse(&o, argc, argv)) {
        fprintf(stderr, "usage: bench_vision [--reps N] [--threads N] (--model DIR | --mmproj "
                        "FILE | --random [--layers N] [--image-size S] [--tokens T]) [--image "
                        "FILE [--dump-pixels F] [--dump-features F]]\n");
        return 2;
    }
    ifd_backend_t *be = NULL;
    char err[512];
    ifd_vision_t *v = NULL;
    int rc = ifd_backend_cpu_create(&be, o.threads);
    if (rc == 0 && (rc = load(&v, &o, be, err, sizeof err)))
        fprintf(stderr, "bench_vision: %s\n", err);
    double *t = calloc((size_t)o.reps, sizeof *t);
    if (rc == 0 && (rc = t ? run(v, &o, t) : IFD_ENOMEM))
        fprintf(stderr, "bench_vision: encode: %s\n", ifd_strerror(rc));
    if (rc == 0) {
        const ifd_vision_config_t *c = ifd_vision_config(v);
        qsort(t, (size_t)o.reps, sizeof *t, cmp_d);
        printf("{\"bench\": \"vision\", \"source\": \"%s\", \"image_size\": %u, \"patches\": %u, "
               "\"layers\": %u, \"width\": %u, \"tokens\": %u, \"text_width\": %u, "
               "\"weight_bytes\": %llu, \"reps\": %d, \"encode_ms\": {\"median\": %.3f, "
               "\"min\": %.3f}}\n",
               o.random  ? "random"
               : o.model ? o.model
                         : o.mmproj,
               c->image_size, ifd_vision_n_patches(c), c->n_layer, c->n_embd, c->tokens_per_image,
               c->text_embd, (unsigned long long)ifd_vision_weight_bytes(v), o.reps, t[o.reps / 2],
               t[0]);
    }
    free(t);
    ifd_vision_destroy(v);
    if (be)
        be->ops->destroy(be);
    return rc ? 1 : 0;
}
