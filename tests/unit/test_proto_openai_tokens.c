/*
 * test_proto_openai_tokens.c — vLLM's token-level extensions in the OpenAI
 * JSON (proto/openai.h): return_token_ids, return_tokens_as_token_ids,
 * allowed_token_ids and custom message roles parsed (and their 400s), a
 * logit_bias refusal naming every bad key, and the answers' shapes as
 * vLLM writes them: prompt_logprobs null when not asked, token_ids and
 * prompt_token_ids (chat at the top level, completions in the choice;
 * streamed with each chunk's ids), completions' top_logprobs for logprobs 0.
 */
#include "jsonpath.h"
#include "testutil.h"

#include "error.h"
#include "proto/openai.h"
#include "proto/sse.h"

#include <jansson.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The array at path equals want[0..n). */
static void ids_eq(json_t *root, const char *path, const int32_t *want, size_t n)
{
    json_t *a = jp(root, path);
    ck_assert_msg(json_is_array(a), "%s is not an array", path);
    ck_assert_uint_eq(json_array_size(a), n);
    for (size_t i = 0; i < n; i++)
        ck_assert_int_eq(json_integer_value(json_array_get(a, i)), want[i]);
}

static int parse(ifd_arena_t *a, bool chat, const char *body, ifd_oai_request_t *r,
                 ifd_oai_error_t *e)
{
    return chat ? ifd_oai_parse_chat(a, body, strlen(body), r, e)
                : ifd_oai_parse_completion(a, body, strlen(body), r, e);
}

#define MSG "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"

START_TEST(test_parse_token_fields)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_request_t r;
    ifd_oai_error_t e;
    for (int chat = 0; chat < 2; chat++) {
        const char *body = chat ? "{" MSG ",\"return_token_ids\":true,"
                                  "\"return_tokens_as_token_ids\":true,"
                                  "\"allowed_token_ids\":[5,7,0]}"
                                : "{\"prompt\":\"x\",\"return_token_ids\":true,"
                                  "\"return_tokens_as_token_ids\":true,"
                                  "\"allowed_token_ids\":[5,7,0]}";
        ck_assert_int_eq(parse(&a, chat, body, &r, &e), 0);
        ck_assert(r.return_token_ids && r.tokens_as_ids);
        ck_assert_uint_eq(r.n_allowed_token_ids, 3);
        ck_assert_int_eq(r.allowed_token_ids[0], 5);
        ck_assert_int_eq(r.allowed_token_ids[2], 0);
        ck_assert_ptr_null(r.logprob_token_ids);
        /* off by default, and null is "not given" */
        body = chat ? "{" MSG ",\"return_token_ids\":null,\"allowed_token_ids\":null}"
                    : "{\"prompt\":\"x\",\"return_tokens_as_token_ids\":false}";
        ck_assert_int_eq(parse(&a, chat, body, &r, &e), 0);
        ck_assert(!r.return_token_ids && !r.tokens_as_ids);
        ck_assert_ptr_null(r.allowed_token_ids);
    }
    /* logprob_token_ids with logprobs */
    ck_assert_int_eq(
        parse(&a, true, "{" MSG ",\"logprobs\":true,\"logprob_token_ids\":[9,4]}", &r, &e), 0);
    ck_assert_uint_eq(r.n_logprob_token_ids, 2);
    ck_assert_int_eq(r.logprob_token_ids[1], 4);
    ck_assert_int_eq(
        parse(&a, false, "{\"prompt\":\"x\",\"logprobs\":0,\"logprob_token_ids\":[3]}", &r, &e), 0);
    ck_assert_uint_eq(r.n_logprob_token_ids, 1);
    /* more than OpenAI's 20: the daemon holds them to its max_logprobs */
    ck_assert_int_eq(parse(&a, false,
                           "{\"prompt\":\"x\",\"logprobs\":1,\"logprob_token_ids\":[1,2,3,4,5,6,"
                           "7,8,9,10,11,12,13,14,15,16,17,18,19,20,21]}",
                           &r, &e),
                     0);
    ck_assert_uint_eq(r.n_logprob_token_ids, 21);
    ck_assert_int_eq(r.logprob_token_ids[20], 21);
    /* any role reaches the template (vLLM), kept as sent */
    ck_assert_int_eq(parse(&a, true,
                           "{\"messages\":[{\"role\":\"ipython\",\"content\":\"x\"},"
                           "{\"role\":\"user\",\"content\":\"y\"}]}",
                           &r, &e),
                     0);
    ck_assert_str_eq(r.messages[0].role, "ipython");
    ck_assert_ptr_nonnull(strstr(r.messages_json, "\"ipython\""));
    ifd_arena_close(&a);
}
END_TEST

