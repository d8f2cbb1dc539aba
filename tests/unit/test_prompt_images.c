/*
 * test_prompt_images.c — a chat request with images from its JSON to the
 * ADD's fields, as the gen job runs it (daemon/gen.c: ifd_images_decode,
 * ifd_prompt_chat with the images, ifd_images_place), with the Gemma 3 270M
 * tokenizer and its built-in gemma template (label model). The reference
 * is Gemma3Processor's text: the rendered prompt with each placeholder
 * expanded to "\n\n<start_of_image>" + soft tokens + "<end_of_image>\n\n",
 * tokenized piece by piece between the special tokens (equal to the whole:
 * test_image_prompt); pan-and-scan's wording; usage's prompt tokens
 * counting the images; truncation around images; a template that renders
 * no placeholder.
 */
#include "testutil.h"

#include "daemon/images.h"
#include "daemon/prompt.h"
#include "error.h"

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BOI = 255999, EOI = 256000, SOFT = 262144, N_SOFT = 16 };

static char g_model[1024];
static ifd_tokenizer_t *g_tok;
static ifd_chat_template_t *g_tpl;
static ifd_config_t g_cfg;
static ifd_api_t g_api;

static void setup(const char *jinja)
{
    char err[256];
    ck_assert_msg(ifd_tokenizer_create_gguf_file(&g_tok, g_model, err, sizeof err) == 0, "%s", err);
    ifd_chat_params_t p = ifd_chat_default_params();
    p.jinja = jinja;
    ck_assert_msg(ifd_chat_template_create(&g_tpl, g_tok, &p, err, sizeof err) == 0, "%s", err);
    memset(&g_cfg, 0, sizeof g_cfg);
    g_cfg.template_timeout = 2;
    g_cfg.max_image_bytes = 20 << 20;
    g_cfg.max_image_pixels = 40000000;
    memset(&g_api, 0, sizeof g_api);
    g_api.cfg = &g_cfg;
    g_api.tok = g_tok;
    g_api.tpl = g_tpl;
    g_api.max_model_len = 4096;
    g_api.vision = (ifd_wire_vision_t){.tokens_per_image = N_SOFT,
                                       .boi_id = BOI,
                                       .eoi_id = EOI,
                                       .image_id = SOFT,
                                       .height = 112,
                                       .width = 112,
                                       .resample = 2,
                                       .pas_min_crop_size = 16,
                                       .pas_max_num_crops = 4,
                                       .pas_min_ratio = 1.2};
}

static void teardown(void)
{
    ifd_chat_template_destroy(g_tpl);
    ifd_tokenizer_destroy(g_tok);
}

