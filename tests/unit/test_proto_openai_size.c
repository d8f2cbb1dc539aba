/*
 * test_proto_openai_size.c — the parts of OpenAI responses that grow with
 * the request (proto/openai.h, issue 31): logprobs and vLLM's
 * prompt_logprobs are written straight into the buffer, byte for byte what
 * the jansson trees they replaced dumped (the trees are kept here as the
 * reference, on random tokens with invalid UTF-8, NULs, control bytes,
 * repeated keys and non-finite numbers); a prompt's logprobs written once
 * and shared by n choices give the same response as n renderings; the
 * writer stops at max_bytes; and the size bounds behind max_response_bytes
 * are lower bounds of what is really written.
 */
#include "testutil.h"

#include "arena.h"
#include "error.h"
#include "proto/openai.h"
#include "utf8.h"

#include <jansson.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- the reference: the tree builders the writer replaced ---------------------------- */

#define REF_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(9))

static json_t *ref_str(const char *p, size_t n)
{
    if (!p || n == 0)
        return json_string("");
    char *clean = malloc(3 * n);
    ck_assert_ptr_nonnull(clean);
    json_t *s = json_stringn_nocheck(clean, ifd_utf8_sanitize(clean, p, n));
    free(clean);
    return s;
}

static json_t *ref_real(double v)
{
    if (!isfinite(v))
        v = v > 0 ? 9999.0 : -9999.0;
    return json_real(v);
}

static json_t *ref_entry(const char *p, size_t n, double lp)
{
    json_t *e = json_object(), *b = json_array();
    json_object_set_new(e, "token", ref_str(p, n));
    json_object_set_new(e, "logprob", ref_real(lp));
    for (size_t i = 0; i < n; i++)
        json_array_append_new(b, json_integer((unsigned char)p[i]));
    json_object_set_new(e, "bytes", b);
    return e;
}

static json_t *ref_chat(const ifd_oai_logprob_t *lp, size_t n)
{
    json_t *content = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *e = ref_entry(lp[i].bytes, lp[i].len, lp[i].logprob), *top = json_array();
        for (size_t k = 0; k < lp[i].n_top; k++)
            json_array_append_new(
                top, ref_entry(lp[i].top[k].bytes, lp[i].top[k].len, lp[i].top[k].logprob));
        json_object_set_new(e, "top_logprobs", top);
        json_array_append_new(content, e);
    }
    json_t *o = json_object();
    json_object_set_new(o, "content", content);
    json_object_set_new(o, "refusal", json_null());
    return o;
}

static json_t *ref_completion(const ifd_oai_logprob_t *lp, size_t n, uint64_t off)
{
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    for (size_t i = 0; i < n; i++) {
        json_array_append_new(tokens, ref_str(lp[i].bytes, lp[i].len));
        json_array_append_new(lps, lp[i].no_logprob ? json_null() : ref_real(lp[i].logprob));
        json_array_append_new(offs, json_integer((json_int_t)off));
        off += ifd_utf8_count(lp[i].bytes, lp[i].len);
        if (lp[i].no_logprob) {
            json_array_append_new(tops, json_null());
            continue;
        }
        json_t *t = json_object();
        if (lp[i].n_top == 0) { /* logprobs 0: the token's own (vLLM) */
            json_t *key = ref_str(lp[i].bytes, lp[i].len);
            json_object_set_new(t, json_string_value(key), ref_real(lp[i].logprob));
            json_decref(key);
        }
        for (size_t k = 0; k < lp[i].n_top; k++) {
            json_t *key = ref_str(lp[i].top[k].bytes, lp[i].top[k].len);
            json_object_set_new(t, json_string_value(key), ref_real(lp[i].top[k].logprob));
            json_decref(key);
        }
        json_array_append_new(tops, t);
    }
    json_t *o = json_object();
    json_object_set_new(o, "tokens", tokens);
    json_object_set_new(o, "token_logprobs", lps);
    json_object_set_new(o, "top_logprobs", tops);
    json_object_set_new(o, "text_offset", offs);
    return o;
}

