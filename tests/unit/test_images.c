/*
 * test_images.c — the router's image pieces (daemon/images.h), without a
 * vision worker: the limits from READY.vision and the config, the loop's
 * checks (no vision, too many images, URLs that are not data: URLs), the
 * decode job on the tiny model's PNGs (tests/data/tiny-gemma3-vision)
 * against common/image run directly (pictures, sizes, hashes, pan-and-scan
 * crops), each refusal a 400 naming the part and its reason (bad base64,
 * over max_image_bytes, not an image, over max_image_pixels, truncated,
 * corrupt, too many pictures), cancellation, and placing the pictures at
 * the prompt's spans.
 */
#include "testutil.h"

#include "daemon/images.h"
#include "error.h"
#include "hash.h"
#include "image/image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The vision of a tiny model: 112², 16 tokens, BILINEAR, pan-and-scan off. */
static ifd_wire_vision_t vision(void)
{
    return (ifd_wire_vision_t){.tokens_per_image = 16,
                               .boi_id = 509,
                               .eoi_id = 510,
                               .image_id = 511,
                               .height = 112,
                               .width = 112,
                               .resample = 2,
                               .pas_min_crop_size = 16,
                               .pas_max_num_crops = 4,
                               .pas_min_ratio = 1.2};
}

static ifd_config_t config(void)
{
    ifd_config_t c;
    memset(&c, 0, sizeof c);
    c.max_image_bytes = 20 << 20;
    c.max_image_pixels = 40000000;
    c.limit_images_per_prompt = 0;
    return c;
}

