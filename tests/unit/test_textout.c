/*
 * test_textout.c — a choice's text (daemon/textout.h) driven token by token
 * as a worker would, with a client that streams whatever the module
 * releases. One table of scripted cases: stop strings across token
 * boundaries (one byte per token, a multi-byte UTF-8 character split across
 * tokens, a stop inside one multi-character token), held-back text released
 * when it stops matching, a stop at the very start and at the very end,
 * several overlapping stop strings, include_stop_str_in_output both ways,
 * min_tokens, an unfinished character when the sequence ends, stop ids,
 * held-back tool calls (auto and forced: the text that starts a call is
 * never streamed as content), a forced array cut by max_tokens, and the
 * finish reasons. Then the rules themselves, and when not even logprobs may
 * go out.
 *
 * The tokenizer is a synthetic byte-level vocabulary (tests/gguf_builder.h):
 * token i < 256 is byte i, so one byte per token is the finest split a model
 * can make; after them come an end-of-turn control token and two
 * multi-character tokens, written in the scripts as the bytes 1, 2 and 3.
 */
#include "testutil.h"

#include "daemon/textout.h"
#include "error.h"
#include "gguf_builder.h"
#include "utf8.h"

#include <stdio.h>
#include <string.h>

/* The extra tokens after the bytes, and how a script writes them. */
enum { TOK_END = 256, TOK_HELLO, TOK_XSTOPX };
#define END    "\x01" /* <|end|>: the chat template's end of turn */
#define HELLO  "\x02" /* "Hello" */
#define XSTOPX "\x03" /* "xSTOPx" */

#define MSG "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"
#define TOOLS                                                                                      \
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":"     \
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"                        \
    "\"required\":[\"city\"]}}}]"
#define FORCED TOOLS ",\"tool_choice\":\"required\""
#define CALL                                                                                       \
    "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}</tool_call>"
#define ARRAY  "[{\"name\":\"get_weather\",\"parameters\":{\"city\":\"Oslo\"}}"
#define EURO   "\xE2\x82\xAC"

static ifd_tokenizer_t *g_tok;

static void tok_setup(void)
{
    static const char *const extra[] = {"<|end|>", "Hello", "xSTOPx"};
    static const int types[] = {IFD_TOKTYPE_CONTROL, IFD_TOKTYPE_NORMAL, IFD_TOKTYPE_NORMAL};
    ifd_buf_t b = IFD_BUF_INIT;
    gb_bpe_vocab(&b, "gpt-2", extra, types, 3, NULL, 0);
    char err[256] = "";
    ifd_gguf_t *g;
    ck_assert_int_eq(ifd_gguf_open_mem(&g, b.data, b.len, "synthetic", err, sizeof err), 0);
    ck_assert_msg(ifd_tokenizer_create_gguf(&g_tok, g, err, sizeof err) == 0, "%s", err);
    ifd_gguf_close(g);
    ifd_buf_free(&b);
}

static void tok_teardown(void)
{
    ifd_tokenizer_destroy(g_tok);
    g_tok = NULL;
}

/* ---- the harness: a request's rules, one choice's text, a streaming client -------------- */

typedef struct {
    ifd_arena_t arena;
    ifd_oai_request_t rq;
    ifd_textout_rules_t rules;
    ifd_textout_t t;
    ifd_buf_t got; /* every byte handed out, in order */
    int n_ids;     /* tool call ids made */
    int last;      /* the last push's event */
} fx_t;

static char *call_id(void *ud, ifd_arena_t *a)
{
    fx_t *f = ud;
    return ifd_arena_sprintf(a, "call_%d", f->n_ids++);
}

