/*
 * bench_grammar.c — the cost of a grammar mask per generated token with a
 * real vocabulary (default: the default model's, SmolLM2's 49152 tokens).
 *
 * For each case a valid output is tokenized with the model's tokenizer and
 * the mask of every position along it is computed as the sampler would
 * (ifd_constraint_mask with the growing history). "cold": a fresh store for
 * the request (compile + empty mask cache); "warm": the next request with
 * the same grammar (the worker keeps grammars and their mask caches).
 * Reports, per case and mode, the median / p90 / max / mean µs per token
 * and the cache hits, and the one-time vocabulary trie build.
 *
 * Usage: bench_grammar [--vocab MODEL.gguf] [--reps N]   → JSON on stdout
 */
#include "error.h"
#include "grammar/grammar_conv.h"
#include "grammar/grammar_mask.h"
#include "modelfile/model_config.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    const char *name;
    const char *kind; /* "schema", "object", "regex" */
    const char *source;
    const char *output;
} bcase_t;

static const bcase_t CASES[] = {
    {"json_schema_person", "schema",
     "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":"
     "\"integer\"},\"email\":{\"type\":\"string\"},\"tags\":{\"type\":\"array\",\"items\":{"
     "\"type\":\"string\"},\"maxItems\":5},\"address\":{\"type\":\"object\",\"properties\":{"
     "\"city\":{\"type\":\"string\"},\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"}},"
     "\"required\":[\"city\",\"zip\"]}},\"required\":[\"name\",\"age\",\"tags\",\"address\"]}",
     "{\"name\": \"Ada Lovelace\", \"age\": 36, \"email\": \"ada@example.org\", \"tags\": "
     "[\"mathematics\", \"poetry\", \"engines\"], \"address\": {\"city\": \"London\", \"zip\": "
     "\"12345\"}}"},
    {"json_object", "object", "",
     "{\"model\": \"smollm2\", \"messages\": [{\"role\": \"user\", \"content\": \"Explain how "
     "paged attention keeps the KV cache in fixed-size blocks and why that helps batching.\"}], "
     "\"temperature\": 0.7, \"stream\": true, \"max_tokens\": 256}"},
    {"regex_phone", "regex", "\\(\\d{3}\\) \\d{3}-\\d{4}( ext\\. \\d{1,5})?",
     "(555) 123-4567 ext. 89"},
};