static void *read_file(const char *name, size_t *len)
{
    const char *root = getenv("INFERD_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/tiny-gemma3-vision/%s", root ? root : ".", name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s", path);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(*len);
    ck_assert_uint_eq(fread(p, 1, *len, f), *len);
    fclose(f);
    return p;
}

/* "data:image/png;base64," + base64 of p (malloc'd). */
static char *data_url(const void *p, size_t n)
{
    static const char k[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const uint8_t *b = p;
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

/* PNG's CRC-32 (ISO 3309) of n bytes. */
static uint32_t crc32(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    }
    return c ^ 0xffffffffu;
}

/* A request holding the given image URLs (all parts of message 0). */
static ifd_oai_request_t request(ifd_oai_image_t *im, char **urls, size_t n)
{
    static char params[8][64]; /* "messages[0].content[" + 20 digits + "]" */
    ifd_oai_request_t rq;
    memset(&rq, 0, sizeof rq);
    rq.kind = IFD_OAI_CHAT;
    rq.do_pan_and_scan = -1;
    for (size_t k = 0; k < n; k++) {
        snprintf(params[k], sizeof params[k], "messages[0].content[%zu]", k);
        im[k] = (ifd_oai_image_t){.message = 0,
                                  .part = (uint32_t)k,
                                  .url = urls[k],
                                  .url_len = strlen(urls[k]),
                                  .param = params[k]};
    }
    rq.images = im;
    rq.n_images = n;
    return rq;
}

START_TEST(test_setup_limits)
{
    ifd_config_t c = config();
    ifd_wire_vision_t v = vision();
    ifd_images_setup_t s;
    /* one frame: (32 MiB - 4 MiB) / picture, at most the wire's 64 */
    ck_assert_uint_eq(ifd_images_frame_fit(896, 896), 12);
    ck_assert_uint_eq(ifd_images_frame_fit(112, 112), IFD_WIRE_MAX_IMAGES);
    ck_assert_uint_eq(ifd_images_frame_fit(0, 896), 0);
    ifd_images_setup(&s, &v, &c);
    ck_assert_uint_eq(s.tokens_per_image, 16);
    ck_assert_uint_eq(s.max_images, IFD_WIRE_MAX_IMAGES);
    ck_assert_uint_eq(s.prep.height, 112);
    ck_assert_int_eq(s.prep.resample, IFD_RESAMPLE_BILINEAR);
    ck_assert_int_eq(s.ip.boi, 509);
    ck_assert_int_eq(s.ip.eoi, 510);
    ck_assert_int_eq(s.ip.soft, 511);
    ck_assert_int_eq(s.ip.n_soft, 16);
    c.limit_images_per_prompt = 3;
    ifd_images_setup(&s, &v, &c);
    ck_assert_uint_eq(s.max_images, 3);
    v.height = v.width = 896; /* the limit is capped by the frame */
    c.limit_images_per_prompt = 64;
    ifd_images_setup(&s, &v, &c);
    ck_assert_uint_eq(s.max_images, 12);
    ck_assert_uint_eq(s.max_pictures, 12);
    v.tokens_per_image = 0;
    ifd_images_setup(&s, &v, &c);
    ck_assert_uint_eq(s.tokens_per_image, 0);
}
END_TEST

START_TEST(test_check)
{
    ifd_config_t c = config();
    ifd_wire_vision_t v = vision();
    ifd_images_setup_t s;
    ifd_oai_image_t im[4];
    char *urls[] = {"data:image/png;base64,AAAA", "DATA:image/png;base64,AAAA",
                    "https://example.com/cat.png", "file:///etc/passwd"};
    ifd_oai_error_t e;
    ifd_oai_request_t rq = request(im, urls, 2);
    /* no vision: today's 400, each endpoint's */
    v.tokens_per_image = 0;
    ifd_images_setup(&s, &v, &c);
    memset(&e, 0, sizeof e);
    ck_assert_int_eq(ifd_images_check(&s, &rq, &e), IFD_EINVAL);
    ck_assert_int_eq(e.status, 400);
    ck_assert_str_eq(e.param, "messages[0].content[0].type");
    ck_assert_str_eq(e.code, "invalid_value");
    ck_assert_ptr_nonnull(strstr(e.message, "does not accept images"));
    im[0].param = "input[2].content[1]";
    memset(&e, 0, sizeof e);
    ck_assert_int_eq(ifd_images_check(&s, &rq, &e), IFD_EINVAL);
    ck_assert_str_eq(e.param, "input[2].content[1].type");
    ck_assert_str_eq(e.code, "unsupported_parameter");
    ck_assert_ptr_nonnull(strstr(e.message, "'input_image'"));
    rq = request(im, urls, 2);
    /* with vision: data URLs pass (any case of the scheme) */
    v = vision();
    ifd_images_setup(&s, &v, &c);
    ck_assert_int_eq(ifd_images_check(&s, &rq, &e), 0);
    /* prompt_logprobs: none over images (the engine refuses them) */
    rq.prompt_logprobs = true;
    memset(&e, 0, sizeof e);
    ck_assert_int_eq(ifd_images_check(&s, &rq, &e), IFD_EINVAL);
    ck_assert_str_eq(e.param, "prompt_logprobs");
    rq.prompt_logprobs = false;
    /* over limit_images_per_prompt: the first image over it is named */
    c.limit_images_per_prompt = 1;
    ifd_images_setup(&s, &v, &c);
    memset(&e, 0, sizeof e);
    ck_assert_int_eq(ifd_images_check(&s, &rq, &e), IFD_EINVAL);
    ck_assert_str_eq(e.param, "messages[0].content[1]");
    ck_assert_ptr_nonnull(strstr(e.message, "At most 1 image"));
    /* http(s) is not fetched; other schemes are not image URLs */
    c.limit_images_per_prompt = 0;
    ifd_images_setup(&s, &v, &c);
    rq = request(im, urls, 4);
    memset(&e, 0, sizeof e);
    ck_assert_int_eq(ifd_images_check(&s, &rq, &e), IFD_EINVAL);
    ck_assert_str_eq(e.param, "messages[0].content[2]");
    ck_assert_ptr_nonnull(strstr(e.message, "not fetched"));
    im[2].url = urls[3];
    im[2].url_len = strlen(urls[3]);
    memset(&e, 0, sizeof e);
    ck_assert_int_eq(ifd_images_check(&s, &rq, &e), IFD_EINVAL);
    ck_assert_str_eq(e.param, "messages[0].content[2]");
    ck_assert_ptr_nonnull(strstr(e.message, "data: URL"));
    /* none: nothing to check, whatever the model */
    rq.n_images = 0;
    v.tokens_per_image = 0;
    ifd_images_setup(&s, &v, &c);
    ck_assert_int_eq(ifd_images_check(&s, &rq, &e), 0);
}
END_TEST

/* The pictures common/image makes of file name with prep p: n, into *out. */
static uint8_t *reference(const char *name, const ifd_image_prep_t *p, uint32_t *n)
{
    size_t len;
    void *bytes = read_file(name, &len);
    ifd_image_t img;
    ck_assert_int_eq(ifd_image_decode(&img, bytes, len, NULL, NULL, 0), 0);
    *n = ifd_image_prep_count(p, &img);
    size_t sz = ifd_image_prep_floats(p, &img);
    uint8_t *out = malloc(sz);
    ck_assert_int_eq(ifd_image_prep_resize(out, sz, &img, p), 0);
    ifd_image_free(&img);
    free(bytes);
    return out;
}

START_TEST(test_decode)
{
    ifd_config_t c = config();
    ifd_wire_vision_t v = vision();
    ifd_images_setup_t s;
    ifd_images_setup(&s, &v, &c);
    size_t l0, l1;
    void *b0 = read_file("image0.png", &l0), *b1 = read_file("image1.png", &l1);
    char *urls[] = {data_url(b0, l0), data_url(b1, l1), data_url(b0, l0)};
    ifd_oai_image_t im[3];
    ifd_oai_request_t rq = request(im, urls, 3);
    ifd_oai_error_t e;
    ifd_images_t out;
    ck_assert_int_eq(ifd_images_decode(&out, &s, &rq, NULL, &e), 0);
    ck_assert_uint_eq(out.n_pics, 3);
    ck_assert_uint_eq(out.n_images, 3);
    const size_t pic = 112 * 112 * 3;
    const char *names[] = {"image0.png", "image1.png", "image0.png"};
    for (uint32_t k = 0; k < 3; k++) {
        ifd_wire_image_t *p = &out.pics[k];
        ck_assert_uint_eq(out.n_crops[k], 0);
        ck_assert_uint_eq(p->width, 112);
        ck_assert_uint_eq(p->height, 112);
        ck_assert_uint_eq(p->n_pixels, pic);
        uint32_t n;
        uint8_t *ref = reference(names[k], &s.prep, &n);
        ck_assert_uint_eq(n, 1);
        ck_assert(memcmp(p->pixels, ref, pic) == 0);
        uint64_t lo, hi;
        ifd_hash_bytes128(ref, pic, &lo, &hi);
        ck_assert(p->hash_lo == lo && p->hash_hi == hi);
        free(ref);
    }
    /* the same image hashes the same, another differently */
    ck_assert(out.pics[0].hash_lo == out.pics[2].hash_lo &&
              out.pics[0].hash_hi == out.pics[2].hash_hi);
    ck_assert(out.pics[0].hash_lo != out.pics[1].hash_lo ||
              out.pics[0].hash_hi != out.pics[1].hash_hi);
    ifd_images_free(&out);
    ck_assert_ptr_null(out.pics);
    ifd_images_free(&out); /* twice: a no-op */

    /* pan-and-scan, asked by the request: image1 (40×90, tall) is cropped */
    rq.do_pan_and_scan = 1;
    ck_assert_int_eq(ifd_images_decode(&out, &s, &rq, NULL, &e), 0);
    uint32_t n1;
    ifd_image_prep_t pp = s.prep;
    pp.do_pan_and_scan = 1;
    uint8_t *ref1 = reference("image1.png", &pp, &n1);
    ck_assert_uint_gt(n1, 1);
    uint32_t n0;
    uint8_t *ref0 = reference("image0.png", &pp, &n0);
    ck_assert_uint_eq(out.n_pics, 2 * n0 + n1);
    ck_assert_uint_eq(out.n_crops[1], n1 - 1);
    for (uint32_t j = 0; j < n1; j++)
        ck_assert(memcmp(out.pics[n0 + j].pixels, ref1 + j * pic, pic) == 0);
    free(ref0);
    free(ref1);
    ifd_images_free(&out);
    /* the model's own setting, turned off by the request */
    v.do_pan_and_scan = true;
    ifd_images_setup(&s, &v, &c);
    rq.do_pan_and_scan = 0;
    ck_assert_int_eq(ifd_images_decode(&out, &s, &rq, NULL, &e), 0);
    ck_assert_uint_eq(out.n_pics, 3);
    ifd_images_free(&out);

    /* a client that left: stopped before the first image */
    atomic_int cancel = 1;
    ck_assert_int_eq(ifd_images_decode(&out, &s, &rq, &cancel, &e), IFD_ECANCELED);
    ck_assert_ptr_null(out.pics);
    for (int k = 0; k < 3; k++)
        free(urls[k]);
    free(b0);
    free(b1);
}
END_TEST

/* One image's decode fails with a 400 naming part 1 and saying `why`. */
static void expect_400(const ifd_images_setup_t *s, char *bad, const char *why)
{
    size_t l0;
    void *b0 = read_file("image1.png", &l0); /* 40×90: passes every limit below */
    char *urls[] = {data_url(b0, l0), bad};
    ifd_oai_image_t im[2];
    ifd_oai_request_t rq = request(im, urls, 2);
    ifd_oai_error_t e;
    memset(&e, 0, sizeof e);
    ifd_images_t out;
    ck_assert_int_eq(ifd_images_decode(&out, s, &rq, NULL, &e), IFD_EINVAL);
    ck_assert_int_eq(e.status, 400);
    ck_assert_str_eq(e.param, "messages[0].content[1]");
    ck_assert_msg(strstr(e.message, why) != NULL, "'%s' lacks '%s'", e.message, why);
    ck_assert_ptr_null(out.pics); /* nothing kept: the first image's pictures freed */
    ck_assert_uint_eq(out.n_pics, 0);
    free(urls[0]);
    free(b0);
}

START_TEST(test_decode_errors)
{
    ifd_config_t c = config();
    ifd_wire_vision_t v = vision();
    ifd_images_setup_t s;
    ifd_images_setup(&s, &v, &c);
    size_t l0;
    uint8_t *b0 = read_file("image0.png", &l0);
    expect_400(&s, "data:image/png;base64,!!!!", "not a base64 data: URL");
    expect_400(&s, "data:image/png,rawbytes", "not a base64 data: URL");
    char *u = data_url("not an image at all", 19);
    expect_400(&s, u, "not an image");
    free(u);
    u = data_url(b0, l0 / 2);
    expect_400(&s, u, "truncated");
    free(u);
    uint8_t *bad = malloc(l0);
    memcpy(bad, b0, l0);
    for (size_t i = 40; i < l0 - 20; i += 7)
        bad[i] ^= 0x5a; /* the IDAT's bytes (CRCs broken) */
    u = data_url(bad, l0);
    expect_400(&s, u, "image");
    free(u);
    free(bad);
    u = data_url(b0, l0);
    ifd_images_setup_t t = s;
    t.max_bytes = 15000; /* image1 is 14438 bytes, image0 15657 */
    expect_400(&t, u, "max_image_bytes is 15000");
    /* a 60000² PNG header: refused before any pixel buffer */
    uint8_t bomb[64];
    memcpy(bomb, b0, sizeof bomb);
    bomb[16] = 0, bomb[17] = 0, bomb[18] = 0xea, bomb[19] = 0x60; /* IHDR width 60000 */
    bomb[20] = 0, bomb[21] = 0, bomb[22] = 0xea, bomb[23] = 0x60;
    uint32_t crc = crc32(bomb + 12, 17); /* "IHDR" and its 13 bytes */
    bomb[29] = (uint8_t)(crc >> 24), bomb[30] = (uint8_t)(crc >> 16);
    bomb[31] = (uint8_t)(crc >> 8), bomb[32] = (uint8_t)crc;
    char *ub = data_url(bomb, sizeof bomb);
    expect_400(&s, ub, "too big (max_image_pixels is 40000000)");
    /* max_image_pixels from the header: image0 (97×61) passes at its size, not one below */
    t = s;
    t.max_pixels = 97 * 61 - 1;
    char *u2 = data_url(b0, l0);
    expect_400(&t, u2, "max_image_pixels is 5916");
    free(u2);
    free(ub);
    /* more pictures than a frame holds */
    t = s;
    t.max_pictures = 1;
    expect_400(&t, u, "Too many pictures");
    free(u);
    free(b0);
}
END_TEST

START_TEST(test_place)
{
    ifd_config_t c = config();
    ifd_wire_vision_t v = vision();
    ifd_images_setup_t s;
    ifd_images_setup(&s, &v, &c);
    ifd_wire_image_t pics[2];
    memset(pics, 0, sizeof pics);
    ifd_images_t im = {.pics = pics, .n_pics = 2};
    ifd_image_pos_t spans[2] = {{5, 16}, {30, 16}};
    ck_assert_int_eq(ifd_images_place(&im, &s, spans, 1), IFD_EINVAL);
    ck_assert_int_eq(ifd_images_place(&im, &s, spans, 3), IFD_EINVAL);
    spans[1].len = 15;
    ck_assert_int_eq(ifd_images_place(&im, &s, spans, 2), IFD_EINVAL);
    spans[1].len = 16;
    ck_assert_int_eq(ifd_images_place(&im, &s, spans, 2), 0);
    ck_assert_uint_eq(pics[0].pos, 5);
    ck_assert_uint_eq(pics[0].n_tokens, 16);
    ck_assert_uint_eq(pics[1].pos, 30);
    ck_assert_uint_eq(pics[1].n_tokens, 16);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("images");
    ifd_test_case(
        s, "images", 60,
        IFD_TESTS(test_setup_limits, test_check, test_decode, test_decode_errors, test_place));
    return ifd_test_run(s);
}