/* members: the request body's members besides its messages (chat) or prompt. */
static void fx_open(fx_t *f, ifd_oai_kind_t kind, const char *members)
{
    memset(f, 0, sizeof *f);
    ifd_arena_init(&f->arena, 0);
    char body[2048];
    snprintf(body, sizeof body, "{%s%s%s}", kind == IFD_OAI_CHAT ? MSG : "\"prompt\":\"hi\"",
             *members ? "," : "", members);
    ifd_oai_error_t e;
    memset(&e, 0, sizeof e);
    int rc = kind == IFD_OAI_CHAT
                 ? ifd_oai_parse_chat(&f->arena, body, strlen(body), &f->rq, &e)
                 : ifd_oai_parse_completion(&f->arena, body, strlen(body), &f->rq, &e);
    ck_assert_msg(rc == 0, "%s: %s", body, e.message);
    const int32_t eog[] = {TOK_END};
    ck_assert_int_eq(ifd_textout_rules_init(&f->rules, &f->rq, kind, eog, 1), 0);
    f->rules.call_id = call_id;
    f->rules.call_id_ud = f;
    ck_assert_int_eq(ifd_textout_init(&f->t, &f->rules, g_tok), 0);
}

static void fx_close(fx_t *f)
{
    ifd_textout_close(&f->t);
    ifd_textout_rules_close(&f->rules);
    ifd_buf_free(&f->got);
    ifd_arena_close(&f->arena);
}

static const char *str(const ifd_buf_t *b)
{
    return b->data ? b->data : "";
}

/* The client is sent text[emitted .. upto); all it got is whole UTF-8. */
static void give(fx_t *f, size_t upto)
{
    size_t n;
    const char *p = ifd_textout_take(&f->t, upto, &n);
    if (n)
        ck_assert_int_eq(ifd_buf_append(&f->got, p, n), 0);
    for (size_t i = 0; i < f->got.len;) {
        int k = ifd_utf8_check((const uint8_t *)f->got.data + i, f->got.len - i);
        ck_assert_msg(k > 0, "the client got a broken UTF-8 character at %zu", i);
        i += (size_t)k;
    }
}

/* The tokens of a script, one per byte (bytes 1 .. 3: the extra tokens),
 * each followed by what a stream is sent; a stop string ends the script. */
static void push(fx_t *f, const char *script)
{
    const unsigned char *s = (const unsigned char *)script;
    for (; *s && f->last != IFD_TEXTOUT_STOP; s++) {
        int id = *s >= 1 && *s <= 3 ? TOK_END + *s - 1 : *s;
        int ev = ifd_textout_push(&f->t, id);
        ck_assert_int_ge(ev, 0);
        f->last = ev;
        size_t upto;
        if (ev == IFD_TEXTOUT_TEXT && ifd_textout_ready(&f->t, &upto))
            give(f, upto);
    }
}

/* The sequence ends (at max_tokens with length) unless a stop string ended
 * it; the last bytes go out as gen.c sends them. The finish reason. */
static const char *finish(fx_t *f, bool length)
{
    if (f->last == IFD_TEXTOUT_STOP || ifd_textout_flush(&f->t) == IFD_TEXTOUT_STOP)
        length = false;
    const char *reason = ifd_textout_end(&f->t, length, &f->arena);
    const ifd_textout_t *t = &f->t;
    give(f, t->n_calls ? (t->content_len > t->emitted ? t->content_len : t->emitted) : t->text.len);
    return reason;
}

/* ---- scripted cases ----------------------------------------------------------------------- */

#define COMPL IFD_OAI_COMPLETION
#define CHAT  IFD_OAI_CHAT

typedef struct {
    const char *push, *got; /* tokens, then all the client has been sent */
} step_t;

typedef struct {
    const char *what;
    ifd_oai_kind_t kind;
    const char *members; /* of the request body */
    step_t steps[6];
    bool length;       /* the sequence ends at max_tokens (else at a stop id or EOS) */
    bool stopped;      /* a stop string ended it on the last token pushed */
    uint32_t n_tokens; /* counted */
    const char *text;  /* the final text */
    const char *got;   /* all the client was sent */
    const char *finish;
    const char *args; /* the first tool call's arguments; NULL: no calls */
} case_t;

