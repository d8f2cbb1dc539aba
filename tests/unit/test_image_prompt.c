/*
 * test_image_prompt.c — Gemma 3's image placeholder expansion
 * (common/chat/image_prompt.h) with the Gemma 3 270M tokenizer (label
 * model): the special ids, the ids around an image as Gemma3Processor's
 * full_image_sequence tokenizes (the reference: the expanded text, soft
 * tokens and all, through the tokenizer, whose ids equal the Hugging Face
 * tokenizer's: test_tokenizer_gemma), adjacent images, placeholders in plain
 * spans left alone, shifted plain spans, errors.
 */
#include "testutil.h"

#include "chat/image_prompt.h"
#include "error.h"
#include "tokenizer/tokenizer.h"

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char g_model[1024];
enum { SOFT = 262144, N_SOFT = 256, BOI = 255999, EOI = 256000 };

static ifd_tokenizer_t *load(void)
{
    ifd_tokenizer_t *t = NULL;
    char err[256];
    ck_assert_msg(ifd_tokenizer_create_gguf_file(&t, g_model, err, sizeof err) == 0, "%s", err);
    return t;
}

/* The ids of text through the tokenizer alone (special text parsed). */
static ifd_tokens_t plain_ids(const ifd_tokenizer_t *t, const char *text)
{
    ifd_tokens_t v = {0};
    ck_assert_int_eq(ifd_tokenizer_encode(t, text, strlen(text), IFD_TOK_PARSE_SPECIAL, &v), 0);
    return v;
}

/* out[from ..] equals the ids of `text` (no soft tokens in it). */
static void expect_ids(const ifd_tokenizer_t *t, const ifd_tokens_t *out, size_t from, size_t n,
                       const char *text)
{
    ifd_tokens_t want = plain_ids(t, text);
    ck_assert_msg(want.n == n, "\"%s\": %zu ids, want %zu", text, n, want.n);
    ck_assert(memcmp(out->ids + from, want.ids, n * sizeof *want.ids) == 0);
    ifd_tokens_free(&want);
}

START_TEST(test_ids)
{
    ifd_tokenizer_t *t = load();
    ifd_image_prompt_t ip;
    ck_assert_int_eq(ifd_image_prompt_gemma3(t, SOFT, N_SOFT, &ip), 0);
    ck_assert_int_eq(ip.boi, BOI);
    ck_assert_int_eq(ip.eoi, EOI);
    ck_assert_int_eq(ip.soft, SOFT);
    ck_assert_int_eq(ifd_image_prompt_gemma3(t, SOFT, 0, &ip), IFD_EINVAL);
    ck_assert_int_eq(ifd_image_prompt_gemma3(t, -1, N_SOFT, &ip), IFD_EINVAL);
    ifd_tokenizer_destroy(t);
}
END_TEST

/* One image in a chat turn: "\n\n" before <start_of_image> joins the text
 * before it, "\n\n" after <end_of_image> the text after it, exactly as the
 * processor's expanded string tokenizes. */
START_TEST(test_one_image)
{
    ifd_tokenizer_t *t = load();
    ifd_image_prompt_t ip;
    ck_assert_int_eq(ifd_image_prompt_gemma3(t, SOFT, N_SOFT, &ip), 0);
    const char *text = "<bos><start_of_turn>user\nDescribe <start_of_image> please<end_of_turn>\n";
    ifd_tokens_t out = {0};
    ck_assert_int_eq(ifd_tokens_push(&out, 7), 0); /* ids already there stay */
    ifd_image_pos_t sp[2];
    size_t n_sp = 0;
    ck_assert_int_eq(ifd_image_prompt_encode(t, &ip, text, strlen(text), IFD_TOK_PARSE_SPECIAL,
                                             NULL, 0, &out, sp, 2, &n_sp),
                     0);
    ck_assert_int_eq((int)n_sp, 1);
    ck_assert_int_eq(sp[0].len, N_SOFT);
    ck_assert_int_eq(out.ids[0], 7);
    const size_t a = (size_t)sp[0].start, b = a + N_SOFT;
    ck_assert_int_eq(out.ids[a - 1], BOI);
    for (size_t i = a; i < b; i++)
        ck_assert_int_eq(out.ids[i], SOFT);
    ck_assert_int_eq(out.ids[b], EOI);
    expect_ids(t, &out, 1, a - 1 - 1, "<bos><start_of_turn>user\nDescribe \n\n");
    expect_ids(t, &out, b + 1, out.n - b - 1, "\n\n please<end_of_turn>\n");
    /* "\n\n" is one Gemma token (108) on either side here */
    ck_assert_int_eq(out.ids[a - 2], 108);
    ck_assert_int_eq(out.ids[b + 1], 108);
    ifd_tokens_free(&out);
    ifd_tokenizer_destroy(t);
}
END_TEST

/* Two images back to back (the pan-and-scan crops' layout, here without
 * the words between): two spans, "\n\n\n\n" between them tokenized whole. */
