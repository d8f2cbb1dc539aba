/*
 * bench_vision.c — one image through Gemma 3's vision tower and projector
 * (worker/vision.h) on the CPU backend: the encode time of a random image,
 * the median and minimum of --reps runs after one warm-up.
 *
 * Usage: bench_vision [--reps N] [--threads N] (--model DIR | --mmproj FILE |
 *                     --random [--layers N] [--image-size S] [--tokens T])
 *   --model   a Gemma3ForConditionalGeneration directory (its tower);
 *   --mmproj  a llama.cpp mmproj GGUF;
 *   --random  google/gemma-3-4b's tower shape with random bf16 weights (the
 *             issue's benchmark shape), optionally cut to N layers or
 *             another image size / token count for a quick run.
 * → JSON on stdout. Figures are to be taken on a quiet machine.
 */
#include "error.h"
#include "worker/vision.h"

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
    const char *model, *mmproj;
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
        else
            return -1;
        i++;
    }
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

/* Warm-up, then reps timed encodes of one random image into t[]. */
static int run(ifd_vision_t *v, int reps, double *t)
{
    const size_t s = (size_t)ifd_vision_image_size(v), npx = 3 * s * s;
    float *pv = malloc(npx * sizeof(float));
    float *feat = malloc((size_t)ifd_vision_tokens_per_image(v) * (size_t)ifd_vision_text_width(v) *
                         sizeof(float));
    int rc = pv && feat ? 0 : IFD_ENOMEM;
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < npx && rc == 0; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        pv[i] = (float)(x >> 40) / 8388608.0f - 1.0f; /* [-1, 1): normalized pixels */
    }
    for (int r = -1; r < reps && rc == 0; r++) {
        const double t0 = now_ms();
        rc = ifd_vision_encode(v, pv, feat, NULL);
        if (r >= 0)
            t[r] = now_ms() - t0;
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
                        "FILE | --random [--layers N] [--image-size S] [--tokens T])\n");
        return 2;
    }
    ifd_backend_t *be = NULL;
    char err[512];
    ifd_vision_t *v = NULL;
    int rc = ifd_backend_cpu_create(&be, o.threads);
    if (rc == 0 && (rc = load(&v, &o, be, err, sizeof err)))
        fprintf(stderr, "bench_vision: %s\n", err);
    double *t = calloc((size_t)o.reps, sizeof *t);
    if (rc == 0 && (rc = t ? run(v, o.reps, t) : IFD_ENOMEM))
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