typedef struct {
    bool chat;
    const char *body;
    const char *param, *code;
} bad_t;

static const bad_t k_bad[] = {
    {true, "{" MSG ",\"allowed_token_ids\":[]}", "allowed_token_ids", "empty_array"},
    {false, "{\"prompt\":\"x\",\"allowed_token_ids\":[3,-1]}", "allowed_token_ids[1]",
     "integer_below_min_value"},
    {true, "{" MSG ",\"allowed_token_ids\":[\"a\"]}", "allowed_token_ids[0]", "invalid_type"},
    {true, "{" MSG ",\"allowed_token_ids\":5}", "allowed_token_ids", "invalid_type"},
    {true, "{" MSG ",\"return_token_ids\":\"yes\"}", "return_token_ids", "invalid_type"},
    {false, "{\"prompt\":\"x\",\"return_tokens_as_token_ids\":1}", "return_tokens_as_token_ids",
     "invalid_type"},
    {true, "{" MSG ",\"logprob_token_ids\":[1]}", "logprob_token_ids", "invalid_value"},
    {false, "{\"prompt\":\"x\",\"logprob_token_ids\":[1]}", "logprob_token_ids", "invalid_value"},
    {true, "{" MSG ",\"logprobs\":true,\"logprob_token_ids\":[]}", "logprob_token_ids",
     "empty_array"},
    {false,
     "{\"prompt\":\"x\",\"echo\":true,\"max_tokens\":0,\"logprobs\":0,"
     "\"logprob_token_ids\":[1]}",
     "logprob_token_ids", "invalid_value"},
    {true, "{\"messages\":[{\"role\":\"\",\"content\":\"x\"}]}", "messages[0].role",
     "invalid_value"},
};

START_TEST(test_parse_refusals)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    for (size_t i = 0; i < sizeof k_bad / sizeof k_bad[0]; i++) {
        ifd_oai_request_t r;
        ifd_oai_error_t e;
        int rc = parse(&a, k_bad[i].chat, k_bad[i].body, &r, &e);
        ck_assert_msg(rc == IFD_EINVAL, "case %zu: rc %s", i, ifd_err_name(rc));
        ck_assert_int_eq(e.status, 400);
        ck_assert_msg(!strcmp(e.param, k_bad[i].param), "case %zu: param %s", i, e.param);
        ck_assert_msg(!strcmp(e.code, k_bad[i].code), "case %zu: code %s", i, e.code);
    }
    ifd_arena_close(&a);
}
END_TEST

/* A logit_bias refusal names every bad key: keys that are not token ids,
 * else values out of range or of the wrong type; past the message's room,
 * how many more. */
START_TEST(test_logit_bias_every_key)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_request_t r;
    ifd_oai_error_t e;
    ck_assert_int_eq(parse(&a, true, "{" MSG ",\"logit_bias\":{\"a\":1,\"5\":1,\"-2\":1}}", &r, &e),
                     IFD_EINVAL);
    ck_assert_str_eq(e.param, "logit_bias");
    ck_assert_str_eq(e.code, "invalid_value");
    ck_assert_msg(strstr(e.message, "'a', '-2'") && !strstr(e.message, "'5'"), "%s", e.message);
    ck_assert_int_eq(
        parse(&a, true, "{" MSG ",\"logit_bias\":{\"5\":200,\"6\":1,\"7\":-300}}", &r, &e),
        IFD_EINVAL);
    ck_assert_str_eq(e.code, "decimal_above_max_value");
    ck_assert_msg(strstr(e.message, "'5', '7'") && !strstr(e.message, "'6'"), "%s", e.message);
    ck_assert_int_eq(
        parse(&a, false, "{\"prompt\":\"x\",\"logit_bias\":{\"5\":\"x\",\"6\":300}}", &r, &e),
        IFD_EINVAL);
    ck_assert_str_eq(e.code, "invalid_type");
    ck_assert_msg(strstr(e.message, "'5', '6'"), "%s", e.message);
    /* 200 bad keys: those that fit, then the count of the rest */
    ifd_buf_t b = IFD_BUF_INIT;
    ck_assert_int_eq(ifd_buf_puts(&b, "{" MSG ",\"logit_bias\":{"), 0);
    for (int i = 0; i < 200; i++)
        ck_assert_int_eq(ifd_buf_printf(&b, "%s\"k%d\":1", i ? "," : "", i), 0);
    ck_assert_int_eq(ifd_buf_puts(&b, "}}"), 0);
    ck_assert_int_eq(parse(&a, true, b.data, &r, &e), IFD_EINVAL);
    ck_assert_msg(strstr(e.message, "'k0', 'k1'") && strstr(e.message, " more."), "%s", e.message);
    ifd_buf_free(&b);
    /* the list itself */
    ifd_oai_names_t l = {0};
    char more[48];
    ifd_oai_names_add(&l, "x");
    ifd_oai_names_add(&l, "y");
    ck_assert_str_eq(l.text, "x, y");
    ck_assert_str_eq(ifd_oai_names_more(&l, more, sizeof more), "");
    char big[400];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    ifd_oai_names_add(&l, big); /* too long: counted, not listed */
    ck_assert_str_eq(l.text, "x, y");
    ck_assert_str_eq(ifd_oai_names_more(&l, more, sizeof more), " and 1 more");
    ifd_arena_close(&a);
}
END_TEST