START_TEST(test_adjacent_images)
{
    ifd_tokenizer_t *t = load();
    ifd_image_prompt_t ip;
    ck_assert_int_eq(ifd_image_prompt_gemma3(t, SOFT, 3, &ip), 0);
    const char *text = "A\n<start_of_image><start_of_image>B";
    ifd_tokens_t out = {0};
    ifd_image_pos_t sp[2];
    size_t n_sp = 0;
    ck_assert_int_eq(ifd_image_prompt_encode(t, &ip, text, strlen(text), IFD_TOK_PARSE_SPECIAL,
                                             NULL, 0, &out, sp, 2, &n_sp),
                     0);
    ck_assert_int_eq((int)n_sp, 2);
    ck_assert_int_eq(sp[0].len, 3);
    ck_assert_int_eq(sp[1].len, 3);
    const size_t a0 = (size_t)sp[0].start, a1 = (size_t)sp[1].start;
    expect_ids(t, &out, 0, a0 - 1, "A\n\n\n");
    ck_assert_int_eq(out.ids[a0 - 1], BOI);
    ck_assert_int_eq(out.ids[a0 + 3], EOI);
    expect_ids(t, &out, a0 + 4, a1 - 1 - (a0 + 4), "\n\n\n\n");
    ck_assert_int_eq(out.ids[a1 - 1], BOI);
    ck_assert_int_eq(out.ids[a1 + 3], EOI);
    expect_ids(t, &out, a1 + 4, out.n - a1 - 4, "\n\nB");
    ifd_tokens_free(&out);
    ifd_tokenizer_destroy(t);
}
END_TEST

/* A placeholder inside a plain span (user text that forges it) is text; a
 * plain span after a real placeholder is shifted with it, so the special
 * text in it stays text too. */
START_TEST(test_plain_spans)
{
    ifd_tokenizer_t *t = load();
    ifd_image_prompt_t ip;
    ck_assert_int_eq(ifd_image_prompt_gemma3(t, SOFT, 2, &ip), 0);
    const char *text = "<start_of_image>x<start_of_turn><start_of_image>";
    /*                  0               16               32 */
    const ifd_span_t plain[] = {{16, 32}};
    ifd_tokens_t out = {0}, ref = {0};
    ifd_image_pos_t sp[4];
    size_t n_sp = 0;
    ck_assert_int_eq(ifd_image_prompt_encode(t, &ip, text, strlen(text), IFD_TOK_PARSE_SPECIAL,
                                             plain, 1, &out, sp, 4, &n_sp),
                     0);
    ck_assert_int_eq((int)n_sp, 1); /* the first only */
    const char *want = "\n\n<start_of_image><end_of_image>\n\nx<start_of_turn><start_of_image>";
    const ifd_span_t wplain[] = {{16 + 18, 32}};
    ck_assert_int_eq(
        ifd_tokenizer_encode_spans(t, want, strlen(want), IFD_TOK_PARSE_SPECIAL, wplain, 1, &ref),
        0);
    ck_assert_int_eq((int)out.n, (int)ref.n + 2);
    const size_t a = (size_t)sp[0].start;
    ck_assert(memcmp(out.ids, ref.ids, a * sizeof *out.ids) == 0);
    ck_assert(memcmp(out.ids + a + 2, ref.ids + a, (ref.n - a) * sizeof *out.ids) == 0);
    for (size_t i = a + 2; i < out.n; i++)
        ck_assert(out.ids[i] != 105); /* no control token from the plain span */
    ifd_tokens_free(&out);
    ifd_tokens_free(&ref);
    ifd_tokenizer_destroy(t);
}
END_TEST

START_TEST(test_errors)
{
    ifd_tokenizer_t *t = load();
    ifd_image_prompt_t ip;
    ck_assert_int_eq(ifd_image_prompt_gemma3(t, SOFT, 4, &ip), 0);
    const char *text = "<start_of_image> and <start_of_image>";
    ifd_tokens_t out = {0};
    ck_assert_int_eq(ifd_tokens_push(&out, 2), 0);
    ifd_image_pos_t sp[2];
    size_t n_sp = 1; /* one span there already: room for one more only */
    ck_assert_int_eq(ifd_image_prompt_encode(t, &ip, text, strlen(text), IFD_TOK_PARSE_SPECIAL,
                                             NULL, 0, &out, sp, 2, &n_sp),
                     IFD_ERANGE);
    ck_assert_int_eq((int)out.n, 1);
    ck_assert_int_eq((int)n_sp, 1);
    const ifd_span_t bad[] = {{5, 3}, {6, 1}}; /* overlapping */
    ck_assert_int_eq(ifd_image_prompt_encode(t, &ip, text, strlen(text), IFD_TOK_PARSE_SPECIAL, bad,
                                             2, &out, sp, 2, &n_sp),
                     IFD_EINVAL);
    const ifd_span_t past[] = {{30, 100}};
    ck_assert_int_eq(ifd_image_prompt_encode(t, &ip, text, strlen(text), IFD_TOK_PARSE_SPECIAL,
                                             past, 1, &out, sp, 2, &n_sp),
                     IFD_EINVAL);
    /* without IFD_TOK_PARSE_SPECIAL nothing is special: no image */
    n_sp = 0;
    ck_assert_int_eq(
        ifd_image_prompt_encode(t, &ip, text, strlen(text), 0, NULL, 0, &out, sp, 2, &n_sp), 0);
    ck_assert_int_eq((int)n_sp, 0);
    ifd_tokens_free(&out);
    ifd_tokenizer_destroy(t);
}
END_TEST

int main(void)
{
    char path[1024], dir[1024];
    if (!ifd_test_model_path(path, sizeof path))
        ifd_test_skip("default model not found (run deploy/fetch-model.sh)");
    snprintf(dir, sizeof dir, "%s", path);
    snprintf(g_model, sizeof g_model, "%s/gemma-3-270m-q4_k_m.gguf", dirname(dir));
    FILE *f = fopen(g_model, "rb");
    if (!f)
        ifd_test_skip("%s not found (run deploy/fetch-model.sh gemma3)", g_model);
    fclose(f);
    Suite *s = suite_create("image_prompt");
    ifd_test_case(
        s, "gemma3", 120,
        IFD_TESTS(test_ids, test_one_image, test_adjacent_images, test_plain_spans, test_errors));
    return ifd_test_run(s);
}