static void ref_plp_token(json_t *d, const ifd_oai_plp_token_t *t, uint32_t rank)
{
    char key[16];
    snprintf(key, sizeof key, "%d", (int)t->id);
    json_t *v = json_object();
    json_object_set_new(v, "logprob", ref_real(t->logprob));
    json_object_set_new(v, "rank", json_integer(rank));
    json_object_set_new(v, "decoded_token", ref_str(t->bytes, t->len));
    json_object_set_new(d, key, v);
}

static json_t *ref_prompt_logprobs(const ifd_oai_prompt_logprob_t *v, size_t n, uint32_t top)
{
    json_t *a = json_array();
    json_array_append_new(a, json_null());
    for (size_t i = 0; i < n; i++) {
        json_t *d = json_object();
        ref_plp_token(d, &v[i].tok, v[i].tok.rank);
        for (size_t k = 0; k < v[i].n_top && k < top; k++)
            ref_plp_token(d, &v[i].top[k], (uint32_t)k + 1);
        json_array_append_new(a, d);
    }
    return a;
}

/* j's dump (consumed) against got[0..len). */
static void same_as(json_t *j, const ifd_buf_t *got, const char *what)
{
    char *want = json_dumps(j, REF_FLAGS);
    json_decref(j);
    ck_assert_ptr_nonnull(want);
    IFD_CHECK(strlen(want) == got->len && memcmp(want, got->data, got->len) == 0,
              "%s differs:\nwant %s\ngot  %.*s", what, want, (int)got->len, got->data);
    free(want);
}

/* ---- random tokens ------------------------------------------------------------------ */

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)rng;
}

/* Token texts that exercise the string writer: escapes, control bytes,
 * invalid and unfinished UTF-8, a NUL (keys are cut there), a surrogate,
 * repeats (repeated keys), the empty token. */
static const char *const k_texts[] = {
    "a",           " the",         "\"q\"", "back\\slash",      "tab\t\n\r\b\f", "\x01\x1f",
    "caf\xc3\xa9", "\xe2\x80",     "\xff",  "\xf0\x9f\x98\x80", "x\0y",          "/",
    "\x7f",        "\xed\xa0\x80", "",      "\xc0\xaf",         "\xe2\x80\x94",  "ab",
    "ab",          "\xfe"};
#define N_TEXTS (sizeof k_texts / sizeof k_texts[0])

static void rnd_text(const char **p, size_t *n)
{
    size_t i = rnd() % N_TEXTS;
    *p = k_texts[i];
    *n = i == 10 ? 3 : strlen(k_texts[i]);
}

static float rnd_logprob(void)
{
    static const float special[] = {-INFINITY, INFINITY, NAN,          -0.0f,  0.0f,
                                    -1e-7f,    -1e20f,   123456789.0f, -1e-5f, -0.5f};
    if (rnd() % 3 == 0)
        return special[rnd() % (sizeof special / sizeof special[0])];
    return -(float)(rnd() % 1000000) / 1000.0f;
}

static ifd_oai_logprob_t *rnd_logprobs(ifd_arena_t *a, size_t n, uint32_t max_top, bool echo)
{
    ifd_oai_logprob_t *lp = ifd_arena_calloc(a, n + 1, sizeof *lp);
    for (size_t i = 0; i < n; i++) {
        rnd_text(&lp[i].bytes, &lp[i].len);
        lp[i].logprob = rnd_logprob();
        lp[i].no_logprob = echo && i == 0;
        lp[i].n_top = max_top ? rnd() % (max_top + 1) : 0;
        ifd_oai_top_logprob_t *t = ifd_arena_calloc(a, lp[i].n_top + 1, sizeof *t);
        for (size_t k = 0; k < lp[i].n_top; k++) {
            rnd_text(&t[k].bytes, &t[k].len);
            t[k].logprob = rnd_logprob();
        }
        lp[i].top = t;
    }
    return lp;
}

