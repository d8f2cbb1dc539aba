/*
 * bench_chat_template.c — cost of rendering a chat request through
 * ifd_chat_render_request (message normalisation, Jinja rendering, the
 * output buffer; no tokenizer, so no placeholder scan) for Jinja templates
 * and a built-in family, over conversations of 2, 20 and 200 messages
 * (~100 bytes per message; a system message, then user/assistant turns),
 * with two tool definitions for the Jinja templates (the built-in family
 * cannot render tools).
 * Prints one JSON object with, per template and length, the median and best
 * of R timed runs in microseconds (thread CPU time) and the prompt size.
 *
 *   bench_chat_template [--runs R] [TEMPLATE.jinja ...]
 *
 * Default templates: Qwen3, Llama 3.1 and Hermes-2-Pro (tool use) from
 * $INFERD_TESTDATA_DIR/chat-templates (default ../shared/testdata) when
 * present, and the built-in chatml family.
 */
#include "chat/chat_template.h"
#include "error.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return 1e6 * (double)ts.tv_sec + 1e-3 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static json_t *conversation(int n)
{
    json_t *m = json_array();
    json_array_append_new(m, json_pack("{s:s,s:s}", "role", "system", "content",
                                       "You are a helpful assistant. Answer briefly and exactly."));
    for (int i = 1; i < n; i++) {
        char buf[160];
        snprintf(buf, sizeof buf,
                 "%s %d: the quick brown fox jumps over the lazy dog; 2 + 2 = 4, "
                 "see section %d for details.",
                 i % 2 ? "Question" : "Answer", i, i * 7);
        json_array_append_new(m, json_pack("{s:s,s:s}", "role", i % 2 ? "user" : "assistant",
                                           "content", buf));
    }
    return m;
}

static int bench_one(const char *label, const ifd_chat_params_t *p, const json_t *tools, int runs,
                     bool *first)
{
    ifd_chat_template_t *t;
    char err[512];
    if (ifd_chat_template_create(&t, NULL, p, err, sizeof err)) {
        fprintf(stderr, "bench_chat_template: %s: %s\n", label, err);
        return 1;
    }
    static const int lens[] = {2, 20, 200};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        json_t *msgs = conversation(lens[k]);
        ifd_chat_request_t req = {.messages = msgs, .tools = tools, .add_generation_prompt = true};
        double *us = malloc((size_t)runs * sizeof *us);
        size_t bytes = 0;
        int rc = 0;
        for (int r = 0; r < runs && !rc; r++) {
            ifd_chat_prompt_t pr;
            double t0 = now_us();
            rc = ifd_chat_render_request(t, &req, &pr, err, sizeof err);
            us[r] = now_us() - t0;
            bytes = pr.len;
            ifd_chat_prompt_free(&pr);
        }
        if (rc) {
            fprintf(stderr, "bench_chat_template: %s: %s\n", label, err);
        } else {
            qsort(us, (size_t)runs, sizeof *us, cmp_d);
            printf("%s\n    {\"template\": \"%s\", \"messages\": %d, \"tools\": %zu, "
                   "\"prompt_bytes\": %zu, \"median_us\": %.1f, \"best_us\": %.1f}",
                   *first ? "" : ",", label, lens[k], json_array_size(tools), bytes,
                   us[runs / 2], us[0]);
            *first = false;
        }
        free(us);
        json_decref(msgs);
    }
    ifd_chat_template_destroy(t);
    return 0;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s)
        s[n] = '\0';
    fclose(f);
    return s;
}

int main(int argc, char **argv)
{
    int runs = 50, a = 1;
    if (argc > 2 && strcmp(argv[1], "--runs") == 0) {
        runs = atoi(argv[2]);
        a = 3;
    }
    if (runs < 1)
        runs = 1;
    const char *dflt[] = {"Qwen-Qwen3-0.6B.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja",
                          "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja"};
    const char *td = getenv("INFERD_TESTDATA_DIR");
    char path[1024];
    bool first = true;
    json_t *tools = json_loads(
        "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
        "\"Current weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": "
        "{\"type\": \"string\"}}, \"required\": [\"city\"]}}}, {\"type\": \"function\", "
        "\"function\": {\"name\": \"search\", \"description\": \"Web search\", \"parameters\": "
        "{\"type\": \"object\", \"properties\": {\"q\": {\"type\": \"string\"}}}}}]",
        0, NULL);
    printf("{\"bench\": \"chat_template\", \"runs\": %d, \"results\": [", runs);
    int n_files = argc - a;
    for (int i = 0; i < (n_files ? n_files : 3); i++) {
        const char *file = n_files ? argv[a + i] : path;
        if (!n_files)
            snprintf(path, sizeof path, "%s/chat-templates/%s", td ? td : "../shared/testdata",
                     dflt[i]);
        char *src = slurp(file);
        if (!src) {
            fprintf(stderr, "bench_chat_template: %s: not found, skipped\n", file);
            continue;
        }
        ifd_chat_params_t p = ifd_chat_default_params();
        p.jinja = src;
        const char *base = strrchr(file, '/');
        bench_one(base ? base + 1 : file, &p, tools, runs, &first);
        free(src);
    }
    ifd_chat_params_t p = ifd_chat_default_params();
    p.name = "chatml";
    bench_one("builtin:chatml", &p, NULL, runs, &first);
    printf("\n]}\n");
    json_decref(tools);
    return 0;
}
