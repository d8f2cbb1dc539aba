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
 * and the cache hits, walks and masks through frame masks ("frames"), and
 * the one-time vocabulary trie build (with the frame masks precomputed for
 * it: "vocab_frames", "vocab_frame_bytes").
 *
 * Usage: bench_grammar [--vocab MODEL.gguf] [--reps N] [--clock wall|thread] → JSON on stdout
 * (--clock thread: the thread's CPU time instead of wall time, for A/B runs on a
 * loaded machine)
 *
 * --schemas (bench/mask_vs_peers.py): one JSON object per stdin line,
 * {"schema": FILE, "text": INSTANCE} (or "ids": [...] instead of "text"),
 * each converted as the daemon converts response_format
 * (ifd_gconv_json_schema_loose) and measured cold: a fresh store (the
 * vocabulary trie is built once, as a worker does), the grammar compiled,
 * then the mask at every position of the token sequence (the text tokenized
 * with --vocab's tokenizer) and once more after its last token, where an
 * end-of-generation id must be allowed. One JSON line per input:
 *   {"schema", "ok", "error", "approx", "compile_ms" (conversion + compile),
 *    "ids", "mask_us" [n + 1], "rejected": null | {"pos", "token", "rc"}}
 * "rejected" names the first token the mask forbids ("pos" n: no end id
 * allowed after the text; "rc" the mask call's error, if any); "mask_us"
 * then stops there. "grammar_allows" says whether the slow mask
 * (ifd_constraint_mask_brute: the token's bytes through the matcher) allows
 * that token: true is a bug of the mask, false an instance the grammar does
 * not describe (inferd writes declared properties only, in schema order).
 */
#include "error.h"
#include "grammar/grammar_conv.h"
#include "grammar/grammar_mask.h"
#include "grammar/schema_json.h"
#include "modelfile/model_config.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* --clock thread: the thread's CPU time (A/B on a loaded machine), else wall */
static clockid_t bench_clock = CLOCK_MONOTONIC;

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(bench_clock, &ts);
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

/* The schema of path converted (as the daemon does) into g; 0 or an error in err. */
static int load_schema(const char *path, ifd_buf_t *g, bool *approx, char *err, size_t errlen)
{
    /* read as the daemon reads request bodies: integers beyond int64 kept (schema_json.h) */
    json_error_t je;
    ifd_buf_t raw = IFD_BUF_INIT;
    FILE *f = fopen(path, "rb");
    char chunk[65536];
    size_t got;
    while (f && (got = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (ifd_buf_append(&raw, chunk, got))
            break;
    json_t *schema = NULL;
    if (f) {
        fclose(f);
        schema = ifd_schema_json_loadb(raw.data ? raw.data : "", raw.len, JSON_DECODE_ANY, &je);
    } else {
        snprintf(je.text, sizeof je.text, "cannot open the file");
    }
    ifd_buf_free(&raw);
    if (!schema) {
        snprintf(err, errlen, "unreadable: %s", je.text);
        return IFD_EFORMAT;
    }
    int rc = ifd_gconv_json_schema_loose(schema, g, NULL, approx, err, errlen);
    json_decref(schema);
    return rc;
}

/* The token ids of one input line: its "ids", else its "text" tokenized. */
static int line_ids(const ifd_tokenizer_t *tok, const json_t *in, ifd_tokens_t *ids)
{
    const json_t *arr = json_object_get(in, "ids");
    if (json_is_array(arr)) {
        size_t i;
        const json_t *x;
        json_array_foreach(arr, i, x)
        {
            int32_t id = (int32_t)json_integer_value(x);
            if (ifd_tokens_push(ids, id))
                return IFD_ENOMEM;
        }
        return 0;
    }
    const char *text = json_string_value(json_object_get(in, "text"));
    if (!text)
        return IFD_EINVAL;
    return ifd_tokenizer_encode(tok, text, json_string_length(json_object_get(in, "text")), 0, ids);
}

/* Whether bit id of bits is set. */
static bool allowed(const uint32_t *bits, int32_t id)
{
    return (bits[id >> 5] >> (id & 31)) & 1;
}

/* Cold masks along ids (see the file's comment) into r. */
static void cold_masks(const ifd_vocab_t *v, const ifd_tokenizer_t *tok, const ifd_buf_t *g,
                       const ifd_tokens_t *ids, uint32_t *bits, double convert_ms, json_t *r)
{
    char err[512] = "";
    ifd_gstore_t *st;
    if (ifd_gstore_create(v, &st)) {
        json_object_set_new(r, "ok", json_false());
        json_object_set_new(r, "error", json_string("out of memory"));
        return;
    }
    double tc = now_us();
    ifd_constraint_t *c;
    int rc = ifd_constraint_create(st, g->data, g->len, &c, err, sizeof err);
    double compile_ms = convert_ms + (now_us() - tc) / 1e3;
    json_object_set_new(r, "ok", json_boolean(rc == 0));
    json_object_set_new(r, "compile_ms", json_real(compile_ms));
    if (rc) {
        json_object_set_new(r, "error", json_string(err[0] ? err : ifd_strerror(rc)));
        ifd_gstore_destroy(st);
        return;
    }
    json_t *us = json_array(), *rej = json_null();
    const ifd_token_t *eog;
    size_t n_eog = ifd_tokenizer_eog_ids(tok, &eog);
    for (size_t i = 0; i <= ids->n; i++) {
        double a = now_us();
        rc = ifd_constraint_mask(c, ids->ids, i, bits);
        json_array_append_new(us, json_real(now_us() - a));
        bool ok = !rc;
        if (ok && i < ids->n) {
            ok = allowed(bits, ids->ids[i]);
        } else if (ok) {
            ok = false;
            for (size_t e = 0; e < n_eog; e++)
                ok = ok || allowed(bits, eog[e]);
        }
        if (!ok) {
            rej = json_pack("{s:I,s:i,s:i}", "pos", (json_int_t)i, "token",
                            i < ids->n ? ids->ids[i] : -1, "rc", rc);
            /* the mask against the grammar itself: the slow mask (each token's
             * bytes through the matcher) allowing the token is a bug of the fast
             * one; forbidding it too, the instance is outside the grammar */
            if (!rc && i < ids->n && !ifd_constraint_mask_brute(c, ids->ids, i, bits))
                json_object_set_new(rej, "grammar_allows",
                                    json_boolean(allowed(bits, ids->ids[i])));
            break;
        }
    }
    json_object_set_new(r, "mask_us", us);
    json_object_set_new(r, "rejected", rej);
    ifd_constraint_destroy(c);
    ifd_gstore_destroy(st);
}

/* --schemas: one input line (see the file's comment) → one JSON line. */
static void schema_line(const ifd_vocab_t *v, const ifd_tokenizer_t *tok, const char *line,
                        uint32_t *bits)
{
    json_error_t je;
    json_t *in = json_loads(line, 0, &je);
    const char *path = json_string_value(json_object_get(in, "schema"));
    json_t *r = json_pack("{s:s}", "schema", path ? path : "");
    char err[512] = "";
    ifd_buf_t g = IFD_BUF_INIT;
    ifd_tokens_t ids = {0};
    bool approx = false;
    double t0 = now_us();
    int rc = path ? load_schema(path, &g, &approx, err, sizeof err) : IFD_EINVAL;
    double convert_ms = (now_us() - t0) / 1e3;
    if (!rc && line_ids(tok, in, &ids)) {
        snprintf(err, sizeof err, "no \"ids\" or \"text\" to tokenize");
        rc = IFD_EINVAL;
    }
    if (rc) {
        json_object_set_new(r, "ok", json_false());
        json_object_set_new(r, "error", json_string(err[0] ? err : ifd_strerror(rc)));
    } else {
        json_t *ja = json_array();
        for (size_t i = 0; i < ids.n; i++)
            json_array_append_new(ja, json_integer(ids.ids[i]));
        json_object_set_new(r, "ids", ja);
        json_object_set_new(r, "approx", json_boolean(approx));
        cold_masks(v, tok, &g, &ids, bits, convert_ms, r);
    }
    char *out = json_dumps(r, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (out)
        printf("%s\n", out);
    fflush(stdout);
    free(out);
    json_decref(r);
    json_decref(in);
    ifd_tokens_free(&ids);
    ifd_buf_free(&g);
}

/* --schemas over stdin's lines (a line may be long: a whole instance). */
static int schemas_mode(const ifd_vocab_t *v, const ifd_tokenizer_t *tok, uint32_t *bits)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, stdin)) > 0) {
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0])
            schema_line(v, tok, line, bits);
    }
    free(line);
    return 0;
}