static ifd_oai_prompt_logprob_t *rnd_plp(ifd_arena_t *a, size_t n, uint32_t max_top)
{
    ifd_oai_prompt_logprob_t *v = ifd_arena_calloc(a, n + 1, sizeof *v);
    for (size_t i = 0; i < n; i++) {
        v[i].tok.id = (int32_t)(rnd() % 8); /* small ids: the token among its alternatives */
        rnd_text(&v[i].tok.bytes, &v[i].tok.len);
        v[i].tok.logprob = rnd_logprob();
        v[i].tok.rank = 1 + rnd() % 60000;
        v[i].n_top = rnd() % (max_top + 1);
        ifd_oai_plp_token_t *t = ifd_arena_calloc(a, v[i].n_top + 1, sizeof *t);
        for (size_t k = 0; k < v[i].n_top; k++) {
            t[k].id = (int32_t)(rnd() % 8);
            rnd_text(&t[k].bytes, &t[k].len);
            t[k].logprob = rnd_logprob();
            t[k].rank = (uint32_t)k + 1;
        }
        v[i].top = t;
    }
    return v;
}

/* ---- the writer against the trees ------------------------------------------------------ */

START_TEST(test_writer_matches_trees)
{
    ifd_buf_t b = IFD_BUF_INIT;
    for (int round = 0; round < 2000; round++) {
        ifd_arena_t a;
        ifd_arena_init(&a, 0);
        size_t n = rnd() % 6;
        ifd_oai_logprob_t *lp = rnd_logprobs(&a, n, 21, round % 2);
        uint32_t off = rnd() % 3 ? 0 : rnd() % 5000;

        ifd_buf_clear(&b);
        ck_assert_int_eq(ifd_oai_logprobs_json(&b, IFD_OAI_CHAT, lp, n, 0), 0);
        same_as(ref_chat(lp, n), &b, "chat logprobs");
        ifd_buf_clear(&b);
        ck_assert_int_eq(ifd_oai_logprobs_json(&b, IFD_OAI_COMPLETION, lp, n, off), 0);
        same_as(ref_completion(lp, n, off), &b, "completions logprobs");

        size_t rows = rnd() % 6;
        uint32_t top = rnd() % 22;
        ifd_oai_prompt_logprob_t *v = rnd_plp(&a, rows, 21);
        ifd_buf_clear(&b);
        ck_assert_int_eq(ifd_oai_prompt_logprobs_json(&b, v, rows, top), 0);
        same_as(ref_prompt_logprobs(v, rows, top), &b, "prompt_logprobs");
        ifd_arena_close(&a);
    }
    /* appending: what was in the buffer stays */
    ifd_buf_clear(&b);
    ifd_buf_puts(&b, "x");
    ck_assert_int_eq(ifd_oai_prompt_logprobs_json(&b, NULL, 0, 0), 0);
    ck_assert_str_eq(b.data, "x[null]");
    ifd_buf_free(&b);
}
END_TEST

/* ---- one rendering shared by n choices -------------------------------------------------- */

static const ifd_oai_meta_t k_cmpl = {IFD_OAI_COMPLETION, "cmpl-1", "smol", 1700000000, NULL, NULL};
static const ifd_oai_meta_t k_chat = {IFD_OAI_CHAT, "chatcmpl-1", "smol", 1700000000, NULL, NULL};

