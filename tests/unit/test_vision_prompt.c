/*
 * test_vision_prompt.c — the tiny Gemma 3 vision model's tokenizer and chat
 * prompts (tests/data/tiny-gemma3-vision, made by
 * tools/make_tiny_gemma3_vision.py) against transformers, with no torch:
 * chat_refs.json holds the chats and the tokenizer's ids for a few texts,
 * refs2.safetensors the input_ids and token_type_ids that Gemma3Processor's
 * apply_chat_template(tokenize=True, add_generation_prompt=True) gave.
 *
 *   - the directory's tokenizer.json (Gemma 3's kind: SentencePiece-style
 *     BPE, " " → "▁", byte fallback, user-defined newline runs) loads with
 *     the special ids the config names, and encodes the recorded texts to
 *     transformers' ids (special text parsed), and back;
 *   - each chat renders through the directory's chat_template.jinja (Gemma 3's,
 *     image parts → <start_of_image>) with common/chat/jinja to transformers'
 *     text, and ifd_image_prompt_encode gives exactly the processor's
 *     input_ids, its image spans the runs of token_type_ids == 1;
 *   - each chat also through the chat request API, with the directory's
 *     template and with the built-in gemma family (ifd_chat_tokenize too
 *     for chats without images): transformers' text and ids, image parts
 *     included.
 */
#include "testutil.h"

#include "chat/chat_template.h"
#include "chat/image_prompt.h"
#include "chat/jinja/jinja.h"
#include "error.h"
#include "modelfile/safetensors.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { VOCAB = 512, BOI = 509, EOI = 510, SOFT = 511, N_SOFT = 16, BOS = 2, EOS = 1, EOT = 6 };

static char tiny_dir[4096];

static const char *tiny(const char *file, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", tiny_dir, file);
    return buf;
}

static ifd_tokenizer_t *load_tok(void)
{
    ifd_tokenizer_t *t = NULL;
    char err[512];
    ck_assert_msg(ifd_tokenizer_create_hf(&t, tiny_dir, err, sizeof err) == 0, "%s", err);
    return t;
}

static json_t *load_refs_json(void)
{
    char p[4200];
    json_error_t e;
    json_t *j = json_load_file(tiny("chat_refs.json", p, sizeof p), 0, &e);
    ck_assert_msg(j != NULL, "%s:%d: %s", p, e.line, e.text);
    return j;
}

/* An int32 reference of refs2.safetensors; its length in *n. */
static const int32_t *ref_ids(const ifd_safetensors_t *st, const char *chat, const char *what,
                              size_t *n)
{
    char name[128];
    snprintf(name, sizeof name, "%s_%s", chat, what);
    const ifd_st_tensor_t *t = ifd_safetensors_find(st, name);
    ck_assert_msg(t && strcmp(t->dtype, "I32") == 0, "refs2: %s", name);
    *n = (size_t)t->n_elems;
    return t->data;
}

static void expect_ids(const ifd_tokens_t *got, const int32_t *want, size_t n, const char *what)
{
    size_t i = 0;
    while (i < got->n && i < n && got->ids[i] == want[i])
        i++;
    ck_assert_msg(i == n && got->n == n,
                  "%s: %zu ids, want %zu; first difference at %zu (%d vs %d)", what, got->n, n, i,
                  i < got->n ? got->ids[i] : -1, i < n ? want[i] : -1);
}

/* The image spans token_type_ids gives: runs of 1s, each N_SOFT long. */
static void expect_spans(const ifd_image_pos_t *sp, size_t n_sp, const int32_t *tt, size_t n,
                         const char *what)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (tt[i] != 1 || (i > 0 && tt[i - 1] == 1))
            continue;
        ck_assert_msg(k < n_sp, "%s: more images than spans", what);
        ck_assert_int_eq(sp[k].start, (int)i);
        ck_assert_int_eq(sp[k].len, N_SOFT);
        for (size_t j = i; j < i + N_SOFT; j++)
            ck_assert_int_eq(tt[j], 1);
        k++;
    }
    ck_assert_msg(k == n_sp, "%s: %zu spans, %zu images", what, n_sp, k);
}