static const ifd_oai_meta_t k_chat = {IFD_OAI_CHAT, "chatcmpl-t", "smol", 1700000000, NULL, NULL};
static const ifd_oai_meta_t k_cmpl = {IFD_OAI_COMPLETION, "cmpl-t", "smol", 1700000000, NULL, NULL};
static const int32_t k_prompt[] = {1, 9906, 11};
static const int32_t k_out[] = {22, 0};

/* Non-streamed: prompt_logprobs null when not asked (chat at the top,
 * completions in every choice); the ids where vLLM puts them, only when
 * asked. */
START_TEST(test_response_ids)
{
    ifd_oai_usage_t u = {3, 2, 0};
    ifd_oai_choice_t c = {.index = 0, .text = "ab", .text_len = 2, .finish_reason = "stop"};
    ifd_buf_t b = IFD_BUF_INIT;
    ck_assert_int_eq(ifd_oai_response_json(&b, &k_chat, &c, 1, &u), 0);
    json_t *j = load(b.data, b.len);
    ck_assert(jnull(j, "prompt_logprobs"));
    ck_assert_ptr_null(jp(j, "prompt_token_ids"));
    ck_assert_ptr_null(jp(j, "choices.0.token_ids"));
    ck_assert_ptr_null(jp(j, "choices.0.prompt_logprobs"));
    json_decref(j);
    ifd_buf_clear(&b);
    ck_assert_int_eq(ifd_oai_response_json(&b, &k_cmpl, &c, 1, &u), 0);
    j = load(b.data, b.len);
    ck_assert(jnull(j, "choices.0.prompt_logprobs"));
    ck_assert_ptr_null(jp(j, "prompt_logprobs"));
    ck_assert_ptr_null(jp(j, "choices.0.prompt_token_ids"));
    json_decref(j);

    c.has_token_ids = true;
    c.token_ids = k_out;
    c.n_token_ids = 2;
    c.prompt_token_ids = k_prompt;
    c.n_prompt_token_ids = 3;
    ifd_buf_clear(&b);
    ck_assert_int_eq(ifd_oai_response_json(&b, &k_chat, &c, 1, &u), 0);
    j = load(b.data, b.len);
    ids_eq(j, "prompt_token_ids", k_prompt, 3);
    ids_eq(j, "choices.0.token_ids", k_out, 2);
    ck_assert_ptr_null(jp(j, "choices.0.prompt_token_ids"));
    json_decref(j);
    ifd_buf_clear(&b);
    ck_assert_int_eq(ifd_oai_response_json(&b, &k_cmpl, &c, 1, &u), 0);
    j = load(b.data, b.len);
    ids_eq(j, "choices.0.prompt_token_ids", k_prompt, 3);
    ids_eq(j, "choices.0.token_ids", k_out, 2);
    ck_assert_ptr_null(jp(j, "prompt_token_ids"));
    json_decref(j);
    /* asked, none generated: an empty list, not null */
    c.n_token_ids = 0;
    ifd_buf_clear(&b);
    ck_assert_int_eq(ifd_oai_response_json(&b, &k_cmpl, &c, 1, &u), 0);
    j = load(b.data, b.len);
    ids_eq(j, "choices.0.token_ids", NULL, 0);
    json_decref(j);
    ifd_buf_free(&b);
}
END_TEST

