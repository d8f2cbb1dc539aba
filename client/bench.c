/*
 * bench.c — `infer bench serve` and `infer bench cache` (see bench.h).
 *
 * The measuring is loadgen.c's (timing rules in loadgen.h); this file
 * makes the prompts, runs the benchmarks and writes their reports.
 *
 * Random prompts: a text of random common words is tokenized once by the
 * daemon (POST /tokenize, no special tokens; llama-server's /tokenize too)
 * into a pool; prompt i is the window of input_len token ids starting at a
 * distinct offset of the pool, sent as token ids to /v1/completions, so its
 * length is exact and no two prompts share a cacheable prefix. Every run of
 * a sweep gets fresh windows, so no run profits from the prefix cache
 * filled by the last. With --prefix-len P, every prompt starts with the
 * same P tokens (the pool's first P) followed by its own window: the
 * shared-system-prompt case, where the prefix cache serves the P tokens
 * from the second request on (the warm-up request computes them).
 *
 * Each command is a short main over named phases: parse the arguments,
 * reach the daemon, warm up, run (each run of a sweep), report.
 */
#include "bench.h"

#include "api.h"
#include "arena.h"
#include "cli.h"
#include "error.h"
#include "loadgen.h"
#include "plot.h"
#include "prom.h"
#include "stats.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- small helpers --------------------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static double rand01(uint64_t *s)
{
    return (double)(splitmix64(s) >> 11) * 0x1.0p-53;
}

static const char *const words[] = {
    "time",    "person",   "year",   "way",       "day",     "thing",     "man",     "world",
    "life",    "hand",     "part",   "child",     "eye",     "woman",     "place",   "work",
    "week",    "case",     "point",  "number",    "group",   "problem",   "fact",    "river",
    "good",    "new",      "first",  "last",      "long",    "great",     "little",  "own",
    "other",   "old",      "right",  "big",       "high",    "different", "small",   "large",
    "next",    "early",    "young",  "important", "few",     "public",    "bad",     "same",
    "able",    "to",       "of",     "in",        "for",     "on",        "with",    "at",
    "by",      "from",     "up",     "about",     "into",    "over",      "after",   "the",
    "and",     "a",        "that",   "it",        "not",     "he",        "as",      "you",
    "this",    "but",      "his",    "they",      "her",     "she",       "or",      "an",
    "will",    "my",       "one",    "all",       "would",   "there",     "their",   "what",
    "so",      "out",      "if",     "who",       "get",     "which",     "go",      "me",
    "when",    "make",     "can",    "like",      "no",      "just",      "him",     "know",
    "take",    "people",   "see",    "come",      "think",   "look",      "want",    "give",
    "use",     "find",     "tell",   "ask",       "seem",    "feel",      "try",     "leave",
    "call",    "mountain", "garden", "window",    "paper",   "music",     "market",  "story",
    "water",   "light",    "stone",  "bridge",    "engine",  "signal",    "forest",  "letter",
    "winter",  "summer",   "silver", "golden",    "quiet",   "rapid",     "gentle",  "bright",
    "carry",   "build",    "travel", "listen",    "measure", "follow",    "answer",  "remember",
    "kitchen", "ocean",    "island", "village",   "teacher", "doctor",    "captain", "farmer",
    "machine", "memory",   "number", "pattern",   "season",  "shadow",    "thunder", "valley",
};
#define N_WORDS (sizeof words / sizeof words[0])

/* ---- prompts --------------------------------------------------------------------------------- */

/* Random words, `n` of them, appended to b. */
static int random_words(ifd_buf_t *b, size_t n, uint64_t *rng)
{
    for (size_t i = 0; i < n; i++) {
        const char *w = words[splitmix64(rng) % N_WORDS];
        if ((i && ifd_buf_append(b, " ", 1) < 0) || ifd_buf_puts(b, w) < 0)
            return IFD_ENOMEM;
    }
    return 0;
}

/*
 * A pool of at least `need` token ids from the daemon's tokenizer. 0; 1
 * when the daemon has no /tokenize (404/405: the caller falls back to text
 * prompts); an exit code otherwise (printed).
 */
static int token_pool(const ifd_cli_http_target_t *t, const ifd_cli_conn_t *co, const char *model,
                      size_t need, uint64_t *rng, int32_t **out, size_t *n_out)
{
    ifd_buf_t text = IFD_BUF_INIT;
    int32_t *pool = NULL;
    size_t n = 0;
    int code = IFD_CLI_EXIT_FAIL;
    size_t want_words = need + 16;
    for (int attempt = 0; attempt < 4 && n < need; attempt++) {
        ifd_buf_clear(&text);
        if (random_words(&text, want_words, rng) < 0)
            goto out;
        /* "prompt"/"add_special_tokens" are inferd's (and vLLM's) names, "content"/
         * "add_special" llama.cpp's llama-server's: both sets, so either server answers */
        json_t *req = json_pack("{s:s,s:b,s:s,s:b}", "prompt", text.data, "add_special_tokens", 0,
                                "content", text.data, "add_special", 0);
        if (model)
            json_object_set_new(req, "model", json_string(model));
        char *body = json_dumps(req, JSON_COMPACT);
        json_decref(req);
        if (!body)
            goto out;
        ifd_buf_t resp = IFD_BUF_INIT;
        int status = 0;
        int rc = ifd_cli_http_fetch(t, "POST", "/tokenize", body, strlen(body),
                                    co->timeout_s * 1000, &status, &resp);
        free(body);
        if (rc < 0) {
            code = ifd_cli_report(t, rc);
            goto out;
        }
        if (status == 404 || status == 405) {
            ifd_buf_free(&resp);
            code = 1;
            goto out;
        }
        if (status != 200) {
            code = ifd_cli_report_http_error(t, status, resp.data, resp.len, NULL);
            ifd_buf_free(&resp);
            goto out;
        }
        json_t *o = json_loadb(resp.data, resp.len, 0, NULL);
        ifd_buf_free(&resp);
        json_t *toks = json_object_get(o, "tokens");
        if (!json_is_array(toks) || json_array_size(toks) == 0) {
            fprintf(stderr, "infer bench: /tokenize answered without tokens\n");
            json_decref(o);
            code = IFD_CLI_EXIT_SERVER;
            goto out;
        }
        free(pool);
        n = json_array_size(toks);
        pool = malloc(n * sizeof(*pool));
        if (!pool) {
            json_decref(o);
            goto out;
        }
        for (size_t i = 0; i < n; i++)
            pool[i] = (int32_t)json_integer_value(json_array_get(toks, i));
        json_decref(o);
        if (n < need) /* fewer tokens than words: scale up and retry */
            want_words = want_words * need / n + 64;
    }
    if (n < need) {
        fprintf(stderr, "infer bench: could not build a pool of %zu tokens\n", need);
        goto out;
    }
    *out = pool;
    *n_out = n;
    pool = NULL;
    code = 0;
out:
    free(pool);
    ifd_buf_free(&text);
    return code;
}