static size_t count(const ifd_buf_t *b, const char *needle)
{
    size_t n = 0;
    for (const char *p = b->data; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

START_TEST(test_shared_prompt_renderings)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    enum { N = 3, NP = 7 };
    ifd_oai_prompt_logprob_t *v = rnd_plp(&a, NP - 1, 5);
    ifd_oai_logprob_t *prompt = rnd_logprobs(&a, NP, 5, true); /* echo: the first has none */
    ifd_oai_choice_t per[N], shared[N];
    ifd_buf_t plp = IFD_BUF_INIT;
    ck_assert_int_eq(ifd_oai_prompt_logprobs_json(&plp, v, NP - 1, 3), 0);
    ifd_oai_lp_prefix_t prefix;
    ck_assert_int_eq(ifd_oai_lp_prefix_build(&prefix, prompt, NP), 0);
    ck_assert_uint_eq(prefix.n, NP);
    for (int i = 0; i < N; i++) {
        size_t own = (size_t)i * 2; /* choice 0 has no token of its own */
        ifd_oai_logprob_t *mine = rnd_logprobs(&a, own, 3, false);
        ifd_oai_logprob_t *all = ifd_arena_calloc(&a, NP + own + 1, sizeof *all);
        memcpy(all, prompt, NP * sizeof *all);
        memcpy(all + NP, mine, own * sizeof *all);
        per[i] = (ifd_oai_choice_t){.index = (uint32_t)i,
                                    .text = "the text",
                                    .text_len = 8,
                                    .finish_reason = "length",
                                    .has_logprobs = true,
                                    .logprobs = all,
                                    .n_logprobs = NP + own,
                                    .has_prompt_logprobs = true,
                                    .prompt_logprobs = v,
                                    .n_prompt_logprobs = NP - 1,
                                    .prompt_top = 3};
        shared[i] = per[i];
        shared[i].logprobs = mine;
        shared[i].n_logprobs = own;
        shared[i].logprobs_prefix = &prefix;
        shared[i].prompt_logprobs_json = plp.data;
        shared[i].prompt_logprobs_json_len = plp.len;
    }
    ifd_oai_usage_t u = {NP, N, 0};
    ifd_buf_t x = IFD_BUF_INIT, y = IFD_BUF_INIT;
    /* completions: every choice carries the rows (vLLM), written once */
    ck_assert_int_eq(ifd_oai_response_json(&x, &k_cmpl, per, N, &u), 0);
    ck_assert_int_eq(ifd_oai_response_json(&y, &k_cmpl, shared, N, &u), 0);
    ck_assert_uint_eq(x.len, y.len);
    ck_assert(memcmp(x.data, y.data, x.len) == 0);
    ck_assert_uint_eq(count(&y, "\"prompt_logprobs\""), N);
    /* chat: once, at the top level */
    ifd_buf_clear(&x);
    ifd_buf_clear(&y);
    for (int i = 0; i < N; i++) {
        per[i].has_logprobs = shared[i].has_logprobs = false;
        shared[i].logprobs_prefix = NULL;
    }
    ck_assert_int_eq(ifd_oai_response_json(&x, &k_chat, per, N, &u), 0);
    ck_assert_int_eq(ifd_oai_response_json(&y, &k_chat, shared, N, &u), 0);
    ck_assert(x.len == y.len && memcmp(x.data, y.data, x.len) == 0);
    ck_assert_uint_eq(count(&y, "\"prompt_logprobs\""), 1);
    /* a stream's echo chunk: the prefix alone, at offset 0 only */
    ifd_oai_stream_t s;
    ck_assert_int_eq(ifd_oai_stream_init(&s, &a, &k_cmpl, 1, false), 0);
    ifd_oai_choice_t echo = {
        .text = "the prompt", .text_len = 10, .has_logprobs = true, .logprobs_prefix = &prefix};
    ifd_oai_choice_t plain = echo;
    plain.logprobs_prefix = NULL;
    plain.logprobs = prompt;
    plain.n_logprobs = NP;
    ifd_buf_clear(&x);
    ifd_buf_clear(&y);
    ck_assert_int_eq(ifd_oai_stream_delta(&s, &y, &echo), 0);
    ifd_oai_stream_t s2;
    ck_assert_int_eq(ifd_oai_stream_init(&s2, &a, &k_cmpl, 1, false), 0);
    ck_assert_int_eq(ifd_oai_stream_delta(&s2, &x, &plain), 0);
    ck_assert(x.len == y.len && memcmp(x.data, y.data, x.len) == 0);
    ck_assert_int_eq(ifd_oai_stream_delta(&s, &y, &echo), IFD_EINVAL); /* offset 10 now */
    shared[0].has_logprobs = true;
    shared[0].logprobs_prefix = &prefix;
    shared[0].text_offset = 1;
    ck_assert_int_eq(ifd_oai_response_json(&y, &k_cmpl, shared, 1, &u), IFD_EINVAL);
    ifd_buf_free(&x);
    ifd_buf_free(&y);
    ifd_buf_free(&plp);
    ifd_oai_lp_prefix_free(&prefix);
    ifd_arena_close(&a);
}
END_TEST

/* ---- bounds -------------------------------------------------------------------------- */

START_TEST(test_response_json_max)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_prompt_logprob_t *v = rnd_plp(&a, 200, 5);
    ifd_oai_choice_t ch[4];
    for (int i = 0; i < 4; i++)
        ch[i] = (ifd_oai_choice_t){.index = (uint32_t)i,
                                   .text = "x",
                                   .text_len = 1,
                                   .finish_reason = "stop",
                                   .has_prompt_logprobs = true,
                                   .prompt_logprobs = v,
                                   .n_prompt_logprobs = 200,
                                   .prompt_top = 5};
    ifd_oai_usage_t u = {201, 4, 0};
    ifd_buf_t full = IFD_BUF_INIT, b = IFD_BUF_INIT;
    ck_assert_int_eq(ifd_oai_response_json(&full, &k_cmpl, ch, 4, &u), 0);
    ck_assert_int_eq(ifd_oai_response_json_max(&b, &k_cmpl, ch, 4, &u, full.len), 0);
    ck_assert(b.len == full.len && memcmp(b.data, full.data, b.len) == 0);
    /* one byte short: refused, and what the buffer held is kept as it was */
    ifd_buf_clear(&b);
    ifd_buf_puts(&b, "kept");
    ck_assert_int_eq(ifd_oai_response_json_max(&b, &k_cmpl, ch, 4, &u, full.len - 1), IFD_ETOOBIG);
    ck_assert_str_eq(b.data, "kept");
    /* it stops early: the memory it took stays near the limit */
    ifd_buf_free(&b);
    ck_assert_int_eq(ifd_oai_response_json_max(&b, &k_cmpl, ch, 4, &u, 4096), IFD_ETOOBIG);
    ck_assert_uint_lt(b.cap, full.len / 2);
    ifd_buf_free(&b);
    ifd_buf_free(&full);
    ifd_arena_close(&a);
}
END_TEST