static json_t *sse_chunks(const ifd_buf_t *out)
{
    ifd_sse_parser_t p;
    ifd_sse_parser_init(&p, 0);
    ck_assert_int_eq(ifd_sse_parser_feed(&p, out->data, out->len), 0);
    json_t *arr = json_array();
    ifd_sse_event_t ev;
    while (ifd_sse_parser_next(&p, &ev) == 1)
        if (strcmp(ev.data, "[DONE]") != 0)
            json_array_append_new(arr, load(ev.data, ev.len));
    ifd_sse_parser_close(&p);
    return arr;
}

/* Streamed: each chunk's own ids (a chunk with ids alone is sent), the
 * prompt's once: chat at the chunk's top level, completions in the choice. */
START_TEST(test_stream_ids)
{
    for (int chat = 0; chat < 2; chat++) {
        ifd_arena_t a;
        ifd_arena_init(&a, 0);
        ifd_oai_stream_t s;
        ifd_buf_t b = IFD_BUF_INIT;
        ck_assert_int_eq(ifd_oai_stream_init(&s, &a, chat ? &k_chat : &k_cmpl, 1, false), 0);
        ifd_oai_choice_t c = {.index = 0,
                              .text = "a",
                              .text_len = 1,
                              .has_token_ids = true,
                              .token_ids = k_out,
                              .n_token_ids = 1,
                              .prompt_token_ids = k_prompt,
                              .n_prompt_token_ids = 3};
        ck_assert_int_eq(ifd_oai_stream_delta(&s, &b, &c), 0);
        c = (ifd_oai_choice_t){
            .index = 0, .has_token_ids = true, .token_ids = k_out + 1, .n_token_ids = 1};
        ck_assert_int_eq(ifd_oai_stream_delta(&s, &b, &c), 0); /* ids alone */
        c = (ifd_oai_choice_t){.index = 0, .has_token_ids = true, .finish_reason = "stop"};
        ck_assert_int_eq(ifd_oai_stream_finish(&s, &b, &c), 0);
        ck_assert_int_eq(ifd_oai_stream_end(&s, &b, NULL), 0);
        json_t *ch = sse_chunks(&b);
        ck_assert_uint_eq(json_array_size(ch), 3);
        ids_eq(ch, chat ? "0.prompt_token_ids" : "0.choices.0.prompt_token_ids", k_prompt, 3);
        ck_assert_ptr_null(jp(ch, chat ? "0.choices.0.prompt_token_ids" : "0.prompt_token_ids"));
        ck_assert_ptr_null(jp(ch, "1.prompt_token_ids"));
        ck_assert_ptr_null(jp(ch, "1.choices.0.prompt_token_ids"));
        ids_eq(ch, "0.choices.0.token_ids", k_out, 1);
        ids_eq(ch, "1.choices.0.token_ids", k_out + 1, 1);
        ids_eq(ch, "2.choices.0.token_ids", NULL, 0);
        ck_assert_ptr_null(jp(ch, "0.prompt_logprobs")); /* never in a stream */
        ck_assert_ptr_null(jp(ch, "0.choices.0.prompt_logprobs"));
        json_decref(ch);
        ifd_buf_free(&b);
        ifd_arena_close(&a);
    }
}
END_TEST

/* Chat: the stream's prompt ids go in its first chunk, the role chunk of
 * choice 0, and only there. */
START_TEST(test_stream_start_prompt_ids)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_stream_t s;
    ifd_buf_t b = IFD_BUF_INIT;
    ck_assert_int_eq(ifd_oai_stream_init(&s, &a, &k_chat, 2, false), 0);
    s.prompt_token_ids = k_prompt;
    s.n_prompt_token_ids = 3;
    ck_assert_int_eq(ifd_oai_stream_start(&s, &b), 0);
    json_t *ch = sse_chunks(&b);
    ck_assert_uint_eq(json_array_size(ch), 2);
    ids_eq(ch, "0.prompt_token_ids", k_prompt, 3);
    ck_assert_ptr_null(jp(ch, "1.prompt_token_ids"));
    ck_assert_ptr_null(jp(ch, "0.choices.0.token_ids"));
    json_decref(ch);
    ifd_buf_free(&b);
    ifd_arena_close(&a);
}
END_TEST