/* Prompt and generation token counters from /metrics. false when unknown. */
static bool scrape_tokens(const ifd_cli_http_target_t *t, const ifd_cli_conn_t *co, double *in,
                          double *out)
{
    ifd_buf_t b = IFD_BUF_INIT;
    int status = 0;
    bool ok = false, f1 = false, f2 = false;
    if (ifd_cli_http_fetch(t, "GET", "/metrics", NULL, 0, co->timeout_s * 1000, &status, &b) == 0 &&
        status == 200) {
        ifd_cli_prom_t p;
        if (ifd_cli_prom_parse(&p, b.data, b.len, NULL) == 0) {
            *in = ifd_cli_prom_sum(&p, "inferd_prompt_tokens_total", NULL, NULL, &f1);
            *out = ifd_cli_prom_sum(&p, "inferd_generation_tokens_total", NULL, NULL, &f2);
            ok = f1 && f2;
            ifd_cli_prom_free(&p);
        }
    }
    ifd_buf_free(&b);
    return ok;
}

/* Writes o to path ("-": stdout) and drops it. NULL (a json_pack that
 * failed) is IFD_CLI_EXIT_FAIL. 0 or an exit code (printed when the write
 * failed). */
static int write_json(const char *path, json_t *o)
{
    if (!o)
        return IFD_CLI_EXIT_FAIL;
    int rc = strcmp(path, "-") == 0 ? json_dumpf(o, stdout, JSON_INDENT(2))
                                    : json_dump_file(o, path, JSON_INDENT(2));
    json_decref(o);
    if (rc < 0) {
        fprintf(stderr, "infer bench: cannot write %s: %s\n", path, strerror(errno));
        return IFD_CLI_EXIT_FAIL;
    }
    if (strcmp(path, "-") == 0)
        fputc('\n', stdout);
    return 0;
}

/* ---- infer bench serve ----------------------------------------------------------------------- */

enum {
    OPT_RATE = IFD_CLI_OPT_FIRST_FREE,
    OPT_INPUT_LEN,
    OPT_OUTPUT_LEN,
    OPT_RANGE,
    OPT_PREFIX_LEN,
    OPT_PROMPTS,
    OPT_ENDPOINT,
    OPT_IGNORE_EOS,
    OPT_NO_IGNORE_EOS,
    OPT_SWEEP,
    OPT_WARMUP,
    OPT_JSON,
    OPT_PLOT,
    OPT_NO_PROGRESS,
    OPT_SEED,
    OPT_PROMPT,
    OPT_REPS,
    OPT_TEMPERATURE,
};

typedef struct {
    ifd_cli_conn_t co;
    ifd_cli_http_target_t t;
    const char *model;
    double temperature;
    bool chat;
    long long input_len, output_len, prefix_len, num, conc, warmup;
    double range, rate;
    int ignore_eos; /* -1 default (on for random prompts), 0, 1 */
    const char *prompts_file;
    int sweep[32];
    size_t n_sweep;
    const char *json_file, *plot_file;
    bool progress;
    uint64_t seed;
    bool conc_given; /* -c came: an open-loop run keeps it */
} serve_t;

static void serve_usage(FILE *f)
{
    fprintf(f,
            "Usage: infer bench serve [options]\n"
            "\n"
            "Load the daemon with streaming completion requests and measure it the way vLLM's\n"
            "serving benchmark does: time to first token (TTFT), time per output token after\n"
            "the first (TPOT), inter-token latency (ITL) and end-to-end latency (E2EL) as mean,\n"
            "median, p90 and p99; request and token throughput. Prompts are random token\n"
            "sequences of exactly --input-len tokens (via the daemon's /tokenize), each\n"
            "unique, so the prefix cache does not flatter the numbers.\n"
            "\n"
            "Load:\n"
            "  -c, --concurrency N     requests in flight at most (default 1; 0 = no limit,\n"
            "                          with --request-rate)\n"
            "  -r, --request-rate R    Poisson arrivals at R requests/s (default: all at once,\n"
            "                          limited by --concurrency)\n"
            "  -N, --num-prompts N     requests per run (default max(16, 4 x concurrency))\n"
            "      --sweep LIST        one run per concurrency, e.g. 1,4,16,64\n"
            "      --warmup N          unmeasured requests first (default 1)\n"
            "Requests:\n"
            "      --input-len N       prompt tokens (default 128)\n"
            "      --output-len N      tokens to generate (default 128)\n"
            "      --range-ratio R     lengths uniform in [len*(1-R), len*(1+R)] (default 0)\n"
            "      --prefix-len P      P more prompt tokens, the same for every request, in\n"
            "                          front (a shared system prompt: the prefix cache serves\n"
            "                          them; default 0)\n"
            "      --prompts FILE      prompts from FILE instead: one per line, or JSON lines\n"
            "                          {\"prompt\": …, \"max_tokens\": …}\n"
            "      --endpoint E        completions (default) or chat\n"
            "      --ignore-eos        generate exactly the output length (default with random\n"
            "                          prompts); --no-ignore-eos to stop at end of text\n"
            "  -m, --model NAME        the model (default: the daemon's)\n"
            "  -t, --temperature T     sampling temperature (default 0: greedy)\n"
            "      --seed N            seed of the prompts and arrivals (default 0)\n"
            "Output:\n"
            "      --json FILE         the results as JSON (- for stdout), per run and per\n"
            "                          request\n"
            "      --plot FILE.svg     throughput and p99 latencies against concurrency\n"
            "      --no-progress       no progress bar (it is drawn only on a terminal)\n"
            "  -h, --help              this help\n"
            "\n%s\n"
            "Exit status: 0 all requests succeeded, 5 some failed (see the report), 3/4 as\n"
            "for every command.\n",
            ifd_cli_conn_help);
}

/* Parses "1,4,16,64". 0 or -1. */
static int parse_sweep(serve_t *s, const char *arg)
{
    s->n_sweep = 0;
    const char *p = arg;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 1 || v > 100000 || s->n_sweep == 32)
            return -1;
        s->sweep[s->n_sweep++] = (int)v;
        p = end;
        if (*p == ',')
            p++;
        else if (*p)
            return -1;
    }
    return s->n_sweep ? 0 : -1;
}

typedef struct {
    char *text;
    int max_tokens; /* 0: --output-len */
} file_prompt_t;