/* clang-format off: one case, two or three lines */
static const case_t k_cases[] = {
    {"no stop strings", COMPL, "", {{HELLO, "Hello"}, {", world", "Hello, world"}}, true, false,
     8, "Hello, world", "Hello, world", "length", NULL},
    {"no stop strings, EOS", COMPL, "", {{"ok", "ok"}}, false, false, 2, "ok", "ok", "stop",
     NULL},
    {"one byte per token", COMPL, "\"stop\":\"END\"",
     {{"abc", "abc"}, {"E", "abc"}, {"N", "abc"}, {"D", "abc"}}, false, true, 6, "abc", "abc",
     "stop", NULL},
    {"held text released", COMPL, "\"stop\":\"END\"",
     {{"abEN", "ab"}, {"x", "abENx"}, {"E", "abENx"}, {"E", "abENxE"}, {"N", "abENxE"},
      {"D", "abENxE"}},
     false, true, 9, "abENxE", "abENxE", "stop", NULL},
    {"held prefix released at the end", COMPL, "\"stop\":\"xyz\"", {{"abcxy", "abc"}}, true, false,
     5, "abcxy", "abcxy", "length", NULL},
    {"UTF-8 split, stop after it", COMPL, "\"stop\":\"\\u00e9!\"",
     {{"\xE2", ""}, {"\x82", ""}, {"\xAC", EURO}, {"caf\xC3", EURO "caf"}, {"\xA9", EURO "caf"},
      {"!", EURO "caf"}},
     false, true, 9, EURO "caf", EURO "caf", "stop", NULL},
    {"a one-character stop split in three", COMPL, "\"stop\":\"\\u20ac\"",
     {{"5 ", "5 "}, {"\xE2\x82", "5 "}, {"\xAC", "5 "}}, false, true, 5, "5 ", "5 ", "stop",
     NULL},
    {"an unfinished character at the end", COMPL, "", {{"ok\xE2", "ok"}}, true, false, 3,
     "ok\xEF\xBF\xBD", "ok\xEF\xBF\xBD", "length", NULL},
    {"a stop completed by the end's bytes", COMPL, "\"stop\":\"k\\ufffd\"", {{"ok\xE2", "o"}},
     true, false, 3, "o", "o", "stop", NULL},
    {"stop inside one token", COMPL, "\"stop\":\"TO\"", {{"ab", "ab"}, {XSTOPX, "ab"}}, false,
     true, 3, "abxS", "abxS", "stop", NULL},
    {"stop across a token and a byte", COMPL, "\"stop\":\"loW\"", {{HELLO, "Hel"}, {"W", "Hel"}},
     false, true, 2, "Hel", "Hel", "stop", NULL},
    {"stop at the very start", COMPL, "\"stop\":\"ab\"", {{"a", ""}, {"b", ""}}, false, true, 2,
     "", "", "stop", NULL},
    {"the first token is the stop", COMPL, "\"stop\":\"Hello\"", {{HELLO, ""}}, false, true, 1, "",
     "", "stop", NULL},
    {"stop at the very end, before max_tokens", COMPL, "\"stop\":\"xyz\"", {{"abcxyz", "abc"}},
     true, true, 6, "abc", "abc", "stop", NULL},
    {"overlapping stops: the earliest start wins", COMPL, "\"stop\":[\"cd\",\"bcd\",\"abcdef\"]",
     {{"xabc", "x"}, {"d", "x"}}, false, true, 5, "xa", "xa", "stop", NULL},
    {"the shorter stop inside the longer", COMPL, "\"stop\":[\"abcd\",\"bc\"]", {{"abcd", ""}},
     false, true, 3, "a", "a", "stop", NULL},
    {"the longest held prefix of any stop", COMPL, "\"stop\":[\"abcX\",\"bcY\"]",
     {{"zabc", "z"}, {"Y", "z"}}, false, true, 5, "za", "za", "stop", NULL},
    {"held prefixes of two stops released", COMPL, "\"stop\":[\"abcX\",\"bcY\"]",
     {{"zabc", "z"}, {"Z", "zabcZ"}}, true, false, 5, "zabcZ", "zabcZ", "length", NULL},
    {"include_stop_str_in_output", COMPL, "\"stop\":\"END\",\"include_stop_str_in_output\":true",
     {{"abcENDxyz", "abc"}}, false, true, 6, "abcEND", "abcEND", "stop", NULL},
    {"include_stop_str_in_output false", COMPL,
     "\"stop\":\"END\",\"include_stop_str_in_output\":false", {{"abcENDxyz", "abc"}}, false, true,
     6, "abc", "abc", "stop", NULL},
    {"include_stop_str_in_output, one token", COMPL,
     "\"stop\":\"TO\",\"include_stop_str_in_output\":true", {{XSTOPX, ""}}, false, true, 1, "xSTO",
     "xSTO", "stop", NULL},
    {"min_tokens", COMPL, "\"stop\":\"ab\",\"min_tokens\":4", {{"abxx", "abxx"}, {"ab", "abxx"}},
     false, true, 6, "abxx", "abxx", "stop", NULL},
    /* a stop that min_tokens let through still matches once min_tokens is
     * reached while scan trails it (inferd's rule, not vLLM's): the text is
     * cut below what was streamed, and nothing is taken back */
    {"a streamed stop matched late", COMPL, "\"stop\":[\"abcd\",\"xy\"],\"min_tokens\":3",
     {{"xy", "xy"}, {"z", "xy"}}, false, true, 3, "", "xy", "stop", NULL},
    {"stop ids have no text", CHAT, "\"stop_token_ids\":[113]", {{"hi", "hi"}, {END "q", "hi"}},
     false, false, 4, "hi", "hi", "stop", NULL},
    {"echo with max_tokens 0: no text", COMPL, "\"echo\":true,\"max_tokens\":0", {{"ab", ""}},
     true, false, 2, "", "", "length", NULL},
    {"tool call held back", CHAT, TOOLS,
     {{"Sure. ", "Sure. "}, {"<", "Sure. "}, {CALL + 1, "Sure. "}}, false, false, 80,
     "Sure. " CALL, "Sure. ", "tool_calls", "{\"city\":\"Paris\"}"},
    {"'<' that is no tool call", CHAT, TOOLS, {{"1 <", "1 "}, {" 2", "1 < 2"}}, false, false, 5,
     "1 < 2", "1 < 2", "stop", NULL},
    {"tool_choice none: calls are content", CHAT, TOOLS ",\"tool_choice\":\"none\"",
     {{CALL, CALL}}, false, false, 74, CALL, CALL, "stop", NULL},
    {"forced call: all held", CHAT, FORCED, {{ARRAY "]", ""}}, false, false, 53, ARRAY "]", "",
     "tool_calls", "{\"city\":\"Oslo\"}"},
    {"forced array cut: whole calls kept", CHAT, FORCED, {{ARRAY ",{\"name\":\"get_wea", ""}},
     true, false, 69, ARRAY ",{\"name\":\"get_wea", "", "length", "{\"city\":\"Oslo\"}"},
    /* nothing parses: what was held goes out as content at the end */
    {"forced array cut before a whole call", CHAT, FORCED, {{"[{\"name\":\"get_", ""}}, true,
     false, 14, "[{\"name\":\"get_", "[{\"name\":\"get_", "length", NULL},
};
/* clang-format on */
#define N_CASES (int)(sizeof k_cases / sizeof k_cases[0])