/* Completions with logprobs 0: each token's top_logprobs is the token
 * itself with its logprob (vLLM); a prompt token without a logprob (echo's
 * first) stays null. */
START_TEST(test_completion_logprobs_zero)
{
    ifd_oai_logprob_t lp[3] = {{"Hi", 2, 0.0f, NULL, 0, true},
                               {" there", 6, -0.25f, NULL, 0, false},
                               {"\xff", 1, -INFINITY, NULL, 0, false}};
    ifd_oai_choice_t c = {.index = 0,
                          .text = "Hi there",
                          .text_len = 8,
                          .finish_reason = "length",
                          .has_logprobs = true,
                          .logprobs = lp,
                          .n_logprobs = 3};
    ifd_oai_usage_t u = {1, 2, 0};
    ifd_buf_t b = IFD_BUF_INIT;
    ck_assert_int_eq(ifd_oai_response_json(&b, &k_cmpl, &c, 1, &u), 0);
    json_t *j = load(b.data, b.len);
    ck_assert(jnull(j, "choices.0.logprobs.top_logprobs.0"));
    json_t *t1 = jp(j, "choices.0.logprobs.top_logprobs.1");
    ck_assert_uint_eq(json_object_size(t1), 1);
    ck_assert(json_real_value(json_object_get(t1, " there")) == -0.25);
    json_t *t2 = jp(j, "choices.0.logprobs.top_logprobs.2");
    ck_assert_uint_eq(json_object_size(t2), 1);
    ck_assert(json_real_value(json_object_get(t2, "\xef\xbf\xbd")) == -9999.0);
    json_decref(j);
    ifd_buf_free(&b);
}
END_TEST

/* Completions' top_logprobs object: alternatives whose texts repeat (partial
 * UTF-8, a text cut at a NUL) keep the first one's place and take the last
 * one's logprob. Random texts from a small alphabet, against a pairwise
 * reference, for n across the writer's pairwise (<= 32) and hashed paths. */
START_TEST(test_completion_top_logprobs_merge)
{
    static const size_t ns[] = {1, 7, 32, 33, 300, 5000};
    uint64_t seed = 0x9e3779b97f4a7c15u;
    for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++) {
        size_t n = ns[c];
        char(*txt)[4] = calloc(n, sizeof *txt);
        ifd_oai_top_logprob_t *top = calloc(n, sizeof *top);
        ck_assert(txt && top);
        for (size_t k = 0; k < n; k++) {
            seed = seed * 6364136223846793005u + 1442695040888963407u;
            size_t len = 1 + (seed >> 60) % 3; /* "a".."ccc", or a text cut at a NUL */
            for (size_t i = 0; i < len; i++)
                txt[k][i] = (char)("abc\0"[(seed >> (20 + 4 * i)) % (n > 40 ? 4 : 3)]);
            top[k] = (ifd_oai_top_logprob_t){txt[k], len, -(float)k};
        }
        ifd_oai_logprob_t lp = {"a", 1, -1.0f, top, n, false};
        ifd_oai_choice_t ch = {.index = 0,
                               .text = "a",
                               .text_len = 1,
                               .finish_reason = "length",
                               .has_logprobs = true,
                               .logprobs = &lp,
                               .n_logprobs = 1};
        ifd_oai_usage_t u = {1, 1, 0};
        ifd_buf_t b = IFD_BUF_INIT;
        ck_assert_int_eq(ifd_oai_response_json(&b, &k_cmpl, &ch, 1, &u), 0);
        json_t *j = load(b.data, b.len);
        json_t *obj = jp(j, "choices.0.logprobs.top_logprobs.0");
        ck_assert_ptr_nonnull(obj);
        /* the reference: texts cut at their NUL, first places in order, last values */
        size_t want = 0;
        void *it = json_object_iter(obj);
        for (size_t k = 0; k < n; k++) {
            size_t lk = strnlen(txt[k], top[k].len);
            bool seen = false;
            for (size_t i = 0; i < k && !seen; i++)
                seen = strnlen(txt[i], top[i].len) == lk && memcmp(txt[i], txt[k], lk) == 0;
            if (seen)
                continue;
            float v = top[k].logprob;
            for (size_t i = k + 1; i < n; i++)
                if (strnlen(txt[i], top[i].len) == lk && memcmp(txt[i], txt[k], lk) == 0)
                    v = top[i].logprob;
            ck_assert_ptr_nonnull(it);
            const char *key = json_object_iter_key(it);
            ck_assert_uint_eq(strlen(key), lk);
            ck_assert(memcmp(key, txt[k], lk) == 0);
            ck_assert(json_real_value(json_object_iter_value(it)) == v);
            it = json_object_iter_next(obj, it);
            want++;
        }
        ck_assert_ptr_null(it);
        ck_assert_uint_eq(json_object_size(obj), want);
        ck_assert_uint_le(want, 40); /* the alphabet has 40 texts (with the empty one) */
        json_decref(j);
        ifd_buf_free(&b);
        free(txt);
        free(top);
    }
}
END_TEST

