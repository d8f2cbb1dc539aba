/*
 * bench/bench_dequant.c — throughput of ifd_cpu_dequantize, one thread.
 *
 *   bench_dequant [--elems N] [--reps R] [--model FILE.gguf]
 *
 * For every supported type: N elements (default 16 Mi) of random blocks
 * (finite fp16 scales), the best of R runs (default 5). With --model, also
 * dequantizes every tensor of that GGUF file once, as a model loader does.
 * Prints one JSON object: {"isa":…, "types":[{"type","elems","ms","gelem_s",
 * "gb_s_out"}…], "model":{"path","elems","ms","melem_s"}}.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/cpu_kernels.h"
#include "error.h"
#include "kernels.h"
#include "modelfile/ggml_types.h"
#include "modelfile/gguf.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static uint64_t rng_next(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Types and the byte offsets of their fp16 fields (-1: none). */
static const struct {
    uint32_t type;
    int off0, off1;
} types[] = {
    {IFD_GGML_F32, -1, -1},  {IFD_GGML_F16, -1, -1},   {IFD_GGML_BF16, -1, -1},
    {IFD_GGML_Q4_0, 0, -1},  {IFD_GGML_Q4_1, 0, 2},    {IFD_GGML_Q5_0, 0, -1},
    {IFD_GGML_Q5_1, 0, 2},   {IFD_GGML_Q8_0, 0, -1},   {IFD_GGML_IQ4_NL, 0, -1},
    {IFD_GGML_Q2_K, 80, 82}, {IFD_GGML_Q3_K, 108, -1}, {IFD_GGML_Q4_K, 0, 2},
    {IFD_GGML_Q5_K, 0, 2},   {IFD_GGML_Q6_K, 208, -1},
};

int main(int argc, char **argv)
{
    int64_t n = 16 << 20;
    int reps = 5;
    const char *model = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--elems") == 0 && i + 1 < argc)
            n = strtoll(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--model") == 0 && i + 1 < argc)
            model = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--elems N] [--reps R] [--model FILE.gguf]\n", argv[0]);
            return 2;
        }
    }
    n = (n + 255) / 256 * 256;
    if (n <= 0 || reps <= 0)
        return 2;

    float *y = malloc((size_t)n * sizeof *y);
    uint8_t *x = malloc((size_t)n * 4);
    if (!y || !x)
        return 1;
    uint64_t seed = 42;
    for (int64_t i = 0; i < n * 4; i += 8) {
        uint64_t r = rng_next(&seed);
        memcpy(x + i, &r, 8);
    }

    printf("{\"isa\":\"%s\",\"types\":[", ifd_cpu_isa_name());
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        uint32_t ty = types[t].type;
        uint32_t be = ifd_ggml_block_elems(ty), bb = ifd_ggml_block_bytes(ty);
        int64_t nb = n / be;
        /* Finite scales (0.001 .. 0.002) so no NaN/inf slows anything down. */
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *blk = x + b * bb;
            const uint8_t h[2] = {(uint8_t)(rng_next(&seed) & 0xff), 0x14};
            if (types[t].off0 >= 0)
                memcpy(blk + types[t].off0, h, 2);
            if (types[t].off1 >= 0)
                memcpy(blk + types[t].off1, h, 2);
        }
        if (ty == IFD_GGML_F16 || ty == IFD_GGML_BF16)
            for (int64_t i = 0; i < n; i++)
                x[2 * i + 1] = ty == IFD_GGML_F16 ? (x[2 * i + 1] & 0xbb) : (x[2 * i + 1] & 0xbf);
        if (ty == IFD_GGML_F32)
            for (int64_t i = 0; i < n; i++)
                x[4 * i + 3] &= 0xbf;
        double best = 1e30;
        for (int r = 0; r < reps; r++) {
            double t0 = now_ms();
            int rc = ifd_cpu_dequantize(y, x, ty, n);
            double dt = now_ms() - t0;
            if (rc != 0) {
                fprintf(stderr, "dequantize %s: %s\n", ifd_ggml_type_name(ty), ifd_strerror(rc));
                return 1;
            }
            if (dt < best)
                best = dt;
        }
        printf("%s{\"type\":\"%s\",\"elems\":%" PRId64 ",\"ms\":%.3f,\"gelem_s\":%.3f,"
               "\"gb_s_out\":%.2f}",
               t ? "," : "", ifd_ggml_type_name(ty), n, best, n / best / 1e6, n * 4.0 / best / 1e6);
    }
    printf("]");

    if (model) {
        ifd_gguf_t *g;
        char err[256];
        int rc = ifd_gguf_open(&g, model, err, sizeof err);
        if (rc != 0) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        uint64_t total = 0, maxel = 0;
        for (uint64_t i = 0; i < ifd_gguf_tensor_count(g); i++) {
            const ifd_gguf_tensor_t *t = ifd_gguf_tensor(g, i);
            uint64_t el = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
            if (el > maxel)
                maxel = el;
        }
        float *buf = malloc(maxel * sizeof *buf);
        if (!buf)
            return 1;
        memset(buf, 0, maxel * sizeof *buf); /* fault the pages in outside the timing */
        /* Touch the mapping too, so the timing is of decoding, not of disk reads. */
        volatile uint8_t sink = 0;
        for (uint64_t i = 0; i < ifd_gguf_tensor_count(g); i++) {
            const ifd_gguf_tensor_t *t = ifd_gguf_tensor(g, i);
            for (uint64_t o = 0; o < t->nbytes; o += 4096)
                sink ^= ((const uint8_t *)t->data)[o];
        }
        double t0 = now_ms();
        for (uint64_t i = 0; i < ifd_gguf_tensor_count(g); i++) {
            const ifd_gguf_tensor_t *t = ifd_gguf_tensor(g, i);
            uint64_t el = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
            rc = ifd_cpu_dequantize(buf, t->data, t->type, (int64_t)el);
            if (rc != 0) {
                fprintf(stderr, "%s (%s): %s\n", t->name, ifd_ggml_type_name(t->type),
                        ifd_strerror(rc));
                return 1;
            }
            total += el;
        }
        double dt = now_ms() - t0;
        /* Again into fresh allocations, as a loader does: adds the page faults. */
        double t1 = now_ms();
        for (uint64_t i = 0; i < ifd_gguf_tensor_count(g); i++) {
            const ifd_gguf_tensor_t *t = ifd_gguf_tensor(g, i);
            uint64_t el = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
            float *fresh = malloc(el * sizeof *fresh);
            if (!fresh || ifd_cpu_dequantize(fresh, t->data, t->type, (int64_t)el) != 0)
                return 1;
            sink ^= ((volatile uint8_t *)fresh)[0];
            free(fresh);
        }
        double dt_fresh = now_ms() - t1;
        printf(",\"model\":{\"path\":\"%s\",\"elems\":%" PRIu64 ",\"ms\":%.1f,"
               "\"melem_s\":%.1f,\"ms_fresh_alloc\":%.1f}",
               model, total, dt, total / dt / 1e3, dt_fresh);
        free(buf);
        ifd_gguf_close(g);
    }
    printf("}\n");
    free(x);
    free(y);
    return 0;
}