START_TEST(test_tokenizer)
{
    ifd_tokenizer_t *t = load_tok();
    ck_assert_int_eq(ifd_tokenizer_n_vocab(t), VOCAB);
    ck_assert_int_eq(ifd_tokenizer_model(t), IFD_TOKMODEL_SPM);
    ck_assert_int_eq(ifd_tokenizer_bos(t), BOS);
    ck_assert_int_eq(ifd_tokenizer_eos(t), EOS);
    ck_assert_int_eq(ifd_tokenizer_pad(t), 0);
    ck_assert_int_eq(ifd_tokenizer_unk(t), 3);
    ck_assert(ifd_tokenizer_add_bos(t));
    ck_assert(ifd_tokenizer_is_eog(t, EOS));
    ck_assert(ifd_tokenizer_is_eog(t, EOT));
    ck_assert_int_eq(ifd_tokenizer_find(t, "<start_of_turn>", 15), 5);
    ck_assert_int_eq(ifd_tokenizer_find(t, "<image_soft_token>", 18), SOFT);
    ck_assert_ptr_nonnull(ifd_tokenizer_chat_template(t));
    ifd_image_prompt_t ip;
    ck_assert_int_eq(ifd_image_prompt_gemma3(t, SOFT, N_SOFT, &ip), 0);
    ck_assert_int_eq(ip.boi, BOI);
    ck_assert_int_eq(ip.eoi, EOI);

    json_t *doc = load_refs_json();
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(doc, "tokenize"), i, c)
    {
        const char *text = json_string_value(json_object_get(c, "text"));
        const json_t *want = json_object_get(c, "ids");
        ck_assert(text && json_is_array(want));
        ifd_tokens_t got = {0};
        ck_assert_int_eq(ifd_tokenizer_encode(t, text, strlen(text), IFD_TOK_PARSE_SPECIAL, &got),
                         0);
        ck_assert_msg(got.n == json_array_size(want), "\"%s\": %zu ids, want %zu", text, got.n,
                      json_array_size(want));
        for (size_t k = 0; k < got.n; k++)
            ck_assert_msg(got.ids[k] == json_integer_value(json_array_get(want, k)),
                          "\"%s\": id %zu is %d", text, k, got.ids[k]);
        char *back = NULL;
        size_t len = 0;
        ck_assert_int_eq(
            ifd_tokenizer_decode(t, got.ids, got.n, IFD_DETOK_RENDER_SPECIAL, &back, &len), 0);
        ck_assert_str_eq(back, text);
        free(back);
        ifd_tokens_free(&got);
    }
    ck_assert_int_ge((int)i, 5);
    json_decref(doc);
    ifd_tokenizer_destroy(t);
}
END_TEST

/* The chat rendered by the template itself, with the context transformers
 * gives it (messages, add_generation_prompt, the special tokens' text). */
static char *render_jinja(const ifd_tokenizer_t *t, const json_t *msgs, size_t *len)
{
    const char *src = ifd_tokenizer_chat_template(t);
    ifd_jinja_t *tpl = NULL;
    char err[512];
    ck_assert_msg(ifd_jinja_parse(&tpl, src, strlen(src), err, sizeof err) == 0, "%s", err);
    json_t *ctx =
        json_pack("{sOsbssssssss}", "messages", msgs, "add_generation_prompt", 1, "bos_token",
                  "<bos>", "eos_token", "<eos>", "unk_token", "<unk>", "pad_token", "<pad>");
    char *out = NULL;
    ck_assert_msg(ifd_jinja_render(tpl, ctx, NULL, &out, len, err, sizeof err) == 0, "%s", err);
    json_decref(ctx);
    ifd_jinja_destroy(tpl);
    return out;
}

/* Tokenizes a rendered chat as the router does: special text parsed outside
 * the plain spans, no BOS added (the template writes it), each
 * <start_of_image> expanded; checks the ids and spans against the refs. */
static void expect_prompt(const ifd_tokenizer_t *t, const ifd_safetensors_t *st, const char *name,
                          const char *text, size_t len, const ifd_span_t *plain, size_t n_plain,
                          const char *how)
{
    ifd_image_prompt_t ip;
    ck_assert_int_eq(ifd_image_prompt_gemma3(t, SOFT, N_SOFT, &ip), 0);
    ifd_tokens_t ids = {0};
    ifd_image_pos_t sp[8];
    size_t n_sp = 0, n, n_tt;
    ck_assert_int_eq(ifd_image_prompt_encode(t, &ip, text, len, IFD_TOK_PARSE_SPECIAL, plain,
                                             n_plain, &ids, sp, 8, &n_sp),
                     0);
    char what[128];
    snprintf(what, sizeof what, "%s (%s)", name, how);
    const int32_t *want = ref_ids(st, name, "input_ids", &n);
    const int32_t *tt = ref_ids(st, name, "token_type_ids", &n_tt);
    ck_assert_uint_eq(n, n_tt);
    expect_ids(&ids, want, n, what);
    expect_spans(sp, n_sp, tt, n, what);
    printf("%s: %zu ids, %zu images as the processor's\n", what, n, n_sp);
    ifd_tokens_free(&ids);
}