int main(int argc, char **argv)
{
    char defpath[4096];
    const char *vocab_path = NULL;
    int reps = 5;
    bool schemas = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--schemas") == 0)
            schemas = true;
        else if (strcmp(argv[i], "--vocab") == 0 && i + 1 < argc)
            vocab_path = argv[++i];
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--clock") == 0 && i + 1 < argc)
            bench_clock =
                strcmp(argv[++i], "thread") == 0 ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC;
        else {
            fprintf(stderr, "usage: bench_grammar [--vocab MODEL.gguf] [--clock wall|thread] "
                            "[--reps N | --schemas]\n");
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
    size_t frame_bytes;
    size_t n_frames = ifd_vocab_frames(v, &frame_bytes);
    uint32_t *bits = malloc(((size_t)V + 31) / 32 * 4);
    if (schemas) {
        int rc = schemas_mode(v, tok, bits);
        free(bits);
        ifd_vocab_destroy(v);
        ifd_tokenizer_destroy(tok);
        return rc;
    }
    printf("{\"bench\":\"grammar_mask\",\"vocab\":\"%s\",\"n_vocab\":%d,\"trie_nodes\":%zu,"
           "\"trie_build_ms\":%.1f,\"vocab_frames\":%zu,\"vocab_frame_bytes\":%zu,\"reps\":%d,"
           "\"cases\":[",
           vocab_path, V, ifd_vocab_trie_nodes(v), trie_ms, n_frames, frame_bytes, reps);
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
        uint64_t frames_cold = 0, frames_warm = 0; /* masks through frame masks */
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
                uint64_t fr = s1.frame_shared + s1.frame_local + s1.frame_builds -
                              (s0.frame_shared + s0.frame_local + s0.frame_builds);
                if (pass) {
                    hits_warm += s1.mask_hits - s0.mask_hits;
                    walks_warm += s1.mask_walks - s0.mask_walks;
                    frames_warm += fr;
                } else {
                    hits_cold += s1.mask_hits - s0.mask_hits;
                    walks_cold += s1.mask_walks - s0.mask_walks;
                    frames_cold += fr;
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
                   "\"cache_hits\":%llu,\"walks\":%llu,\"frames\":%llu}",
                   pass ? "warm" : "cold", x[m / 2], x[m * 9 / 10], x[m - 1], sum / (double)m,
                   (unsigned long long)(pass ? hits_warm : hits_cold),
                   (unsigned long long)(pass ? walks_warm : walks_cold),
                   (unsigned long long)(pass ? frames_warm : frames_cold));
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
