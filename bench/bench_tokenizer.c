/*
 * bench_tokenizer.c — encode throughput (MB/s, single thread) of the
 * tokenizer on 1 MB of mixed English prose, source code and multilingual
 * text (CJK, Cyrillic, Arabic, emoji, numbers), built deterministically from
 * snippets with a fixed-seed PRNG. Prints one JSON object.
 *
 *   bench_tokenizer [--vocab FILE.gguf] [--bytes N] [--runs R]
 *
 * Default vocabulary: the default model (SmolLM2, pre "smollm"). Two modes:
 * "whole" encodes the text in one call; "chunks" encodes it as 4 KiB pieces
 * (the size of a typical prompt), which adds the per-call set-up. Time is the
 * thread's CPU time; the best of R runs is reported (the fastest run is the
 * one least disturbed by other processes on a shared machine). Also reports
 * tokens/s and bytes per token. Exit status 77 when the vocabulary is absent.
 */
#include "error.h"
#include "modelfile/model_config.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *const snippets[] = {
    /* English prose */
    "The quick brown fox jumps over the lazy dog. ",
    "In 1905, Albert Einstein published four papers that changed physics forever. ",
    "She said, \"I'll be there at 7:30 p.m., don't wait for me!\" ",
    "Inference servers keep the model's weights resident on the GPU and batch requests. ",
    "Continuous batching lets new sequences join while others are still decoding.\n\n",
    "However, the results (see Table 3) were inconclusive; more data is needed. ",
    /* code */
    "int main(int argc, char **argv) {\n    for (int i = 0; i < argc; i++)\n"
    "        printf(\"%s\\n\", argv[i]);\n    return 0;\n}\n",
    "def softmax(x):\n    m = max(x)\n    e = [math.exp(v - m) for v in x]\n"
    "    return [v / sum(e) for v in e]\n\n",
    "const res = await fetch(`${base}/v1/chat/completions`, { method: 'POST' });\n",
    "SELECT u.id, COUNT(*) AS n FROM users u JOIN orders o ON o.uid = u.id GROUP BY u.id;\n",
    "    if (err != 0) {\n        goto fail;\n    }\n",
    "{\"model\": \"smollm2\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n",
    /* numbers */
    "Total: 1,234,567.89 USD (+3.5% YoY), id=0x7fffdeadbeef, 2024-06-01T12:00:00Z. ",
    /* multilingual */
    "机器学习是人工智能的一个分支，它使计算机能够从数据中学习。",
    "日本語の文章も正しく分割されなければなりません。",
    "자연어 처리는 컴퓨터가 인간의 언어를 이해하도록 돕습니다. ",
    "Машинное обучение — это раздел искусственного интеллекта. ",
    "التعلم الآلي هو فرع من فروع الذكاء الاصطناعي. ",
    "Ελληνικά: η γρήγορη καφέ αλεπού. ",
    "Émile a mangé une crème brûlée à la française. ",
    "Emoji 🚀🔥 and flags 🇫🇷 and families 👨‍👩‍👧 in chat messages 😀. ",
};

static char *make_text(size_t n)
{
    char *s = malloc(n + 64);
    uint64_t rng = 0x243F6A8885A308D3ull;
    size_t o = 0, ns = sizeof snippets / sizeof snippets[0];
    while (o < n) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        const char *p = snippets[rng % ns];
        size_t l = strlen(p);
        if (o + l > n)
            break;
        memcpy(s + o, p, l);
        o += l;
    }
    while (o < n) /* pad with spaces to exactly n bytes */
        s[o++] = ' ';
    s[o] = '\0';
    return s;
}

int main(int argc, char **argv)
{
    const char *vocab = NULL;
    size_t bytes = 1 << 20;
    int runs = 5;
    char defpath[1024];
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--vocab") == 0 && i + 1 < argc)
            vocab = argv[++i];
        else if (strcmp(argv[i], "--bytes") == 0 && i + 1 < argc)
            bytes = (size_t)strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
            runs = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_tokenizer [--vocab FILE.gguf] [--bytes N] [--runs R]\n");
            return 2;
        }
    }
    if (!vocab) {
        ifd_default_model_path(defpath, sizeof defpath);
        vocab = defpath;
    }
    ifd_tokenizer_t *t;
    char err[512] = "";
    int rc = ifd_tokenizer_create_gguf_file(&t, vocab, err, sizeof err);
    if (rc) {
        fprintf(stderr, "bench_tokenizer: %s (run deploy/fetch-model.sh)\n", err);
        return 77;
    }
    if (runs < 1)
        runs = 1;
    char *text = make_text(bytes);
    ifd_tokens_t ids = {0};
    double best_whole = 1e30, best_chunks = 1e30;
    size_t n_tokens = 0, n_chunk_tokens = 0;
    const size_t chunk = 4096;
    for (int r = 0; r < runs; r++) {
        ids.n = 0;
        double t0 = now_s();
        if (ifd_tokenizer_encode(t, text, bytes, 0, &ids))
            return 1;
        double dt = now_s() - t0;
        if (dt < best_whole)
            best_whole = dt;
        n_tokens = ids.n;
        ids.n = 0;
        t0 = now_s();
        for (size_t o = 0; o < bytes; o += chunk) {
            size_t l = bytes - o < chunk ? bytes - o : chunk;
            /* keep whole UTF-8 characters in a chunk, as a real prompt would */
            while (o + l < bytes && ((unsigned char)text[o + l] & 0xC0) == 0x80)
                l--;
            if (ifd_tokenizer_encode(t, text + o, l, 0, &ids))
                return 1;
            o -= chunk - l;
        }
        dt = now_s() - t0;
        if (dt < best_chunks)
            best_chunks = dt;
        n_chunk_tokens = ids.n;
    }
    double mb = (double)bytes / 1e6;
    printf("{\"bench\": \"tokenizer_encode\", \"vocab\": \"%s\", \"pre\": \"%s\", "
           "\"bytes\": %zu, \"runs\": %d, \"tokens\": %zu, \"bytes_per_token\": %.3f, "
           "\"whole\": {\"seconds\": %.6f, \"mb_per_s\": %.2f, \"tokens_per_s\": %.0f}, "
           "\"chunks_4k\": {\"tokens\": %zu, \"seconds\": %.6f, \"mb_per_s\": %.2f}, "
           "\"target_mb_per_s\": 10}\n",
           vocab, ifd_tokenizer_pre(t), bytes, runs, n_tokens,
           (double)bytes / (double)(n_tokens ? n_tokens : 1), best_whole, mb / best_whole,
           (double)n_tokens / best_whole, n_chunk_tokens, best_chunks, mb / best_chunks);
    ifd_tokens_free(&ids);
    free(text);
    ifd_tokenizer_destroy(t);
    return 0;
}