/* One chat through the chat request API with template tpl (how: its name
 * in messages): transformers' text and ids, image parts included. */
static void expect_request(const ifd_chat_template_t *tpl, const ifd_tokenizer_t *t,
                           const ifd_safetensors_t *st, const char *name, const json_t *chat,
                           const char *how)
{
    const char *want = json_string_value(json_object_get(chat, "prompt"));
    bool images = json_array_size(json_object_get(chat, "images")) > 0;
    ifd_chat_request_t req = {.messages = json_object_get(chat, "messages"),
                              .add_generation_prompt = true};
    ifd_chat_prompt_t pr;
    char err[512];
    int rc = ifd_chat_render_request(tpl, &req, &pr, err, sizeof err);
    ck_assert_msg(rc == 0, "%s (%s): %s", name, how, err);
    ck_assert_str_eq(pr.text, want);
    expect_prompt(t, st, name, pr.text, pr.len, pr.content, pr.n_content, how);
    if (!images) { /* no image: what ifd_chat_tokenize gives is the same */
        ifd_tokens_t ids = {0};
        size_t n;
        const int32_t *w = ref_ids(st, name, "input_ids", &n);
        ck_assert_int_eq(ifd_chat_tokenize(tpl, t, &pr, &ids), 0);
        expect_ids(&ids, w, n, name);
        ifd_tokens_free(&ids);
    }
    ifd_chat_prompt_free(&pr);
}

START_TEST(test_chats)
{
    ifd_tokenizer_t *t = load_tok();
    ifd_chat_template_t *own = NULL, *family = NULL;
    char err[512], p[4200];
    ifd_chat_params_t cp = ifd_chat_default_params();
    ck_assert_msg(ifd_chat_template_create(&own, t, &cp, err, sizeof err) == 0, "%s", err);
    ck_assert_ptr_nonnull(ifd_chat_template_source(own)); /* the model's own template */
    cp.name = "gemma";
    ck_assert_msg(ifd_chat_template_create(&family, t, &cp, err, sizeof err) == 0, "%s", err);
    ck_assert_ptr_null(ifd_chat_template_source(family)); /* the built-in family */
    ifd_safetensors_t *st = NULL;
    ck_assert_msg(
        ifd_safetensors_open(&st, tiny("refs2.safetensors", p, sizeof p), err, sizeof err) == 0,
        "%s", err);
    json_t *doc = load_refs_json();
    const char *name;
    json_t *chat;
    int n_chats = 0, n_images = 0;
    json_object_foreach(json_object_get(doc, "chats"), name, chat)
    {
        const json_t *msgs = json_object_get(chat, "messages");
        const char *want = json_string_value(json_object_get(chat, "prompt"));
        ck_assert(json_is_array(msgs) && want);
        size_t len;
        char *text = render_jinja(t, msgs, &len);
        ck_assert_str_eq(text, want);
        expect_prompt(t, st, name, text, len, NULL, 0, "template");
        free(text);
        expect_request(own, t, st, name, chat, "request");
        expect_request(family, t, st, name, chat, "built-in gemma");
        n_images += json_array_size(json_object_get(chat, "images")) > 0;
        n_chats++;
    }
    ck_assert_int_ge(n_chats, 4);
    ck_assert_int_ge(n_images, 3);
    json_decref(doc);
    ifd_safetensors_close(st);
    ifd_chat_template_destroy(family);
    ifd_chat_template_destroy(own);
    ifd_tokenizer_destroy(t);
}
END_TEST

int main(void)
{
    const char *root = getenv("INFERD_SOURCE_DIR");
    snprintf(tiny_dir, sizeof tiny_dir, "%s/tests/data/tiny-gemma3-vision", root ? root : ".");
    struct stat sb;
    if (stat(tiny_dir, &sb) != 0)
        ifd_test_skip("%s is missing", tiny_dir);
    Suite *s = suite_create("vision_prompt");
    ifd_test_case(s, "tiny", 60, IFD_TESTS(test_tokenizer, test_chats));
    return ifd_test_run(s);
}