static char *data_url(const char *name)
{
    static const char k[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const char *root = getenv("INFERD_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/tiny-gemma3-vision/%s", root ? root : ".", name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s", path);
    uint8_t b[1 << 16];
    size_t n = fread(b, 1, sizeof b, f);
    fclose(f);
    char *s = malloc(32 + (n + 2) / 3 * 4), *o = s;
    o += sprintf(o, "data:image/png;base64,");
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)b[i] << 16 | (i + 1 < n ? (uint32_t)b[i + 1] << 8 : 0) |
                     (i + 2 < n ? b[i + 2] : 0);
        *o++ = k[v >> 18 & 63];
        *o++ = k[v >> 12 & 63];
        *o++ = i + 1 < n ? k[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? k[v & 63] : '=';
    }
    *o = '\0';
    return s;
}

/* What gen.c's job does for a chat request with images. rc as it returns. */
static int run(ifd_arena_t *a, const char *body, ifd_oai_request_t *rq, ifd_tokens_t *ids,
               ifd_images_t *im, ifd_oai_error_t *e)
{
    memset(e, 0, sizeof *e);
    ck_assert_int_eq(ifd_oai_parse_chat(a, body, strlen(body), rq, e), 0);
    ifd_images_setup_t s;
    ifd_images_setup(&s, &g_api.vision, &g_cfg);
    int rc = ifd_images_check(&s, rq, e);
    if (!rc)
        rc = ifd_images_decode(im, &s, rq, NULL, e);
    if (rc)
        return rc;
    ifd_image_pos_t spans[64];
    ifd_prompt_images_t pi = {
        .ip = &s.ip, .n_crops = im->n_crops, .spans = spans, .max = im->n_pics};
    rc = ifd_prompt_chat(&g_api, a, rq, NULL, ids, NULL, &pi, e);
    if (!rc)
        ck_assert_int_eq(ifd_images_place(im, &s, spans, pi.n), 0);
    return rc;
}

/* The processor's ids: pieces[0], an image, pieces[1], an image, … (each
 * image "\n\n" BOI soft… EOI "\n\n", the "\n\n" tokenized with the
 * pieces around it). */
static ifd_tokens_t reference(const char *const *pieces, size_t n)
{
    ifd_tokens_t v = {0};
    for (size_t i = 0; i < n; i++) {
        char text[512];
        snprintf(text, sizeof text, "%s%s%s", i ? "\n\n" : "", pieces[i], i + 1 < n ? "\n\n" : "");
        ck_assert_int_eq(ifd_tokenizer_encode(g_tok, text, strlen(text), IFD_TOK_PARSE_SPECIAL, &v),
                         0);
        if (i + 1 == n)
            break;
        ifd_tokens_push(&v, BOI);
        for (int k = 0; k < N_SOFT; k++)
            ifd_tokens_push(&v, SOFT);
        ifd_tokens_push(&v, EOI);
    }
    return v;
}

static void expect_ids(const ifd_tokens_t *got, const ifd_tokens_t *want)
{
    ck_assert_uint_eq(got->n, want->n);
    for (size_t i = 0; i < got->n; i++)
        ck_assert_msg(got->ids[i] == want->ids[i], "id %zu: %d, want %d", i, got->ids[i],
                      want->ids[i]);
}

/* Each picture sits on its soft tokens, between BOI and EOI. */
static void expect_placed(const ifd_tokens_t *ids, const ifd_images_t *im)
{
    uint32_t prev_end = 0;
    for (uint32_t k = 0; k < im->n_pics; k++) {
        const ifd_wire_image_t *p = &im->pics[k];
        ck_assert_uint_eq(p->n_tokens, N_SOFT);
        ck_assert_uint_ge(p->pos, prev_end + 1);
        ck_assert_int_eq(ids->ids[p->pos - 1], BOI);
        ck_assert_int_eq(ids->ids[p->pos + p->n_tokens], EOI);
        for (uint32_t j = 0; j < p->n_tokens; j++)
            ck_assert_int_eq(ids->ids[p->pos + j], SOFT);
        prev_end = p->pos + p->n_tokens;
    }
}

/* fmt (three %s) with u0, u1 and extra fields. */
static char *body_of(const char *fmt, const char *u0, const char *u1, const char *extra)
{
    size_t n = strlen(fmt) + strlen(u0) + strlen(u1) + strlen(extra) + 1;
    char *b = malloc(n);
    snprintf(b, n, fmt, u0, u1, extra);
    return b;
}

static const char k_two[] =
    "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\" Describe \"},"
    "{\"type\":\"image_url\",\"image_url\":{\"url\":\"%s\"}},{\"type\":\"text\",\"text\":\"and\"},"
    "{\"type\":\"image_url\",\"image_url\":{\"url\":\"%s\"}}]}]%s}";

START_TEST(test_two_images)
{
    setup(NULL); /* the 270M GGUF has no template: the built-in gemma family */
    char *u0 = data_url("image0.png"), *u1 = data_url("image1.png");
    char *body = body_of(k_two, u0, u1, "");
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_request_t rq;
    ifd_tokens_t ids = {0};
    ifd_images_t im;
    ifd_oai_error_t e;
    ck_assert_msg(run(&a, body, &rq, &ids, &im, &e) == 0, "%s", e.message);
    free(body);
    static const char *const pieces[] = {"<bos><start_of_turn>user\nDescribe", "and",
                                         "<end_of_turn>\n<start_of_turn>model\n"};
    ifd_tokens_t want = reference(pieces, 3);
    expect_ids(&ids, &want);
    ck_assert_uint_eq(im.n_pics, 2);
    expect_placed(&ids, &im);
    /* usage's prompt_tokens is the ids' count: the images' 2 × (16 + 2) included */
    ck_assert_uint_gt(ids.n, 2 * (N_SOFT + 2));
    ifd_tokens_free(&ids);
    ifd_images_free(&im);

    /* truncate_prompt_tokens: a cut before the first image moves the spans;
     * one reaching it is a 400 */
    char extra[64];
    snprintf(extra, sizeof extra, ",\"truncate_prompt_tokens\":%d", 2 * (N_SOFT + 2) + 4);
    body = body_of(k_two, u0, u1, extra);
    ck_assert_int_eq(run(&a, body, &rq, &ids, &im, &e), IFD_EINVAL);
    ck_assert_str_eq(e.param, "truncate_prompt_tokens");
    free(body);
    ifd_images_free(&im);
    ifd_tokens_free(&ids);
    snprintf(extra, sizeof extra, ",\"truncate_prompt_tokens\":%zu", want.n - 2);
    body = body_of(k_two, u0, u1, extra);
    ck_assert_msg(run(&a, body, &rq, &ids, &im, &e) == 0, "%s", e.message);
    ck_assert_uint_eq(ids.n, want.n - 2);
    ck_assert(memcmp(ids.ids, want.ids + 2, ids.n * sizeof *ids.ids) == 0);
    expect_placed(&ids, &im);
    free(body);
    ifd_tokens_free(&want);
    ifd_tokens_free(&ids);
    ifd_images_free(&im);
    free(u0);
    free(u1);
    ifd_arena_close(&a);
    teardown();
}
END_TEST

/* Pan-and-scan: image1 (40×90) gets crops, each its own placeholder, in
 * Gemma3Processor's wording. */
START_TEST(test_pan_and_scan)
{
    setup(NULL);
    char *u1 = data_url("image1.png");
    const char *fmt =
        "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":"
        "{\"url\":\"%s\"}},{\"type\":\"text\",\"text\":\"Tall?%s\"}]}],"
        "\"mm_processor_kwargs\":{\"do_pan_and_scan\":true}%s}";
    char *body = body_of(fmt, u1, "", "");
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_request_t rq;
    ifd_tokens_t ids = {0};
    ifd_images_t im;
    ifd_oai_error_t e;
    ck_assert_msg(run(&a, body, &rq, &ids, &im, &e) == 0, "%s", e.message);
    uint32_t crops = im.n_crops[0];
    ck_assert_uint_ge(crops, 2);
    ck_assert_uint_eq(im.n_pics, 1 + crops);
    const char *pieces[8];
    pieces[0] = "<bos><start_of_turn>user\nHere is the original image ";
    pieces[1] = " and here are some crops to help you see better ";
    for (uint32_t c = 1; c < crops; c++)
        pieces[1 + c] = " ";
    pieces[1 + crops] = "Tall?<end_of_turn>\n<start_of_turn>model\n";
    ifd_tokens_t want = reference(pieces, 2 + crops);
    expect_ids(&ids, &want);
    expect_placed(&ids, &im);
    ifd_tokens_free(&want);
    ifd_tokens_free(&ids);
    ifd_images_free(&im);
    free(body);
    free(u1);
    ifd_arena_close(&a);
    teardown();
}
END_TEST

/* A template that renders no placeholder for the images: a 400, nothing kept. */
START_TEST(test_template_without_images)
{
    setup("{% for m in messages %}{{ m.content if m.content is string else 'parts' }}"
          "{% endfor %}");
    char *u0 = data_url("image0.png");
    char *body = body_of(k_two, u0, u0, "");
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_request_t rq;
    ifd_tokens_t ids = {0};
    ifd_images_t im;
    ifd_oai_error_t e;
    ck_assert_int_eq(run(&a, body, &rq, &ids, &im, &e), IFD_EINVAL);
    ck_assert_int_eq(e.status, 400);
    ck_assert_ptr_nonnull(strstr(e.message, "rendered 0 image placeholder(s) for 2"));
    ck_assert_uint_eq(ids.n, 0);
    ifd_tokens_free(&ids);
    ifd_images_free(&im);
    free(body);
    free(u0);
    ifd_arena_close(&a);
    teardown();
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
    Suite *s = suite_create("prompt_images");
    ifd_test_case(s, "gemma3", 120,
                  IFD_TESTS(test_two_images, test_pan_and_scan, test_template_without_images));
    return ifd_test_run(s);
}