/* A request of n choices, a prompt of `plen` tokens and vLLM's prompt_logprobs. */
static ifd_oai_request_t plp_request(uint32_t n, uint32_t top)
{
    ifd_oai_request_t r;
    memset(&r, 0, sizeof r);
    r.n = n;
    r.max_tokens = 1;
    r.prompt_logprobs = true;
    r.prompt_top_logprobs = top;
    return r;
}

START_TEST(test_size_bound_of_the_request)
{
    /* issue 31 row 7: a 4,340-token prompt, n 32, prompt_logprobs 20 gave a 170 MB
     * response; its bound is over the 64 MiB default, refused before any work */
    size_t row7 = 4340, ci = 1500;
    ifd_oai_request_t r = plp_request(32, 20);
    uint64_t big = ifd_oai_response_min_bytes(IFD_OAI_COMPLETION, &r, &row7, 1);
    ck_assert_uint_gt(big, 64ull << 20);
    ck_assert_uint_lt(big, 175078939ull); /* a lower bound of what it was */
    /* chat holds the rows once, not per choice */
    uint64_t chat = ifd_oai_response_min_bytes(IFD_OAI_CHAT, &r, &row7, 1);
    ck_assert_uint_eq(chat * 32, big);
    /* the size the integration test sends: under the default and under 8 MiB */
    r = plp_request(8, 5);
    uint64_t small = ifd_oai_response_min_bytes(IFD_OAI_COMPLETION, &r, &ci, 1);
    ck_assert_uint_gt(small, 1u << 20);
    ck_assert_uint_lt(small, 3989877ull); /* what that response took */
    /* without prompt logprobs only min_tokens tokens are sure */
    ifd_oai_request_t q;
    memset(&q, 0, sizeof q);
    q.n = 8;
    q.max_tokens = 4000;
    q.logprobs = true;
    q.top_logprobs = 20;
    ck_assert_uint_eq(ifd_oai_response_min_bytes(IFD_OAI_CHAT, &q, &ci, 1), 0);
    q.min_tokens = 100;
    uint64_t m100 = ifd_oai_response_min_bytes(IFD_OAI_CHAT, &q, &ci, 1);
    ck_assert_uint_gt(m100, 0);
    q.max_tokens = 50; /* min_tokens past max_tokens: max_tokens are sure */
    ck_assert_uint_eq(ifd_oai_response_min_bytes(IFD_OAI_CHAT, &q, &ci, 1), m100 / 2);
    /* completions echo + logprobs: the prompt's tokens and rows in every choice */
    memset(&q, 0, sizeof q);
    q.n = 2;
    q.max_tokens = 0;
    q.echo = q.logprobs = true;
    q.top_logprobs = 1;
    size_t p2[2] = {10, 20};
    uint64_t e2 = ifd_oai_response_min_bytes(IFD_OAI_COMPLETION, &q, p2, 2);
    ck_assert_uint_gt(e2, ifd_oai_response_min_bytes(IFD_OAI_COMPLETION, &q, p2, 1));
    ck_assert_uint_eq(ifd_oai_response_min_bytes(IFD_OAI_CHAT, &q, p2, 2), 0); /* no echo */
    /* saturates instead of wrapping */
    size_t huge = SIZE_MAX / 2;
    r = plp_request(256, 20);
    ck_assert_uint_eq(ifd_oai_response_min_bytes(IFD_OAI_COMPLETION, &r, &huge, 1), UINT64_MAX);
}
END_TEST