/* Reads a prompts file. 0 or an exit code (printed). */
static int read_prompts(const char *path, file_prompt_t **out, size_t *n_out)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    if (!f) {
        fprintf(stderr, "infer bench: cannot open %s: %s\n", path, strerror(errno));
        return IFD_CLI_EXIT_FAIL;
    }
    file_prompt_t *v = NULL;
    size_t n = 0, cap = 0, lineno = 0;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    int code = 0;
    while ((len = getline(&line, &lcap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (len == 0)
            continue;
        file_prompt_t fp = {0};
        if (line[0] == '{') {
            json_error_t je;
            json_t *o = json_loads(line, 0, &je);
            const char *txt = json_string_value(json_object_get(o, "prompt"));
            if (!txt) {
                fprintf(stderr, "infer bench: %s:%zu: not a JSON object with a \"prompt\" string\n",
                        path, lineno);
                json_decref(o);
                code = IFD_CLI_EXIT_USAGE;
                break;
            }
            fp.text = strdup(txt);
            json_t *mt = json_object_get(o, "max_tokens");
            if (!mt)
                mt = json_object_get(o, "output_len");
            if (json_is_integer(mt) && json_integer_value(mt) > 0)
                fp.max_tokens = (int)json_integer_value(mt);
            json_decref(o);
        } else {
            fp.text = strdup(line);
        }
        file_prompt_t *nv = ifd_grow(v, n, &cap, sizeof(*nv), 64);
        if (!nv) {
            free(fp.text);
            code = IFD_CLI_EXIT_FAIL;
            break;
        }
        v = nv;
        if (!fp.text) {
            code = IFD_CLI_EXIT_FAIL;
            break;
        }
        v[n++] = fp;
    }
    free(line);
    if (f != stdin)
        fclose(f);
    if (code == 0 && n == 0) {
        fprintf(stderr, "infer bench: %s holds no prompts\n", path);
        code = IFD_CLI_EXIT_USAGE;
    }
    if (code != 0) {
        for (size_t i = 0; i < n; i++)
            free(v[i].text);
        free(v);
        return code;
    }
    *out = v;
    *n_out = n;
    return 0;
}

static int vary(long long len, double range, uint64_t *rng)
{
    if (range <= 0)
        return (int)len;
    double lo = (double)len * (1 - range), hi = (double)len * (1 + range);
    int v = (int)floor(lo + rand01(rng) * (hi - lo + 1));
    return v < 1 ? 1 : v;
}

/* Builds the request body of each prompt. 0 or IFD_ENOMEM. */
static int build_bodies(const serve_t *s, ifd_cli_loadgen_req_t *reqs,
                        const ifd_cli_loadgen_prompt_t *prompts, size_t n)
{
    ifd_cli_api_params_t p = ifd_cli_api_default_params();
    p.model = s->model;
    p.temperature = s->temperature;
    p.has_seed = false;
    p.ignore_eos = s->ignore_eos == 1;
    for (size_t i = 0; i < n; i++) {
        reqs[i].pr = &prompts[i];
        p.max_tokens = prompts[i].max_tokens;
        if (s->chat) {
            json_t *m = json_pack("[{s:s,s:s}]", "role", "user", "content",
                                  prompts[i].text ? prompts[i].text : "");
            reqs[i].body = m ? ifd_cli_api_chat_body(&p, m) : NULL;
            json_decref(m);
        } else {
            reqs[i].body = ifd_cli_api_completion_body(&p, prompts[i].text, prompts[i].tokens,
                                                       prompts[i].n_tokens);
        }
        if (!reqs[i].body)
            return IFD_ENOMEM;
    }
    return 0;
}

/* The prompts of every request of every run (warm-up first), and what they point into. */
typedef struct {
    ifd_cli_loadgen_prompt_t *v;
    size_t n;
    int32_t *pool;
    int32_t *joined; /* with --prefix-len: prefix + window per prompt */
    char **texts;
    size_t n_texts;
    file_prompt_t *file;
    size_t n_file;
} prompt_set_t;

static void prompt_set_free(prompt_set_t *ps)
{
    for (size_t i = 0; i < ps->n_texts; i++)
        free(ps->texts[i]);
    for (size_t i = 0; i < ps->n_file; i++)
        free(ps->file[i].text);
    free(ps->texts);
    free(ps->file);
    free(ps->pool);
    free(ps->joined);
    free(ps->v);
    memset(ps, 0, sizeof(*ps));
}

static int make_prompts(serve_t *s, size_t total, prompt_set_t *ps)
{
    uint64_t rng = s->seed * 0x2545f4914f6cdd1dull + 1;
    ps->v = calloc(total, sizeof(*ps->v));
    if (!ps->v)
        return IFD_CLI_EXIT_FAIL;
    ps->n = total;
    if (s->prompts_file) {
        int code = read_prompts(s->prompts_file, &ps->file, &ps->n_file);
        if (code)
            return code;
        if (ps->n_file < total)
            fprintf(stderr,
                    "infer bench: %zu prompts for %zu requests: prompts repeat, and the "
                    "prefix cache will serve the repeats\n",
                    ps->n_file, total);
        for (size_t i = 0; i < total; i++) {
            const file_prompt_t *fp = &ps->file[i % ps->n_file];
            ps->v[i].text = fp->text;
            ps->v[i].max_tokens =
                fp->max_tokens > 0 ? fp->max_tokens : vary(s->output_len, s->range, &rng);
        }
        return 0;
    }
    int *in_len = malloc(total * sizeof(int));
    if (!in_len)
        return IFD_CLI_EXIT_FAIL;
    int max_in = 1;
    for (size_t i = 0; i < total; i++) {
        in_len[i] = vary(s->input_len, s->range, &rng);
        ps->v[i].max_tokens = vary(s->output_len, s->range, &rng);
        if (in_len[i] > max_in)
            max_in = in_len[i];
    }
    size_t n_pool = 0;
    int code = 1;
    if (!s->chat)
        code = token_pool(&s->t, &s->co, s->model, (size_t)(s->prefix_len + max_in) + total + 1,
                          &rng, &ps->pool, &n_pool);
    if (code > 1) {
        free(in_len);
        return code;
    }
    if (code == 0) {
        /* distinct window offsets, shuffled (Fisher–Yates) */
        size_t *off = malloc(total * sizeof(*off));
        if (!off) {
            free(in_len);
            return IFD_CLI_EXIT_FAIL;
        }
        for (size_t i = 0; i < total; i++)
            off[i] = i;
        for (size_t i = total; i > 1; i--) {
            size_t j = splitmix64(&rng) % i, x = off[i - 1];
            off[i - 1] = off[j];
            off[j] = x;
        }
        /* windows start after the prefix, so they share nothing with it */
        const size_t pre = (size_t)s->prefix_len, stride = pre + (size_t)max_in;
        if (pre > 0 && !(ps->joined = malloc(total * stride * sizeof(int32_t)))) {
            free(off);
            free(in_len);
            return IFD_CLI_EXIT_FAIL;
        }
        for (size_t i = 0; i < total; i++) {
            const int32_t *win = ps->pool + pre + off[i];
            ps->v[i].tokens = win;
            ps->v[i].n_tokens = (size_t)in_len[i];
            if (pre > 0) {
                int32_t *d = ps->joined + i * stride;
                memcpy(d, ps->pool, pre * sizeof(int32_t));
                memcpy(d + pre, win, (size_t)in_len[i] * sizeof(int32_t));
                ps->v[i].tokens = d;
                ps->v[i].n_tokens = pre + (size_t)in_len[i];
            }
        }
        free(off);
        free(in_len);
        return 0;
    }
    /* chat, or no /tokenize: texts of random words (lengths approximate) */
    if (!s->chat)
        fprintf(stderr, "infer bench: the daemon has no /tokenize: prompts are random words of "
                        "about --input-len tokens\n");
    ps->texts = calloc(total, sizeof(char *));
    if (!ps->texts) {
        free(in_len);
        return IFD_CLI_EXIT_FAIL;
    }
    ps->n_texts = total;
    for (size_t i = 0; i < total; i++) {
        ifd_buf_t b = IFD_BUF_INIT;
        if (random_words(&b, (size_t)in_len[i], &rng) < 0) {
            ifd_buf_free(&b);
            free(in_len);
            return IFD_CLI_EXIT_FAIL;
        }
        ps->texts[i] = b.data;
        ps->v[i].text = b.data;
    }
    free(in_len);
    return 0;
}

/* Poisson arrivals: exponential gaps with mean 1/rate, cumulative. */
static double *arrivals(size_t n, double rate, uint64_t seed)
{
    double *a = malloc((n ? n : 1) * sizeof(double));
    if (!a)
        return NULL;
    uint64_t rng = seed ^ 0x5bd1e995ull;
    double t = 0;
    for (size_t i = 0; i < n; i++) {
        a[i] = t;
        t += -log(1.0 - rand01(&rng)) / rate;
    }
    return a;
}

static void print_sweep(FILE *f, const ifd_cli_loadgen_result_t *r, size_t n)
{
    fprintf(f, "\n%6s %8s %9s %10s %10s %10s %10s %10s %10s %6s\n", "CONC", "REQ/S", "OUT TOK/S",
            "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "E2E p50", "E2E p99", "FAIL");
    fprintf(f, "%6s %8s %9s %10s %10s %10s %10s %10s %10s %6s\n", "", "", "", "(ms)", "(ms)",
            "(ms)", "(ms)", "(s)", "(s)", "");
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%6d %8.2f %9.1f %10.1f %10.1f %10.2f %10.2f %10.2f %10.2f %6zu\n",
                r[i].concurrency, r[i].req_tput, r[i].out_tput, r[i].ttft.p50, r[i].ttft.p99,
                r[i].tpot.p50, r[i].tpot.p99, r[i].e2e.p50 / 1e3, r[i].e2e.p99 / 1e3, r[i].failed);
}

static int write_plot(const char *path, const ifd_cli_loadgen_result_t *r, size_t n,
                      const char *model)
{
    double *x = malloc(n * sizeof(double) * 7);
    if (!x)
        return IFD_CLI_EXIT_FAIL;
    double *tput = x + n, *rps = x + 2 * n, *ttft = x + 3 * n, *tpot = x + 4 * n, *itl = x + 5 * n,
           *e2e = x + 6 * n;
    for (size_t i = 0; i < n; i++) {
        x[i] = r[i].concurrency;
        tput[i] = r[i].out_tput;
        rps[i] = r[i].req_tput;
        ttft[i] = r[i].completed ? r[i].ttft.p99 : NAN;
        tpot[i] = r[i].completed ? r[i].tpot.p99 : NAN;
        itl[i] = r[i].completed ? r[i].itl.p99 : NAN;
        e2e[i] = r[i].completed ? r[i].e2e.p99 : NAN;
    }
    bool ascending = true;
    for (size_t i = 1; i < n; i++)
        if (x[i] <= x[i - 1])
            ascending = false;
    ifd_cli_plot_series_t s1[] = {{"output tokens/s", tput}};
    ifd_cli_plot_series_t s2[] = {
        {"p99 TTFT", ttft}, {"p99 TPOT", tpot}, {"p99 ITL", itl}, {"p99 E2E latency", e2e}};
    ifd_cli_plot_panel_t panels[] = {
        {"Throughput", "output tokens/s", false, s1, 1},
        {"p99 latency", "milliseconds", true, s2, 4},
    };
    (void)rps;
    char title[300];
    snprintf(title, sizeof(title), "inferd serving benchmark — %s", model);
    FILE *f = fopen(path, "w");
    int code = 0;
    if (!f) {
        fprintf(stderr, "infer bench: cannot write %s: %s\n", path, strerror(errno));
        code = IFD_CLI_EXIT_FAIL;
    } else {
        int rc = ascending ? ifd_cli_plot_svg(f, title, "concurrency", x, n, n > 1, panels, 2)
                           : IFD_EINVAL;
        if (fclose(f) != 0 && rc == 0)
            rc = -EIO;
        if (rc < 0) {
            fprintf(stderr, "infer bench: cannot plot to %s: %s\n", path,
                    ascending ? ifd_strerror(rc) : "the sweep's concurrencies must ascend");
            code = IFD_CLI_EXIT_FAIL;
        }
    }
    free(x);
    return code;
}

/* Resolves the connection options into *t and asks the daemon for the
 * model the reports name (--model, else the daemon's first) into out.
 * 0 or an exit code, the reason printed. */
static int reach_daemon(const ifd_cli_conn_t *co, ifd_cli_http_target_t *t, const char *model,
                        char *out, size_t n)
{
    int code = ifd_cli_target(co, t);
    if (code)
        return code;
    json_t *o = NULL;
    if ((code = ifd_cli_get_json(t, co, "GET", "/v1/models", NULL, &o)) != 0)
        return code;
    const char *id =
        json_string_value(json_object_get(json_array_get(json_object_get(o, "data"), 0), "id"));
    snprintf(out, n, "%s", model ? model : id ? id : "?");
    json_decref(o);
    return 0;
}

/* Applies numeric option c to s: false when c is none; *bad names the
 * option when its value is out of range. */
static bool serve_num_opt(serve_t *s, int c, const char *arg, const char **bad)
{
    /* range, where the value goes, the name a bad value is reported under */
    const struct {
        int code;
        long long lo, hi, *dst;
        const char *name;
    } ints[] = {
        {'c', 0, 100000, &s->conc, "--concurrency"},
        {'N', 1, 10000000, &s->num, "--num-prompts"},
        {OPT_INPUT_LEN, 1, 1 << 22, &s->input_len, "--input-len"},
        {OPT_OUTPUT_LEN, 1, 1 << 22, &s->output_len, "--output-len"},
        {OPT_PREFIX_LEN, 0, 1 << 22, &s->prefix_len, "--prefix-len"},
        {OPT_WARMUP, 0, 1000, &s->warmup, "--warmup"},
    };
    const struct {
        int code;
        double lo, hi, *dst;
        const char *name;
    } reals[] = {
        {'r', 1e-6, 1e9, &s->rate, "--request-rate"},
        {OPT_RANGE, 0, 0.99, &s->range, "--range-ratio"},
        {'t', 0, 2, &s->temperature, "--temperature"},
    };
    if (c == 'c')
        s->conc_given = true;
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        if (c == ints[i].code) {
            if (ifd_cli_parse_int(arg, ints[i].lo, ints[i].hi, ints[i].dst) < 0)
                *bad = ints[i].name;
            return true;
        }
    }
    for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++) {
        if (c == reals[i].code) {
            if (ifd_cli_parse_double(arg, reals[i].lo, reals[i].hi, reals[i].dst) < 0)
                *bad = reals[i].name;
            return true;
        }
    }
    return false;
}