START_TEST(test_cases)
{
    const case_t *c = &k_cases[_i];
    fx_t f;
    fx_open(&f, c->kind, c->members);
    for (int i = 0; i < 6 && c->steps[i].push; i++) {
        push(&f, c->steps[i].push);
        ck_assert_msg(!strcmp(str(&f.got), c->steps[i].got), "%s, step %d: sent '%s'", c->what,
                      i, str(&f.got));
    }
    ck_assert_msg((f.last == IFD_TEXTOUT_STOP) == c->stopped, "%s: stopped", c->what);
    ck_assert_msg(f.t.n_tokens == c->n_tokens, "%s: %u tokens", c->what, f.t.n_tokens);
    const char *reason = finish(&f, c->length);
    ck_assert_msg(!strcmp(str(&f.t.text), c->text), "%s: text '%s'", c->what, str(&f.t.text));
    ck_assert_msg(!strcmp(str(&f.got), c->got), "%s: sent '%s'", c->what, str(&f.got));
    ck_assert_msg(!strcmp(reason, c->finish), "%s: finish %s", c->what, reason);
    ck_assert_msg((f.t.n_calls > 0) == (c->args != NULL), "%s: %zu calls", c->what, f.t.n_calls);
    if (c->args) {
        ck_assert_uint_eq(f.t.n_calls, 1);
        ck_assert_str_eq(f.t.calls[0].id, "call_0");
        ck_assert_str_eq(f.t.calls[0].name, "get_weather");
        ck_assert_str_eq(f.t.calls[0].arguments, c->args);
    }
    fx_close(&f);
}
END_TEST