/* What a response built for the request really takes is never less than
 * its bound, even with every piece at its shortest (empty tokens, id 0,
 * rank 1, logprob 0). */
START_TEST(test_size_bounds_are_lower_bounds)
{
    ifd_buf_t b = IFD_BUF_INIT;
    for (int round = 0; round < 300; round++) {
        ifd_arena_t a;
        ifd_arena_init(&a, 0);
        bool cmpl = round % 2;
        bool shortest = round % 3 == 0;
        ifd_oai_request_t r;
        memset(&r, 0, sizeof r);
        r.n = 1 + rnd() % 4;
        r.logprobs = rnd() % 2;
        r.top_logprobs = r.logprobs ? rnd() % 21 : 0;
        r.echo = cmpl && rnd() % 2;
        r.prompt_logprobs = rnd() % 2;
        r.prompt_top_logprobs = rnd() % 21;
        r.min_tokens = rnd() % 6;
        r.max_tokens = rnd() % 3 ? (int64_t)(rnd() % 8) : -1;
        size_t np = 1 + rnd() % 30;
        uint64_t bound =
            ifd_oai_response_min_bytes(cmpl ? IFD_OAI_COMPLETION : IFD_OAI_CHAT, &r, &np, 1);
        /* the answer: the prompt's rows with `top` distinct alternatives each (a
         * worker's top tokens; the row's own token may be one of them), and
         * min(min_tokens, max_tokens) tokens per choice */
        bool echo_lp = cmpl && r.echo && r.logprobs;
        bool has_plp = r.prompt_logprobs || echo_lp;
        uint32_t top = r.prompt_logprobs ? r.prompt_top_logprobs : r.top_logprobs;
        ifd_oai_prompt_logprob_t *v = ifd_arena_calloc(&a, np, sizeof *v);
        for (size_t i = 0; i + 1 < np; i++) {
            ifd_oai_plp_token_t *t = ifd_arena_calloc(&a, top + 1, sizeof *t);
            v[i].tok = (ifd_oai_plp_token_t){(int32_t)(rnd() % (7 * top + 1)), "tok", 3, -1.5f, 7};
            if (shortest)
                v[i].tok = (ifd_oai_plp_token_t){0, "", 0, 0.0f, 1};
            for (uint32_t k = 0; k < top; k++)
                t[k] = shortest ? (ifd_oai_plp_token_t){(int32_t)k, "", 0, 0.0f, k + 1}
                                : (ifd_oai_plp_token_t){(int32_t)(7 * k + rnd() % 7), "x", 1, -2.0f,
                                                        k + 1};
            v[i].top = t;
            v[i].n_top = top;
        }
        uint64_t gen = r.min_tokens;
        if (r.max_tokens >= 0 && (uint64_t)r.max_tokens < gen)
            gen = (uint64_t)r.max_tokens;
        ifd_oai_choice_t *ch = ifd_arena_calloc(&a, r.n, sizeof *ch);
        ifd_oai_logprob_t *echo = rnd_logprobs(&a, np, 3, true);
        ifd_oai_lp_prefix_t prefix;
        ck_assert_int_eq(ifd_oai_lp_prefix_build(&prefix, echo, np), 0);
        for (uint32_t i = 0; i < r.n; i++) {
            ifd_oai_logprob_t *lp = ifd_arena_calloc(&a, gen + 1, sizeof *lp);
            for (size_t k = 0; k < gen; k++) {
                ifd_oai_top_logprob_t *t = ifd_arena_calloc(&a, r.top_logprobs + 1, sizeof *t);
                for (uint32_t j = 0; j < r.top_logprobs; j++)
                    t[j] = (ifd_oai_top_logprob_t){"", 0, 0.0f};
                lp[k] = (ifd_oai_logprob_t){"", 0, 0.0f, t, r.top_logprobs, false};
            }
            ch[i] = (ifd_oai_choice_t){.index = i,
                                       .has_logprobs = r.logprobs,
                                       .logprobs = lp,
                                       .n_logprobs = gen,
                                       .has_prompt_logprobs = has_plp,
                                       .prompt_logprobs = v,
                                       .n_prompt_logprobs = np - 1,
                                       .prompt_top = top,
                                       .logprobs_prefix = echo_lp ? &prefix : NULL};
        }
        ifd_oai_usage_t u = {0, 0, 0};
        ifd_buf_clear(&b);
        ck_assert_int_eq(ifd_oai_response_json(&b, cmpl ? &k_cmpl : &k_chat, ch, r.n, &u), 0);
        IFD_CHECK(b.len >= bound, "round %d: bound %llu over the real %zu", round,
                  (unsigned long long)bound, b.len);
        /* one more token adds at least ifd_oai_token_min_bytes */
        if (r.logprobs && gen) {
            ifd_buf_t one = IFD_BUF_INIT, two = IFD_BUF_INIT;
            ifd_oai_logprob_t *lp = rnd_logprobs(&a, 2, 20, false);
            if (shortest)
                lp[1].len = 0;
            ifd_oai_kind_t kind = cmpl ? IFD_OAI_COMPLETION : IFD_OAI_CHAT;
            ck_assert_int_eq(ifd_oai_logprobs_json(&one, kind, lp, 1, 0), 0);
            ck_assert_int_eq(ifd_oai_logprobs_json(&two, kind, lp, 2, 0), 0);
            IFD_CHECK(two.len - one.len >= ifd_oai_token_min_bytes(kind, &lp[1]),
                      "round %d: a token's bound %llu over its %zu bytes", round,
                      (unsigned long long)ifd_oai_token_min_bytes(kind, &lp[1]), two.len - one.len);
            ifd_buf_free(&one);
            ifd_buf_free(&two);
        }
        ifd_oai_lp_prefix_free(&prefix);
        ifd_arena_close(&a);
    }
    ck_assert_uint_eq(ifd_oai_token_min_bytes(IFD_OAI_CHAT, NULL), 0);
    ifd_buf_free(&b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("proto_openai_size");
    TCase *tc = tcase_create("size");
    tcase_add_test(tc, test_writer_matches_trees);
    tcase_add_test(tc, test_shared_prompt_renderings);
    tcase_add_test(tc, test_response_json_max);
    tcase_add_test(tc, test_size_bound_of_the_request);
    tcase_add_test(tc, test_size_bounds_are_lower_bounds);
    suite_add_tcase(s, tc);
    return ifd_test_run(s);
}