int main(int argc, char **argv)
{
    char defpath[4096];
    const char *vocab_path = NULL;
    int reps = 5;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--vocab") == 0 && i + 1 < argc)
            vocab_path = argv[++i];
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_grammar [--vocab MODEL.gguf] [--reps N]\n");
            return 2;
        }
    }
    if (!vocab_path) {
        ifd_default_model_path(defpath, sizeof defpath);
        vocab_path = defpath;
    }
    char err[512];
    ifd_tokenizer_t *tok;
    if (ifd_tokenizer_create_gguf_file(&tok, vocab_path, err, sizeof err)) {
        fprintf(stderr, "bench_grammar: %s (run deploy/fetch-model.sh)\n", err);
        return 1;
    }
    double t0 = now_us();
    ifd_vocab_t *v;
    if (ifd_vocab_create_tokenizer(tok, &v)) {
        fprintf(stderr, "bench_grammar: vocabulary failed\n");
        return 1;
    }
    double trie_ms = (now_us() - t0) / 1e3;
    int32_t V = ifd_vocab_size(v);
    uint32_t *bits = malloc(((size_t)V + 31) / 32 * 4);
    printf("{\"bench\":\"grammar_mask\",\"vocab\":\"%s\",\"n_vocab\":%d,\"trie_nodes\":%zu,"
           "\"trie_build_ms\":%.1f,\"reps\":%d,\"cases\":[",
           vocab_path, V, ifd_vocab_trie_nodes(v), trie_ms, reps);
    for (size_t ci = 0; ci < sizeof CASES / sizeof CASES[0]; ci++) {
        const bcase_t *bc = &CASES[ci];
        ifd_buf_t g = IFD_BUF_INIT;
        int rc;
        if (strcmp(bc->kind, "schema") == 0) {
            json_error_t je;
            json_t *s = json_loads(bc->source, 0, &je);
            rc = s ? ifd_gconv_json_schema(s, &g, NULL, err, sizeof err) : IFD_EFORMAT;
            json_decref(s);
        } else if (strcmp(bc->kind, "object") == 0) {
            rc = ifd_gconv_json_object(&g);
        } else {
            rc = ifd_gconv_regex(bc->source, strlen(bc->source), &g, NULL, err, sizeof err);
        }
        if (rc) {
            fprintf(stderr, "bench_grammar: %s: %s\n", bc->name, err);
            return 1;
        }
        ifd_tokens_t ids = {0};
        if (ifd_tokenizer_encode(tok, bc->output, strlen(bc->output), 0, &ids)) {
            fprintf(stderr, "bench_grammar: tokenize failed\n");
            return 1;
        }
        size_t n = ids.n;
        double *cold = malloc(n * (size_t)reps * sizeof *cold);
        double *warm = malloc(n * (size_t)reps * sizeof *warm);
        double cold_compile_ms = 0;
        uint64_t hits_cold = 0, walks_cold = 0, hits_warm = 0, walks_warm = 0;
        for (int r = 0; r < reps; r++) {
            ifd_gstore_t *st;
            ifd_gstore_create(v, &st);
            for (int pass = 0; pass < 2; pass++) {
                double *out = pass ? warm : cold;
                ifd_gstore_stats_t s0, s1;
                ifd_gstore_stats(st, &s0);
                double tc = now_us();
                ifd_constraint_t *c;
                if (ifd_constraint_create(st, g.data, g.len, &c, err, sizeof err)) {
                    fprintf(stderr, "bench_grammar: %s\n", err);
                    return 1;
                }
                if (!pass)
                    cold_compile_ms += (now_us() - tc) / 1e3;
                for (size_t i = 0; i < n; i++) {
                    double a = now_us();
                    rc = ifd_constraint_mask(c, ids.ids, i, bits);
                    out[(size_t)r * n + i] = now_us() - a;
                    if (rc || !((bits[ids.ids[i] >> 5] >> (ids.ids[i] & 31)) & 1)) {
                        char tb[64];
                        int tl = ifd_tokenizer_token_bytes(tok, ids.ids[i], 0, tb, sizeof tb);
                        fprintf(stderr,
                                "bench_grammar: %s: token %zu (%d, '%.*s') not allowed "
                                "(rc %d)\n",
                                bc->name, i, ids.ids[i], tl > 0 ? tl : 0, tb, rc);
                        return 1;
                    }
                }
                ifd_constraint_destroy(c);
                ifd_gstore_stats(st, &s1);
                if (pass) {
                    hits_warm += s1.mask_hits - s0.mask_hits;
                    walks_warm += s1.mask_walks - s0.mask_walks;
                } else {
                    hits_cold += s1.mask_hits - s0.mask_hits;
                    walks_cold += s1.mask_walks - s0.mask_walks;
                }
            }
            ifd_gstore_destroy(st);
        }
        printf("%s{\"name\":\"%s\",\"tokens\":%zu,\"grammar_bytes\":%zu,\"compile_ms\":%.2f",
               ci ? "," : "", bc->name, n, g.len, cold_compile_ms / reps);
        for (int pass = 0; pass < 2; pass++) {
            double *x = pass ? warm : cold;
            size_t m = n * (size_t)reps;
            double sum = 0;
            for (size_t i = 0; i < m; i++)
                sum += x[i];
            qsort(x, m, sizeof *x, cmp_d);
            printf(",\"%s\":{\"median_us\":%.2f,\"p90_us\":%.2f,\"max_us\":%.1f,\"mean_us\":%.2f,"
                   "\"cache_hits\":%llu,\"walks\":%llu}",
                   pass ? "warm" : "cold", x[m / 2], x[m * 9 / 10], x[m - 1], sum / (double)m,
                   (unsigned long long)(pass ? hits_warm : hits_cold),
                   (unsigned long long)(pass ? walks_warm : walks_cold));
        }
        printf("}");
        free(cold);
        free(warm);
        ifd_tokens_free(&ids);
        ifd_buf_free(&g);
    }
    printf("]}\n");
    free(bits);
    ifd_vocab_destroy(v);
    ifd_tokenizer_destroy(tok);
    return 0;
}