/* Applies option c (getopt code, value arg) to s. -1 when it did, else
 * the exit code to return: --help (printed), a bad value or an unknown
 * option (reason printed). Connection options are the caller's. */
static int serve_opt(serve_t *s, int c, const char *arg)
{
    const char *bad = NULL;
    long long v;
    switch (c) {
    case OPT_PROMPTS:
        s->prompts_file = arg;
        break;
    case OPT_ENDPOINT:
        if (strcmp(arg, "chat") == 0)
            s->chat = true;
        else if (strcmp(arg, "completions") == 0)
            s->chat = false;
        else
            bad = "--endpoint (completions or chat)";
        break;
    case OPT_IGNORE_EOS:
        s->ignore_eos = 1;
        break;
    case OPT_NO_IGNORE_EOS:
        s->ignore_eos = 0;
        break;
    case OPT_SWEEP:
        if (parse_sweep(s, arg) < 0)
            bad = "--sweep (a list like 1,4,16,64)";
        break;
    case OPT_JSON:
        s->json_file = arg;
        break;
    case OPT_PLOT:
        s->plot_file = arg;
        break;
    case OPT_NO_PROGRESS:
        s->progress = false;
        break;
    case 'm':
        s->model = arg;
        break;
    case OPT_SEED:
        if (ifd_cli_parse_int(arg, 0, INT64_MAX, &v) < 0)
            bad = "--seed";
        s->seed = (uint64_t)v;
        break;
    case 'h':
        serve_usage(stdout);
        return IFD_CLI_EXIT_OK;
    default:
        if (!serve_num_opt(s, c, arg, &bad))
            return ifd_cli_usage_hint("bench serve");
        break;
    }
    if (bad) {
        fprintf(stderr, "infer bench serve: bad value '%s' for %s\n", arg, bad);
        return IFD_CLI_EXIT_USAGE;
    }
    return -1;
}