/* ---- the rules, and holding everything ---------------------------------------------------- */

START_TEST(test_rules)
{
    fx_t f;
    fx_open(&f, CHAT, "\"stop_token_ids\":[113],\"stop\":[\"ab\",\"abcde\"]");
    ck_assert(ifd_textout_is_stop_id(&f.rules, TOK_END));
    ck_assert(ifd_textout_is_stop_id(&f.rules, 'q'));
    ck_assert(!ifd_textout_is_stop_id(&f.rules, 'h'));
    ck_assert_uint_eq(f.rules.max_stop_len, 5);
    ck_assert(f.rules.text && !f.rules.tools);
    fx_close(&f);
    /* ignore_eos: the end of turn is no stop id, stop_token_ids still are */
    fx_open(&f, CHAT, "\"stop_token_ids\":[113],\"ignore_eos\":true");
    ck_assert(!ifd_textout_is_stop_id(&f.rules, TOK_END));
    ck_assert_uint_eq(f.rules.n_stop_ids, 1);
    ck_assert_int_eq(f.rules.stop_ids[0], 'q');
    fx_close(&f);
    fx_open(&f, CHAT, TOOLS);
    ck_assert(f.rules.tools);
    fx_close(&f);
    fx_open(&f, COMPL, "\"echo\":true,\"max_tokens\":0");
    ck_assert(!f.rules.text);
    fx_close(&f);
}
END_TEST

START_TEST(test_ready)
{
    /* a held stop prefix lets the token's logprobs go: ready, nothing new */
    fx_t f;
    fx_open(&f, CHAT, "\"stop\":\"END\"");
    push(&f, "E");
    size_t upto = 99;
    ck_assert(ifd_textout_ready(&f.t, &upto));
    ck_assert_uint_eq(upto, 0);
    fx_close(&f);
    /* what may start a tool call holds everything, logprobs too */
    fx_open(&f, CHAT, TOOLS);
    push(&f, "ok <");
    ck_assert(!ifd_textout_ready(&f.t, &upto));
    ck_assert_uint_eq(upto, f.t.emitted);
    ck_assert_uint_eq(f.t.emitted, 3);
    fx_close(&f);
    fx_open(&f, CHAT, FORCED);
    push(&f, "[");
    ck_assert(!ifd_textout_ready(&f.t, &upto));
    fx_close(&f);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("textout");
    tcase_add_checked_fixture(tc, tok_setup, tok_teardown); /* each case its own tokenizer */
    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, test_cases, 0, N_CASES);
    tcase_add_test(tc, test_rules);
    tcase_add_test(tc, test_ready);
    Suite *s = suite_create("textout");
    suite_add_tcase(s, tc);
    return ifd_test_run(s);
}