/* vLLM's prompt_logprobs: a position's entries keyed by id — the token
 * first, then its alternatives; an id met again (the token among its own
 * alternatives) keeps its first place and takes the last entry (logprob,
 * rank). Random ids from a small range against a pairwise reference, up to
 * a vocabulary-sized row. */
START_TEST(test_prompt_logprobs_merge)
{
    static const size_t ms[] = {0, 5, 40, 3000};
    uint64_t seed = 42;
    for (size_t c = 0; c < sizeof ms / sizeof ms[0]; c++) {
        size_t m = ms[c], range = m < 8 ? 4 : m / 3;
        ifd_oai_prompt_logprob_t row[2];
        ifd_oai_plp_token_t *top = calloc(2 * m + 1, sizeof *top);
        ck_assert(top);
        for (size_t r = 0; r < 2; r++) {
            row[r].tok = (ifd_oai_plp_token_t){(int32_t)r, "t", 1, -0.5f, 7};
            row[r].top = top + r * m;
            row[r].n_top = m;
            for (size_t e = 0; e < m; e++) {
                seed = seed * 6364136223846793005u + 1442695040888963407u;
                top[r * m + e] = (ifd_oai_plp_token_t){(int32_t)((seed >> 33) % range), "x", 1,
                                                       -(float)e, (uint32_t)e + 1};
            }
        }
        ifd_buf_t b = IFD_BUF_INIT;
        ck_assert_int_eq(ifd_oai_prompt_logprobs_json(&b, row, 2, (uint32_t)m), 0);
        json_t *j = load(b.data, b.len);
        ck_assert(json_is_null(json_array_get(j, 0)));
        for (size_t r = 0; r < 2; r++) {
            json_t *obj = json_array_get(j, r + 1);
            void *it = json_object_iter(obj);
            size_t want = 0;
            for (size_t e = 0; e <= m; e++) {
                const ifd_oai_plp_token_t *te = e ? &row[r].top[e - 1] : &row[r].tok;
                bool seen = false;
                for (size_t i = 0; i < e && !seen; i++)
                    seen = (i ? row[r].top[i - 1].id : row[r].tok.id) == te->id;
                if (seen)
                    continue;
                const ifd_oai_plp_token_t *tl = te;
                for (size_t i = e + 1; i <= m; i++)
                    if (row[r].top[i - 1].id == te->id)
                        tl = &row[r].top[i - 1];
                char key[16];
                snprintf(key, sizeof key, "%d", (int)te->id);
                ck_assert_ptr_nonnull(it);
                ck_assert_str_eq(json_object_iter_key(it), key);
                json_t *v = json_object_iter_value(it);
                ck_assert(json_real_value(json_object_get(v, "logprob")) == tl->logprob);
                ck_assert_int_eq(json_integer_value(json_object_get(v, "rank")), tl->rank);
                it = json_object_iter_next(obj, it);
                want++;
            }
            ck_assert_ptr_null(it);
            ck_assert_uint_eq(json_object_size(obj), want);
        }
        json_decref(j);
        ifd_buf_free(&b);
        free(top);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("proto_openai_tokens");
    ifd_test_case(s, "tokens", 30,
                  IFD_TESTS(test_parse_token_fields, test_parse_refusals, test_logit_bias_every_key,
                            test_response_ids, test_stream_ids, test_stream_start_prompt_ids,
                            test_completion_logprobs_zero, test_completion_top_logprobs_merge,
                            test_prompt_logprobs_merge));
    return ifd_test_run(s);
}
