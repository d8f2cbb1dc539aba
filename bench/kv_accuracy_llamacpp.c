/* kv_accuracy_llamacpp.c — llama.cpp's side of bench/kv_accuracy_vs_llamacpp.py
 * (docs/kvpool.md, "llama.cpp's figures"). Not part of inferd's build: the script
 * compiles it against a llama.cpp build's libllama (AMX compiled out there).
 *
 *   kv_accuracy_llamacpp MODEL CTK CTV THREADS MODE N IDS_FILE [DUMP]
 *
 * IDS_FILE holds the prompt's token ids (whitespace separated). CTK/CTV: f16, q8_0,
 * q4_0 (K and V cache types, llama.cpp's -ctk/-ctv); flash attention is on for every
 * type (llama.cpp needs it for a quantized V cache).
 *   MODE gen: the prompt in one batch with logits for every position, then N - 1 more
 *             greedy steps (N greedy tokens); prints {"tokens": [...]} and, with DUMP,
 *             writes the logits of every row (n_prompt + N - 1 rows: each prompt
 *             position, then each step but the last) as a float32 .npy.
 *   MODE nll: the prompt's mean negative log-likelihood (every token after the first
 *             predicted from the logits of the position before it, one batch; N unused);
 *             prints {"tokens": T, "nll": mean, "ppl": exp(mean)}.
 * Exit 1 with a message on stderr on any failure. Single-threaded driver; THREADS is
 * llama.cpp's compute threads. */
#include <llama.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static int type_of(const char *s, enum ggml_type *t) {
    if (!strcmp(s, "f16")) *t = GGML_TYPE_F16;
    else if (!strcmp(s, "q8_0")) *t = GGML_TYPE_Q8_0;
    else if (!strcmp(s, "q4_0")) *t = GGML_TYPE_Q4_0;
    else if (!strcmp(s, "f32")) *t = GGML_TYPE_F32;
    else return -1;
    return 0;
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static int write_npy_header(FILE *f, long rows, int cols) {
    char dict[128];
    int n = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%ld, %d), }",
                     rows, cols);
    int total = 10 + n + 1;
    int pad = (64 - total % 64) % 64;
    unsigned short hlen = (unsigned short)(n + pad + 1);
    if (fwrite("\x93NUMPY\x01\x00", 1, 8, f) != 8) return -1;
    unsigned char h[2] = {(unsigned char)(hlen & 0xff), (unsigned char)(hlen >> 8)};
    if (fwrite(h, 1, 2, f) != 2 || fwrite(dict, 1, (size_t)n, f) != (size_t)n) return -1;
    for (int i = 0; i < pad; i++) fputc(' ', f);
    fputc('\n', f);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: %s MODEL CTK CTV THREADS gen|nll N IDS_FILE [DUMP]\n", argv[0]);
        return 1;
    }
    enum ggml_type tk, tv;
    if (type_of(argv[2], &tk) || type_of(argv[3], &tv)) {
        fprintf(stderr, "unknown cache type %s/%s\n", argv[2], argv[3]);
        return 1;
    }
    int threads = atoi(argv[4]), nll_mode = !strcmp(argv[5], "nll"), n_gen = atoi(argv[6]);
    const char *dump = argc > 8 ? argv[8] : NULL;
    if (!nll_mode && (strcmp(argv[5], "gen") || n_gen < 1)) {
        fprintf(stderr, "bad mode or N\n");
        return 1;
    }
    FILE *f = fopen(argv[7], "r");
    if (!f) { perror(argv[7]); return 1; }
    int cap = 1024, n_prompt = 0;
    llama_token *ids = malloc(sizeof *ids * (size_t)cap);
    int v;
    while (ids && fscanf(f, "%d", &v) == 1) {
        if (n_prompt == cap) ids = realloc(ids, sizeof *ids * (size_t)(cap *= 2));
        if (ids) ids[n_prompt++] = v;
    }
    fclose(f);
    if (!ids || n_prompt < 2) { fprintf(stderr, "no prompt ids\n"); return 1; }

    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "cannot load %s\n", argv[1]); return 1; }
    int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    int n_ctx = n_prompt + (nll_mode ? 0 : n_gen) + 16;
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)n_ctx;
    cp.n_batch = (uint32_t)n_ctx;
    cp.n_ubatch = 512;
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = threads;
    cp.type_k = tk;
    cp.type_v = tv;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    cp.no_perf = true;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "cannot make a context (%s/%s)\n", argv[2], argv[3]); return 1; }

    struct llama_batch b = llama_batch_init(n_prompt, 0, 1);
    for (int i = 0; i < n_prompt; i++) {
        b.token[i] = ids[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    b.n_tokens = n_prompt;
    if (llama_decode(ctx, b)) { fprintf(stderr, "llama_decode failed on the prompt\n"); return 1; }

    if (nll_mode) {
        double sum = 0;
        for (int i = 0; i + 1 < n_prompt; i++) {
            const float *l = llama_get_logits_ith(ctx, i);
            double mx = l[argmax(l, n_vocab)], z = 0;
            for (int j = 0; j < n_vocab; j++) z += exp((double)l[j] - mx);
            sum += mx + log(z) - (double)l[ids[i + 1]];
        }
        double mean = sum / (n_prompt - 1);
        printf("{\"tokens\": %d, \"nll\": %.6f, \"ppl\": %.4f}\n", n_prompt, mean, exp(mean));
        return 0;
    }

    FILE *out = NULL;
    if (dump) {
        out = fopen(dump, "wb");
        if (!out || write_npy_header(out, n_prompt + n_gen - 1, n_vocab)) { perror(dump); return 1; }
        for (int i = 0; i < n_prompt; i++)
            if (fwrite(llama_get_logits_ith(ctx, i), sizeof(float), (size_t)n_vocab, out) != (size_t)n_vocab) {
                perror(dump);
                return 1;
            }
    }
    int *gen = malloc(sizeof *gen * (size_t)n_gen);
    if (!gen) return 1;
    gen[0] = argmax(llama_get_logits_ith(ctx, n_prompt - 1), n_vocab);
    for (int s = 1; s < n_gen; s++) {
        b.token[0] = gen[s - 1];
        b.pos[0] = n_prompt + s - 1;
        b.n_seq_id[0] = 1;
        b.seq_id[0][0] = 0;
        b.logits[0] = 1;
        b.n_tokens = 1;
        if (llama_decode(ctx, b)) { fprintf(stderr, "llama_decode failed at step %d\n", s); return 1; }
        const float *l = llama_get_logits_ith(ctx, 0);
        if (out && fwrite(l, sizeof(float), (size_t)n_vocab, out) != (size_t)n_vocab) { perror(dump); return 1; }
        gen[s] = argmax(l, n_vocab);
    }
    if (out && fclose(out)) { perror(dump); return 1; }
    printf("{\"tokens\": [");
    for (int s = 0; s < n_gen; s++) printf("%s%d", s ? ", " : "", gen[s]);
    printf("]}\n");
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    free(gen);
    free(ids);
    return 0;
}