/* Fills s from the command line: the defaults, the options, then what they
 * imply (an open-loop run without --concurrency has no limit; random
 * prompts ignore EOS unless told). -1 to run, else the exit code to return
 * (--help, or a usage error, printed). */
static int serve_args(serve_t *s, int argc, char **argv)
{
    static const struct option opts[] = {
        {"concurrency", required_argument, NULL, 'c'},
        {"request-rate", required_argument, NULL, 'r'},
        {"num-prompts", required_argument, NULL, 'N'},
        {"input-len", required_argument, NULL, OPT_INPUT_LEN},
        {"output-len", required_argument, NULL, OPT_OUTPUT_LEN},
        {"range-ratio", required_argument, NULL, OPT_RANGE},
        {"prefix-len", required_argument, NULL, OPT_PREFIX_LEN},
        {"prompts", required_argument, NULL, OPT_PROMPTS},
        {"endpoint", required_argument, NULL, OPT_ENDPOINT},
        {"ignore-eos", no_argument, NULL, OPT_IGNORE_EOS},
        {"no-ignore-eos", no_argument, NULL, OPT_NO_IGNORE_EOS},
        {"sweep", required_argument, NULL, OPT_SWEEP},
        {"warmup", required_argument, NULL, OPT_WARMUP},
        {"json", required_argument, NULL, OPT_JSON},
        {"plot", required_argument, NULL, OPT_PLOT},
        {"no-progress", no_argument, NULL, OPT_NO_PROGRESS},
        {"model", required_argument, NULL, 'm'},
        {"temperature", required_argument, NULL, 't'},
        {"seed", required_argument, NULL, OPT_SEED},
        {"help", no_argument, NULL, 'h'},
        IFD_CLI_CONN_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    memset(s, 0, sizeof(*s));
    ifd_cli_conn_defaults(&s->co);
    s->input_len = 128;
    s->output_len = 128;
    s->conc = 1;
    s->rate = INFINITY;
    s->warmup = 1;
    s->ignore_eos = -1;
    s->progress = isatty(STDERR_FILENO);
    int c, rc;
    while ((c = ifd_cli_getopt(argc, argv, "c:r:N:m:t:h", opts, &s->co, NULL)) >= 0)
        if ((rc = serve_opt(s, c, optarg)) >= 0)
            return rc;
    if (c == IFD_CLI_OPT_BAD || ifd_cli_no_operands("bench serve", argc, argv))
        return IFD_CLI_EXIT_USAGE;
    if (s->prefix_len > 0 && (s->chat || s->prompts_file)) {
        fprintf(stderr, "infer bench serve: --prefix-len needs random token prompts (not "
                        "--prompts or --endpoint chat)\n");
        return IFD_CLI_EXIT_USAGE;
    }
    if (s->conc == 0 && !isfinite(s->rate)) {
        fprintf(stderr, "infer bench serve: --concurrency 0 (no limit) needs --request-rate\n");
        return IFD_CLI_EXIT_USAGE;
    }
    if (!s->conc_given && isfinite(s->rate) && s->n_sweep == 0)
        s->conc = 0;
    if (s->n_sweep == 0) {
        s->sweep[0] = (int)s->conc;
        s->n_sweep = 1;
    }
    if (s->ignore_eos < 0)
        s->ignore_eos = s->prompts_file ? 0 : 1;
    if (s->plot_file && s->n_sweep < 2)
        fprintf(stderr, "infer bench serve: --plot with one run draws single points; use "
                        "--sweep\n");
    return -1;
}

/* Resets and frees n requests (NULL is fine). */
static void free_reqs(ifd_cli_loadgen_req_t *reqs, size_t n)
{
    for (size_t i = 0; reqs && i < n; i++)
        ifd_cli_loadgen_req_reset(&reqs[i]);
    free(reqs);
}

/* The warm-up: s->warmup requests one at a time over prompts, which must
 * all succeed. 0 or an exit code, the reason printed. */
static int serve_warmup(const serve_t *s, ifd_cli_loadgen_t *rn,
                        const ifd_cli_loadgen_prompt_t *prompts)
{
    size_t nw = (size_t)s->warmup;
    ifd_cli_loadgen_req_t *reqs = calloc(nw, sizeof(*reqs));
    double dur;
    int code = 0;
    rn->label = "warm-up";
    if (!reqs || build_bodies(s, reqs, prompts, nw) < 0) {
        code = IFD_CLI_EXIT_FAIL;
        goto out;
    }
    if (ifd_cli_loadgen_run(rn, reqs, nw, 1, NULL, &dur) == IFD_ECANCELED) {
        code = IFD_CLI_EXIT_INTERRUPTED;
        goto out;
    }
    for (size_t i = 0; i < nw && !code; i++) {
        if (!reqs[i].ok) {
            fprintf(stderr, "infer bench: the warm-up request failed: %s\n", reqs[i].err);
            code = strncmp(reqs[i].err, "HTTP 4", 6) == 0 ? IFD_CLI_EXIT_REJECTED
                                                          : IFD_CLI_EXIT_SERVER;
        }
    }
out:
    free_reqs(reqs, reqs ? nw : 0);
    return code;
}

/* The daemon's token counters since (in0, out0) into res->server_in/out.
 * The daemon may count a request a moment after its last byte went out:
 * give its counters up to a second to agree with the usage. */
static void settle_counters(const serve_t *s, double in0, double out0,
                            ifd_cli_loadgen_result_t *res)
{
    double in1 = 0, out1 = 0;
    for (int tries = 0; tries < 10; tries++) {
        if (!scrape_tokens(&s->t, &s->co, &in1, &out1))
            break;
        res->server_in = in1 - in0;
        res->server_out = out1 - out0;
        if ((int64_t)res->server_in == res->in_tokens &&
            (int64_t)res->server_out == res->out_tokens)
            break;
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* Run k of the sweep: n requests over prompts at concurrency s->sweep[k],
 * summarized into *res, printed, and appended to runs as JSON. 0 or an exit
 * code, the reason printed. */
static int serve_run(const serve_t *s, ifd_cli_loadgen_t *rn, size_t k,
                     const ifd_cli_loadgen_prompt_t *prompts, size_t n,
                     ifd_cli_loadgen_result_t *res, json_t *runs)
{
    res->concurrency = s->sweep[k];
    res->rate = s->rate;
    res->server_in = res->server_out = NAN;
    ifd_cli_loadgen_req_t *reqs = calloc(n, sizeof(*reqs));
    double *arr = isfinite(s->rate) ? arrivals(n, s->rate, s->seed + k) : NULL;
    int code = 0;
    if (!reqs || (isfinite(s->rate) && !arr) || build_bodies(s, reqs, prompts, n) < 0) {
        free(arr);
        code = IFD_CLI_EXIT_FAIL;
        goto out;
    }
    char label[48];
    snprintf(label, sizeof(label), "c=%d", s->sweep[k]);
    rn->label = label;
    double in0 = 0, out0 = 0, dur = 0;
    bool have0 = scrape_tokens(&s->t, &s->co, &in0, &out0);
    int rc = ifd_cli_loadgen_run(rn, reqs, n, s->sweep[k], arr, &dur);
    free(arr);
    if (rc == IFD_ECANCELED) {
        code = IFD_CLI_EXIT_INTERRUPTED;
        fprintf(stderr, "infer bench: interrupted\n");
        goto out;
    }
    if (rc < 0) {
        code = ifd_cli_report(&s->t, rc);
        goto out;
    }
    if (ifd_cli_loadgen_summarize(reqs, n, dur, s->ignore_eos == 1, res) < 0) {
        code = IFD_CLI_EXIT_FAIL;
        goto out;
    }
    if (have0)
        settle_counters(s, in0, out0, res);
    ifd_cli_loadgen_print(stdout, res, rn->path);
    fflush(stdout);
    json_array_append_new(runs, ifd_cli_loadgen_result_json(res, reqs, n));
out:
    free_reqs(reqs, reqs ? n : 0);
    return code;
}

/* The reports after the sweep: the sweep table, --json, --plot. 0 or an
 * exit code. */
static int serve_report(const serve_t *s, const char *model, const char *path,
                        const ifd_cli_loadgen_result_t *results, json_t *runs)
{
    int code = 0;
    if (s->n_sweep > 1)
        print_sweep(stdout, results, s->n_sweep);
    if (s->json_file) {
        json_t *o = json_pack(
            "{s:s,s:s,s:s,s:s,s:o,s:I,s:o,s:o,s:b,s:f,s:s,s:I,s:o}", "benchmark", "serve", "model",
            model, "where", s->t.where, "endpoint", path, "input_len",
            s->prompts_file ? json_null() : json_integer(s->input_len), "prefix_len",
            (json_int_t)s->prefix_len, "output_len", json_integer(s->output_len), "range_ratio",
            json_real(s->range), "ignore_eos", s->ignore_eos == 1, "temperature", s->temperature,
            "prompts", s->prompts_file ? s->prompts_file : "random", "seed", (json_int_t)s->seed,
            "runs", json_incref(runs));
        if ((code = write_json(s->json_file, o)) != 0)
            return code;
    }
    if (s->plot_file)
        code = write_plot(s->plot_file, results, s->n_sweep, model);
    return code;
}

static int serve_main(int argc, char **argv)
{
    serve_t s;
    int code = serve_args(&s, argc, argv);
    if (code >= 0)
        return code;
    char model[256];
    if ((code = reach_daemon(&s.co, &s.t, s.model, model, sizeof(model))) != 0)
        return code;

    /* requests per run: --num-prompts, else 4 per slot (at least 16; 64 open-loop) */
    size_t per_run[32], total = (size_t)s.warmup;
    for (size_t i = 0; i < s.n_sweep; i++) {
        long long k = s.num            ? s.num
                      : s.sweep[i] > 0 ? (s.sweep[i] * 4 > 16 ? s.sweep[i] * 4 : 16)
                                       : 64;
        per_run[i] = (size_t)k;
        total += (size_t)k;
    }
    prompt_set_t ps;
    memset(&ps, 0, sizeof(ps));
    ifd_cli_loadgen_result_t *results = calloc(s.n_sweep, sizeof(*results));
    json_t *runs = json_array();
    if (!results || !runs) {
        code = IFD_CLI_EXIT_FAIL;
        goto out;
    }
    if ((code = make_prompts(&s, total, &ps)) != 0)
        goto out;

    const char *path = s.chat ? "/v1/chat/completions" : "/v1/completions";
    ifd_cli_loadgen_t rn = {
        .t = &s.t, .path = path, .timeout_s = s.co.timeout_s, .progress = s.progress};
    ifd_cli_catch_sigint(true);
    fprintf(stderr, "infer bench serve: %s at %s, %s\n", model, s.t.where, path);
    if (s.warmup > 0 && (code = serve_warmup(&s, &rn, ps.v)) != 0)
        goto out;
    size_t base = (size_t)s.warmup, any_failed = 0;
    for (size_t k = 0; k < s.n_sweep; k++) {
        if ((code = serve_run(&s, &rn, k, ps.v + base, per_run[k], &results[k], runs)) != 0)
            goto out;
        any_failed += results[k].failed;
        base += per_run[k];
    }
    if ((code = serve_report(&s, model, path, results, runs)) != 0)
        goto out;
    code = any_failed ? IFD_CLI_EXIT_SERVER : IFD_CLI_EXIT_OK;
out:
    ifd_cli_catch_sigint(false);
    json_decref(runs);
    free(results);
    prompt_set_free(&ps);
    return code;
}

/* ---- infer bench cache ----------------------------------------------------------------------- */

static void cache_usage(FILE *f)
{
    fprintf(f,
            "Usage: infer bench cache [options]\n"
            "\n"
            "The KV-cache benchmark through the daemon: the same prompt completed with\n"
            "256 new tokens, greedy, end-of-text ignored, once with use_cache on (each step\n"
            "computes one new token against the cached keys and values) and once with it off\n"
            "(each step recomputes the whole sequence), 3 repetitions each. Prints both\n"
            "latencies and the speedup.\n"
            "\n"
            "  -p, --prompt TEXT       the prompt, completed as plain text (default \"%s\")\n"
            "  -n, --max-tokens N      new tokens per request (default 256)\n"
            "      --reps N            repetitions of each setting (default 3)\n"
            "  -m, --model NAME        the model (default: the daemon's)\n"
            "      --json[=FILE]       the results as JSON on stdout (or into FILE)\n"
            "  -h, --help              this help\n"
            "\n%s",
            "Hello, I am", ifd_cli_conn_help);
}

typedef struct {
    double lat[64], ttft[64];
    int64_t tokens[64];
    int n;
    ifd_cli_stats_t s;
} cache_side_t;

typedef struct {
    ifd_cli_conn_t co;
    ifd_cli_http_target_t t;
    const char *prompt, *model, *json_file;
    long long max_tokens, reps;
    char model_id[256];    /* what the reports name */
    int64_t prompt_tokens; /* as the daemon counted them */
    cache_side_t side[2];  /* 0: use_cache on, 1: off */
} cache_t;

/* Fills b from the command line. -1 to run, else the exit code to return
 * (--help, or a usage error, printed). */
static int cache_args(cache_t *b, int argc, char **argv)
{
    static const struct option opts[] = {
        {"prompt", required_argument, NULL, 'p'},
        {"max-tokens", required_argument, NULL, 'n'},
        {"reps", required_argument, NULL, OPT_REPS},
        {"model", required_argument, NULL, 'm'},
        {"json", optional_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
        IFD_CLI_CONN_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    memset(b, 0, sizeof(*b));
    ifd_cli_conn_defaults(&b->co);
    b->prompt = "Hello, I am";
    b->max_tokens = 256;
    b->reps = 3;
    int c;
    while ((c = ifd_cli_getopt(argc, argv, "p:n:m:h", opts, &b->co, NULL)) >= 0) {
        switch (c) {
        case 'p':
            b->prompt = optarg;
            break;
        case 'n':
            if (ifd_cli_parse_int(optarg, 1, 1 << 20, &b->max_tokens) < 0) {
                fprintf(stderr, "infer bench cache: bad --max-tokens '%s'\n", optarg);
                return IFD_CLI_EXIT_USAGE;
            }
            break;
        case OPT_REPS:
            if (ifd_cli_parse_int(optarg, 1, 64, &b->reps) < 0) {
                fprintf(stderr, "infer bench cache: --reps wants 1..64, not '%s'\n", optarg);
                return IFD_CLI_EXIT_USAGE;
            }
            break;
        case 'm':
            b->model = optarg;
            break;
        case OPT_JSON:
            b->json_file = optarg ? optarg : "-";
            break;
        case 'h':
            cache_usage(stdout);
            return IFD_CLI_EXIT_OK;
        default:
            return ifd_cli_usage_hint("bench cache");
        }
    }
    if (c == IFD_CLI_OPT_BAD || ifd_cli_no_operands("bench cache", argc, argv))
        return IFD_CLI_EXIT_USAGE;
    return -1;
}

/* The requests, one at a time: k = -1 a one-token warm-up, then reps with
 * use_cache on and reps with it off; each timed into b->side. 0 or an exit
 * code, the reason printed. */
static int cache_measure(cache_t *b)
{
    bool tty = isatty(STDERR_FILENO);
    ifd_cli_loadgen_t rn = {.t = &b->t, .path = "/v1/completions", .timeout_s = b->co.timeout_s};
    ifd_cli_loadgen_prompt_t pr = {.text = b->prompt, .max_tokens = (int)b->max_tokens};
    ifd_cli_loadgen_prompt_t warm = {.text = b->prompt, .max_tokens = 1};
    int reps = (int)b->reps;
    for (int k = -1; k < 2 * reps; k++) {
        int which = k < 0 ? 0 : k / reps;
        ifd_cli_api_params_t p = ifd_cli_api_default_params();
        p.model = b->model;
        p.temperature = 0;
        p.ignore_eos = true;
        p.use_cache = which == 0;
        p.max_tokens = k < 0 ? 1 : b->max_tokens;
        ifd_cli_loadgen_req_t r;
        memset(&r, 0, sizeof(r));
        r.pr = k < 0 ? &warm : &pr;
        r.body = ifd_cli_api_completion_body(&p, b->prompt, NULL, 0);
        if (!r.body)
            return IFD_CLI_EXIT_FAIL;
        if (tty && k >= 0)
            fprintf(stderr, "\r\033[Kuse_cache=%s, repetition %d of %lld …",
                    which == 0 ? "true" : "false", k % reps + 1, b->reps);
        double dur;
        if (ifd_cli_loadgen_run(&rn, &r, 1, 1, NULL, &dur) == IFD_ECANCELED) {
            ifd_cli_loadgen_req_reset(&r);
            fprintf(stderr, "\ninfer bench: interrupted\n");
            return IFD_CLI_EXIT_INTERRUPTED;
        }
        if (!r.ok) {
            fprintf(stderr, "%sinfer bench cache: request failed: %s\n", tty ? "\n" : "", r.err);
            int code =
                strncmp(r.err, "HTTP 4", 6) == 0 ? IFD_CLI_EXIT_REJECTED : IFD_CLI_EXIT_SERVER;
            ifd_cli_loadgen_req_reset(&r);
            return code;
        }
        if (k >= 0) {
            cache_side_t *sd = &b->side[which];
            sd->lat[sd->n] = r.t_last - r.t_start;
            sd->ttft[sd->n] = r.t_first - r.t_start;
            sd->tokens[sd->n] = r.output_tokens;
            sd->n++;
            b->prompt_tokens = r.prompt_tokens;
            if (r.output_tokens != b->max_tokens)
                fprintf(stderr,
                        "%sinfer bench cache: warning: %lld tokens generated, %lld "
                        "asked\n",
                        tty ? "\n" : "", (long long)r.output_tokens, b->max_tokens);
        }
        ifd_cli_loadgen_req_reset(&r);
    }
    if (tty)
        fputs("\r\033[K", stderr);
    return 0;
}

static double cache_tokens_per_s(const cache_t *b, const cache_side_t *sd)
{
    return sd->s.mean > 0 ? (double)b->max_tokens / sd->s.mean : 0.0;
}

/* The table on stdout. */
static void cache_print(const cache_t *b, double speedup)
{
    printf("KV-cache benchmark: %s, prompt \"%s\" (%lld tokens), %lld new tokens, greedy,\n"
           "ignore_eos, %lld repetitions\n\n",
           b->model_id, b->prompt, (long long)b->prompt_tokens, b->max_tokens, b->reps);
    printf("%-10s %10s %10s %10s %10s %12s\n", "use_cache", "mean (s)", "min (s)", "max (s)",
           "TTFT (ms)", "tokens/s");
    for (int i = 0; i < 2; i++) {
        const cache_side_t *sd = &b->side[i];
        double ttft = 0;
        for (int j = 0; j < sd->n; j++)
            ttft += sd->ttft[j] / sd->n;
        printf("%-10s %10.3f %10.3f %10.3f %10.1f %12.1f\n", i == 0 ? "on" : "off", sd->s.mean,
               sd->s.min, sd->s.max, ttft * 1e3, cache_tokens_per_s(b, sd));
    }
    printf("\nspeedup: %.2fx (mean latency with use_cache off / on)\n", speedup);
}

/* The results as JSON into b->json_file ("-": stdout). 0 or an exit code. */
static int cache_json(const cache_t *b, double speedup)
{
    json_t *sides[2];
    for (int i = 0; i < 2; i++) {
        const cache_side_t *sd = &b->side[i];
        json_t *lat = json_array(), *tt = json_array(), *tok = json_array();
        for (int j = 0; j < sd->n; j++) {
            json_array_append_new(lat, json_real(sd->lat[j]));
            json_array_append_new(tt, json_real(sd->ttft[j]));
            json_array_append_new(tok, json_integer(sd->tokens[j]));
        }
        sides[i] = json_pack("{s:o,s:o,s:o,s:f,s:f,s:f,s:f}", "latencies_s", lat, "ttft_s", tt,
                             "completion_tokens", tok, "mean_s", sd->s.mean, "min_s", sd->s.min,
                             "max_s", sd->s.max, "tokens_per_s", cache_tokens_per_s(b, sd));
    }
    json_t *o = json_pack(
        "{s:s,s:s,s:s,s:I,s:I,s:I,s:o,s:o,s:o}", "benchmark", "cache", "model", b->model_id,
        "prompt", b->prompt, "prompt_tokens", (json_int_t)b->prompt_tokens, "max_tokens",
        (json_int_t)b->max_tokens, "repetitions", (json_int_t)b->reps, "use_cache_on", sides[0],
        "use_cache_off", sides[1], "speedup", isfinite(speedup) ? json_real(speedup) : json_null());
    return write_json(b->json_file, o);
}

static int cache_main(int argc, char **argv)
{
    cache_t b;
    int code = cache_args(&b, argc, argv);
    if (code >= 0)
        return code;
    if ((code = reach_daemon(&b.co, &b.t, b.model, b.model_id, sizeof(b.model_id))) != 0)
        return code;
    ifd_cli_catch_sigint(true);
    if ((code = cache_measure(&b)) != 0)
        goto out;
    for (int i = 0; i < 2; i++)
        ifd_cli_stats_summary(b.side[i].lat, (size_t)b.side[i].n, &b.side[i].s);
    double speedup = b.side[0].s.mean > 0 ? b.side[1].s.mean / b.side[0].s.mean : NAN;
    if (!b.json_file || strcmp(b.json_file, "-") != 0)
        cache_print(&b, speedup);
    if (b.json_file && (code = cache_json(&b, speedup)) != 0)
        goto out;
    code = fflush(stdout) == 0 ? IFD_CLI_EXIT_OK : IFD_CLI_EXIT_FAIL;
out:
    ifd_cli_catch_sigint(false);
    return code;
}

/* ---- infer bench ----------------------------------------------------------------------------- */

/* ---- infer bench plot ------------------------------------------------------------------ */

static void plot_usage(FILE *f)
{
    fprintf(f, "Usage: infer bench plot RESULTS.json OUT.svg\n"
               "\n"
               "Draw the plot of `infer bench serve --plot` again from the JSON that\n"
               "`infer bench serve --json` wrote: output throughput and the p99 latencies\n"
               "against concurrency. Needs no daemon.\n");
}

static double jnum(json_t *o, const char *k1, const char *k2)
{
    json_t *v = json_object_get(o, k1);
    if (k2)
        v = json_object_get(v, k2);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static int plot_main(int argc, char **argv)
{
    if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        plot_usage(stdout);
        return IFD_CLI_EXIT_OK;
    }
    if (argc != 3) {
        plot_usage(stderr);
        return IFD_CLI_EXIT_USAGE;
    }
    json_error_t je;
    json_t *o = json_load_file(argv[1], 0, &je);
    json_t *runs = json_object_get(o, "runs");
    size_t n = json_array_size(runs);
    if (!o || n == 0) {
        fprintf(stderr, "infer bench plot: %s: %s\n", argv[1],
                o ? "no runs (not the JSON of infer bench serve)" : je.text);
        json_decref(o);
        return IFD_CLI_EXIT_USAGE;
    }
    ifd_cli_loadgen_result_t *r = calloc(n, sizeof(*r));
    if (!r) {
        json_decref(o);
        return IFD_CLI_EXIT_FAIL;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(runs, i);
        r[i].concurrency = (int)json_integer_value(json_object_get(x, "max_concurrency"));
        r[i].completed = (size_t)json_integer_value(json_object_get(x, "completed"));
        r[i].out_tput = jnum(x, "output_throughput", NULL);
        r[i].req_tput = jnum(x, "request_throughput", NULL);
        r[i].ttft.p99 = jnum(x, "ttft_ms", "p99");
        r[i].tpot.p99 = jnum(x, "tpot_ms", "p99");
        r[i].itl.p99 = jnum(x, "itl_ms", "p99");
        r[i].e2e.p99 = jnum(x, "e2el_ms", "p99");
    }
    const char *model = json_string_value(json_object_get(o, "model"));
    int code = write_plot(argv[2], r, n, model ? model : "?");
    free(r);
    json_decref(o);
    return code;
}

static void bench_usage(FILE *f)
{
    fprintf(f, "Usage: infer bench serve [options]   load generator: latency and throughput\n"
               "       infer bench cache [options]   use_cache on vs off: the KV-cache speedup\n"
               "       infer bench plot RESULTS.json OUT.svg   redraw a sweep's plot\n"
               "\n"
               "infer bench COMMAND --help describes each. serve and cache talk to a running\n"
               "daemon.\n");
}

int ifd_cli_bench_main(int argc, char **argv)
{
    if (argc < 2) {
        bench_usage(stderr);
        return IFD_CLI_EXIT_USAGE;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        bench_usage(stdout);
        return IFD_CLI_EXIT_OK;
    }
    optind = 1;
    if (strcmp(argv[1], "serve") == 0)
        return serve_main(argc - 1, argv + 1);
    if (strcmp(argv[1], "cache") == 0)
        return cache_main(argc - 1, argv + 1);
    if (strcmp(argv[1], "plot") == 0)
        return plot_main(argc - 1, argv + 1);
    fprintf(stderr, "infer bench: unknown benchmark '%s'\n\n", argv[1]);
    bench_usage(stderr);
    return IFD_CLI_EXIT_USAGE;
}
