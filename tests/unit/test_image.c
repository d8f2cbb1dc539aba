/*
 * test_image.c — common/image: sniffing, decoding of each format (made here
 * with the libraries' encoders), the limits checked from the header
 * (decompression bombs of each format), every truncation and many byte flips
 * of each format (an error or a picture, never a crash: this test runs in the
 * ASan+UBSan build too), resampling properties, preprocessing and its
 * config, data URLs, and the EXIF orientation (each of the eight against
 * the EXIF spec's wording; malformed blocks read as none). Exactness against Pillow and
 * transformers is test_image_vs_transformers' job.
 */
#include "testutil.h"

#include "error.h"
#include "image/dataurl.h"
#include "image/image.h"
#include "image/preprocess.h"
#include "image/resample.h"

#include <gif_lib.h>
#include <jpeglib.h>
#include <png.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <webp/encode.h>
#include <webp/mux.h>

/* ---- encoders (the libraries' own) ------------------------------------- */

typedef struct {
    uint8_t *d;
    size_t n;
} blob_t;

/* A w × h test pattern with `ch` channels (1 grey, 3 RGB, 4 RGBA). */
static uint8_t *pattern(uint32_t w, uint32_t h, int ch)
{
    uint8_t *p = malloc((size_t)w * h * ch);
    for (size_t i = 0; i < (size_t)w * h * ch; i++)
        p[i] = (uint8_t)(i * 37 + i / 7);
    return p;
}

static blob_t png_make(uint32_t w, uint32_t h, int ch)
{
    png_image im = {.version = PNG_IMAGE_VERSION, .width = w, .height = h};
    im.format = ch == 1 ? PNG_FORMAT_GRAY : ch == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_RGBA;
    uint8_t *px = pattern(w, h, ch);
    png_alloc_size_t n = 0;
    ck_assert(png_image_write_to_memory(&im, NULL, &n, 0, px, 0, NULL));
    blob_t b = {malloc(n), n};
    ck_assert(png_image_write_to_memory(&im, b.d, &n, 0, px, 0, NULL));
    free(px);
    return b;
}

static void png_write_mem(png_structp png, png_bytep d, png_size_t n)
{
    blob_t *b = png_get_io_ptr(png);
    b->d = realloc(b->d, b->n + n);
    memcpy(b->d + b->n, d, n);
    b->n += n;
}

static void png_flush_mem(png_structp png)
{
    (void)png;
}

/* An Adam7-interlaced RGB PNG of the pattern (the simplified writer cannot interlace). */
static blob_t png_make_interlaced(uint32_t w, uint32_t h)
{
    blob_t b = {NULL, 0};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    ck_assert(png && info);
    png_set_write_fn(png, &b, png_write_mem, png_flush_mem);
    png_set_IHDR(png, info, w, h, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_ADAM7,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    uint8_t *px = pattern(w, h, 3);
    png_bytep *rows = malloc(sizeof(png_bytep) * h);
    for (uint32_t y = 0; y < h; y++)
        rows[y] = px + (size_t)y * w * 3;
    png_set_rows(png, info, rows);
    png_write_png(png, info, PNG_TRANSFORM_IDENTITY, NULL);
    png_destroy_write_struct(&png, &info);
    free(rows);
    free(px);
    return b;
}

static blob_t jpeg_make(uint32_t w, uint32_t h, int ch, int progressive)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    unsigned long n = 0;
    unsigned char *out = NULL;
    jpeg_mem_dest(&c, &out, &n);
    c.image_width = w;
    c.image_height = h;
    c.input_components = ch;
    c.in_color_space = ch == 1 ? JCS_GRAYSCALE : ch == 3 ? JCS_RGB : JCS_CMYK;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 90, TRUE);
    if (progressive)
        jpeg_simple_progression(&c);
    jpeg_start_compress(&c, TRUE);
    uint8_t *px = pattern(w, h, ch);
    while (c.next_scanline < h) {
        JSAMPROW row = px + (size_t)c.next_scanline * w * ch;
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    free(px);
    blob_t b = {malloc(n), n};
    memcpy(b.d, out, n);
    free(out);
    return b;
}

static blob_t webp_make(uint32_t w, uint32_t h, int alpha, int lossless)
{
    uint8_t *px = pattern(w, h, alpha ? 4 : 3), *out = NULL;
    size_t n;
    if (alpha)
        n = lossless ? WebPEncodeLosslessRGBA(px, (int)w, (int)h, (int)w * 4, &out)
                     : WebPEncodeRGBA(px, (int)w, (int)h, (int)w * 4, 80, &out);
    else
        n = lossless ? WebPEncodeLosslessRGB(px, (int)w, (int)h, (int)w * 3, &out)
                     : WebPEncodeRGB(px, (int)w, (int)h, (int)w * 3, 80, &out);
    ck_assert_uint_gt(n, 0);
    free(px);
    blob_t b = {malloc(n), n};
    memcpy(b.d, out, n);
    WebPFree(out);
    return b;
}

static int gif_write(GifFileType *g, const GifByteType *d, int n)
{
    blob_t *b = g->UserData;
    b->d = realloc(b->d, b->n + (size_t)n);
    memcpy(b->d + b->n, d, (size_t)n);
    b->n += (size_t)n;
    return n;
}

/* A GIF of `frames` frames (index = (x + y + frame) % 16), transparent index 3 when trans. */
static blob_t gif_make(uint32_t w, uint32_t h, int frames, int trans, int interlace)
{
    blob_t b = {NULL, 0};
    int err;
    GifFileType *g = EGifOpen(&b, gif_write, &err);
    ck_assert_ptr_nonnull(g);
    GifColorType colors[16];
    for (int i = 0; i < 16; i++)
        colors[i] =
            (GifColorType){(GifByteType)(i * 16), (GifByteType)(255 - i * 8), (GifByteType)(i * 5)};
    ColorMapObject *map = GifMakeMapObject(16, colors);
    ck_assert_int_eq(EGifPutScreenDesc(g, (int)w, (int)h, 4, 0, map), GIF_OK);
    GifByteType *row = malloc(w);
    for (int f = 0; f < frames; f++) {
        if (trans) {
            GraphicsControlBlock gcb = {.TransparentColor = 3};
            GifByteType ext[4];
            size_t len = EGifGCBToExtension(&gcb, ext);
            ck_assert_int_eq(EGifPutExtension(g, GRAPHICS_EXT_FUNC_CODE, (int)len, ext), GIF_OK);
        }
        ck_assert_int_eq(EGifPutImageDesc(g, 0, 0, (int)w, (int)h, interlace, NULL), GIF_OK);
        /* an interlaced frame's rows go out in the four passes' order */
        static const uint32_t start[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
        for (int pass = 0; pass < (interlace ? 4 : 1); pass++)
            for (uint32_t y = interlace ? start[pass] : 0; y < h; y += interlace ? step[pass] : 1) {
                for (uint32_t x = 0; x < w; x++)
                    row[x] = (GifByteType)((x + y + (uint32_t)f) % 16);
                ck_assert_int_eq(EGifPutLine(g, row, (int)w), GIF_OK);
            }
    }
    free(row);
    GifFreeMapObject(map);
    ck_assert_int_eq(EGifCloseFile(g, &err), GIF_OK);
    return b;
}

static int decode(ifd_image_t *im, const blob_t *b, const ifd_image_limits_t *lim)
{
    char err[256];
    int rc = ifd_image_decode(im, b->d, b->n, lim, err, sizeof err);
    if (rc) {
        ck_assert_msg(err[0], "a refusal says why");
        ck_assert_ptr_null(im->rgb);
    }
    return rc;
}

/* ---- formats ------------------------------------------------------------ */

START_TEST(test_image_sniff)
{
    static const struct {
        const char *bytes;
        size_t n;
        ifd_image_format_t f;
    } cases[] = {
        {"\xff\xd8\xff\xe0", 4, IFD_IMAGE_JPEG},
        {"\x89PNG\r\n\x1a\n", 8, IFD_IMAGE_PNG},
        {"RIFF\0\0\0\0WEBPVP8 ", 16, IFD_IMAGE_WEBP},
        {"GIF89a", 6, IFD_IMAGE_GIF},
        {"GIF87a", 6, IFD_IMAGE_GIF},
        {"GIF88a", 6, IFD_IMAGE_UNKNOWN},
        {"\x89PNG\r\n\x1a", 7, IFD_IMAGE_UNKNOWN},
        {"RIFF\0\0\0\0WAVE", 12, IFD_IMAGE_UNKNOWN},
        {"<svg", 4, IFD_IMAGE_UNKNOWN},
        {"", 0, IFD_IMAGE_UNKNOWN},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_int_eq(ifd_image_sniff(cases[i].bytes, cases[i].n), cases[i].f);
    ck_assert_str_eq(ifd_image_format_name(IFD_IMAGE_WEBP), "webp");
    ifd_image_t im;
    char err[128];
    ck_assert_int_eq(ifd_image_decode(&im, "hello", 5, NULL, err, sizeof err), IFD_ENOTSUP);
    ck_assert_ptr_nonnull(strstr(err, "not an image"));
}
END_TEST

START_TEST(test_image_decode_formats)
{
    struct {
        blob_t b;
        ifd_image_format_t f;
        int exact; /* lossless: compare with the pattern */
        int ch;
    } cases[] = {
        {png_make(33, 17, 3), IFD_IMAGE_PNG, 1, 3},
        {png_make_interlaced(37, 29), IFD_IMAGE_PNG, 1, 3},
        {png_make(33, 17, 1), IFD_IMAGE_PNG, 1, 1},
        {png_make(33, 17, 4), IFD_IMAGE_PNG, 0, 4},
        {jpeg_make(40, 24, 3, 0), IFD_IMAGE_JPEG, 0, 3},
        {jpeg_make(40, 24, 3, 1), IFD_IMAGE_JPEG, 0, 3},
        {jpeg_make(40, 24, 1, 0), IFD_IMAGE_JPEG, 0, 1},
        {jpeg_make(40, 24, 4, 0), IFD_IMAGE_JPEG, 0, 4},
        {webp_make(31, 19, 0, 1), IFD_IMAGE_WEBP, 1, 3},
        {webp_make(31, 19, 0, 0), IFD_IMAGE_WEBP, 0, 3},
        {webp_make(31, 19, 1, 1), IFD_IMAGE_WEBP, 0, 4},
        {gif_make(21, 13, 1, 0, 0), IFD_IMAGE_GIF, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ifd_image_t im;
        ck_assert_int_eq(decode(&im, &cases[i].b, NULL), 0);
        ck_assert_int_eq(im.format, cases[i].f);
        ck_assert_ptr_nonnull(im.rgb);
        if (cases[i].exact) {
            uint8_t *px = pattern(im.width, im.height, cases[i].ch);
            for (size_t p = 0; p < (size_t)im.width * im.height; p++)
                for (int c = 0; c < 3; c++)
                    IFD_TASSERT_CMP(im.rgb[p * 3 + c], ==,
                                    px[p * cases[i].ch + (cases[i].ch == 1 ? 0 : c)]);
            free(px);
        }
        ifd_image_free(&im);
        free(cases[i].b.d);
    }
}
END_TEST

/* Transparency goes onto white; an opaque pixel is unchanged; Pillow's rounding in between. */
START_TEST(test_image_alpha_on_white)
{
    uint8_t px[4][4] = {{10, 20, 30, 0}, {10, 20, 30, 255}, {0, 0, 0, 128}, {200, 100, 0, 1}};
    png_image pim = {
        .version = PNG_IMAGE_VERSION, .width = 4, .height = 1, .format = PNG_FORMAT_RGBA};
    png_alloc_size_t n = 4096;
    blob_t b = {malloc(n), 0};
    ck_assert(png_image_write_to_memory(&pim, b.d, &n, 0, px, 0, NULL));
    b.n = n;
    ifd_image_t im;
    ck_assert_int_eq(decode(&im, &b, NULL), 0);
    static const uint8_t want[4][3] = {
        {255, 255, 255}, {10, 20, 30}, {127, 127, 127}, {255, 254, 254}};
    for (int i = 0; i < 4; i++)
        for (int c = 0; c < 3; c++)
            ck_assert_int_eq(im.rgb[i * 3 + c], want[i][c]);
    ifd_image_free(&im);
    free(b.d);
}
END_TEST

/* The first frame of an animation; a transparent index shows white. */
START_TEST(test_image_gif_first_frame)
{
    blob_t b = gif_make(16, 8, 3, 1, 1);
    ifd_image_t im;
    ck_assert_int_eq(decode(&im, &b, NULL), 0);
    ck_assert_int_eq(im.width, 16);
    for (uint32_t y = 0; y < 8; y++)
        for (uint32_t x = 0; x < 16; x++) {
            uint32_t i = (x + y) % 16;
            const uint8_t *p = im.rgb + (y * 16 + x) * 3;
            if (i == 3)
                ck_assert(p[0] == 255 && p[1] == 255 && p[2] == 255);
            else
                ck_assert(p[0] == i * 16 && p[1] == 255 - i * 8 && p[2] == i * 5);
        }
    ifd_image_free(&im);
    free(b.d);
}
END_TEST

/* ---- hostile input ------------------------------------------------------- */

static uint32_t crc32_png(const uint8_t *d, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= d[i];
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    }
    return c ^ 0xffffffffu;
}

static void be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8),
    p[3] = (uint8_t)v;
}

/* Headers that promise huge pictures are refused before any pixel is allocated. */
START_TEST(test_image_bombs)
{
    ifd_image_t im;
    /* PNG: IHDR says 60000 × 60000 (3.6 gigapixels) */
    blob_t png = png_make(8, 8, 3);
    be32(png.d + 16, 60000);
    be32(png.d + 20, 60000);
    be32(png.d + 29, crc32_png(png.d + 12, 17));
    ck_assert_int_eq(decode(&im, &png, NULL), IFD_ETOOBIG);
    /* JPEG: the SOF's height and width at 61440 (libjpeg itself stops at 65500) */
    blob_t jpg = jpeg_make(16, 16, 3, 0);
    for (size_t i = 0; i + 9 < jpg.n; i++)
        if (jpg.d[i] == 0xFF && (jpg.d[i + 1] == 0xC0 || jpg.d[i + 1] == 0xC2)) {
            memcpy(jpg.d + i + 5, "\xF0\x00\xF0\x00", 4);
            break;
        }
    ck_assert_int_eq(decode(&im, &jpg, NULL), IFD_ETOOBIG);
    /* GIF: a 65535 × 65535 logical screen */
    blob_t gif = gif_make(8, 8, 1, 0, 0);
    memset(gif.d + 6, 0xFF, 4);
    ck_assert_int_eq(decode(&im, &gif, NULL), IFD_ETOOBIG);
    /* WebP: an extended-format canvas of 16384 × 16384 around a small frame */
    blob_t webp = webp_make(8, 8, 0, 1);
    WebPMux *mux = WebPMuxNew();
    WebPData frame = {webp.d, webp.n}, out = {0};
    WebPMuxFrameInfo fi = {.bitstream = frame, .id = WEBP_CHUNK_ANMF, .duration = 10};
    ck_assert_int_eq(WebPMuxPushFrame(mux, &fi, 1), WEBP_MUX_OK);
    ck_assert_int_eq(WebPMuxSetCanvasSize(mux, 16384, 16384), WEBP_MUX_OK);
    WebPMuxAnimParams anim = {.bgcolor = 0, .loop_count = 0};
    ck_assert_int_eq(WebPMuxSetAnimationParams(mux, &anim), WEBP_MUX_OK);
    ck_assert_int_eq(WebPMuxAssemble(mux, &out), WEBP_MUX_OK);
    blob_t big = {(uint8_t *)out.bytes, out.size};
    ck_assert_int_eq(decode(&im, &big, NULL), IFD_ETOOBIG);
    /* a limit below the picture refuses a good file too */
    blob_t small = png_make(20, 20, 3);
    ifd_image_limits_t lim = ifd_image_default_limits();
    lim.max_pixels = 399;
    ck_assert_int_eq(decode(&im, &small, &lim), IFD_ETOOBIG);
    lim.max_pixels = 400;
    ck_assert_int_eq(decode(&im, &small, &lim), 0);
    ifd_image_free(&im);
    lim.max_side = 19;
    ck_assert_int_eq(decode(&im, &small, &lim), IFD_ETOOBIG);
    WebPDataClear(&out);
    WebPMuxDelete(mux);
    free(small.d);
    free(webp.d);
    free(gif.d);
    free(jpg.d);
    free(png.d);
}
END_TEST

/* A progressive JPEG with more scans than the limit is refused. */
START_TEST(test_image_jpeg_scans)
{
    blob_t jpg = jpeg_make(32, 32, 3, 1);
    ifd_image_limits_t lim = ifd_image_default_limits();
    ifd_image_t im;
    ck_assert_int_eq(decode(&im, &jpg, &lim), 0);
    ifd_image_free(&im);
    lim.max_scans = 2;
    ck_assert_int_eq(decode(&im, &jpg, &lim), IFD_ETOOBIG);
    free(jpg.d);
}
END_TEST

static void check_damage(blob_t *b, int want_trunc)
{
    ifd_image_t im;
    /* every truncation: an error (never a crash); short of the pixel data, a truncation */
    size_t step = b->n > 4000 ? b->n / 2000 : 1;
    for (size_t n = 0; n < b->n; n += step) {
        blob_t t = {malloc(n ? n : 1), n};
        memcpy(t.d, b->d, n);
        int rc = decode(&im, &t, NULL);
        if (rc == 0)
            ifd_image_free(&im);
        else
            IFD_CHECK(rc == IFD_ETRUNC || rc == IFD_EFORMAT || rc == IFD_ENOTSUP, "rc %d at %zu",
                      rc, n);
        if (want_trunc && n > 64 && n < b->n * 3 / 4)
            IFD_CHECK(rc == IFD_ETRUNC || rc == IFD_EFORMAT, "cut at %zu decoded", n);
        free(t.d);
    }
    /* byte flips: an error or a picture */
    uint8_t *d = malloc(b->n);
    for (size_t i = 0; i < b->n; i += step) {
        memcpy(d, b->d, b->n);
        d[i] ^= (uint8_t)(0x5a + i);
        blob_t t = {d, b->n};
        if (decode(&im, &t, NULL) == 0)
            ifd_image_free(&im);
    }
    free(d);
}

START_TEST(test_image_truncated_and_corrupt)
{
    blob_t cases[] = {png_make(40, 30, 4),     jpeg_make(40, 30, 3, 0), jpeg_make(40, 30, 3, 1),
                      webp_make(40, 30, 1, 0), webp_make(40, 30, 0, 1), gif_make(40, 30, 2, 1, 1)};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_damage(&cases[i], i < 2);
        free(cases[i].d);
    }
}
END_TEST

/* ---- resampling and preprocessing ---------------------------------------- */

START_TEST(test_image_resize_constant)
{
    static const uint32_t sizes[][4] = {
        {7, 5, 896, 896}, {896, 896, 896, 896}, {1000, 300, 896, 896}, {3, 1700, 64, 10},
        {1, 1, 5, 3},     {640, 480, 1, 1},     {64, 64, 64, 20},      {64, 64, 20, 64},
    };
    for (int f = IFD_RESAMPLE_LANCZOS; f <= IFD_RESAMPLE_HAMMING; f++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            uint32_t sw = sizes[s][0], sh = sizes[s][1], dw = sizes[s][2], dh = sizes[s][3];
            uint8_t *src = malloc((size_t)sw * sh * 3), *dst = malloc((size_t)dw * dh * 3);
            for (size_t i = 0; i < (size_t)sw * sh; i++)
                memcpy(src + i * 3, (uint8_t[]){7, 128, 250}, 3);
            ck_assert_int_eq(ifd_image_resize(dst, dw, dh, src, sw, sh, (size_t)sw * 3, f), 0);
            for (size_t i = 0; i < (size_t)dw * dh; i++)
                IFD_CHECK(dst[i * 3] == 7 && dst[i * 3 + 1] == 128 && dst[i * 3 + 2] == 250,
                          "filter %d %ux%u->%ux%u pixel %zu", f, sw, sh, dw, dh, i);
            free(src);
            free(dst);
        }
    uint8_t px[3] = {0};
    ck_assert_int_eq(ifd_image_resize(px, 1, 1, px, 1, 1, 3, IFD_RESAMPLE_NEAREST), IFD_ENOTSUP);
    ck_assert_int_eq(ifd_image_resize(px, 0, 1, px, 1, 1, 3, IFD_RESAMPLE_BILINEAR), IFD_EINVAL);
}
END_TEST

START_TEST(test_image_pan_and_scan_crops)
{
    ifd_image_prep_t p = ifd_image_prep_gemma3();
    ck_assert_uint_eq(ifd_image_prep_crops(&p, 1000, 300, NULL, 0), 0); /* off by default */
    p.do_pan_and_scan = 1;
    static const uint32_t cases[][3] = {
        {1000, 300, 3}, {300, 1000, 3}, {600, 300, 2},   {500, 300, 0},
        {896, 896, 0},  {5000, 300, 4}, {1100, 1000, 0}, {300, 200, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_uint_eq(ifd_image_prep_crops(&p, cases[i][0], cases[i][1], NULL, 0), cases[i][2]);
    p.pas_max_num_crops = 0; /* a hand-made config with no crops allowed: none, no division */
    ck_assert_uint_eq(ifd_image_prep_crops(&p, 1000, 300, NULL, 0), 0);
    p.pas_max_num_crops = 4;
    uint32_t boxes[4][4];
    ck_assert_uint_eq(ifd_image_prep_crops(&p, 1000, 300, boxes, 4), 3);
    static const uint32_t want[3][4] = {{0, 0, 334, 300}, {334, 0, 334, 300}, {668, 0, 332, 300}};
    ck_assert_mem_eq(boxes, want, sizeof want);
}
END_TEST

START_TEST(test_image_preprocess_constant)
{
    ifd_image_t im = {.width = 50, .height = 20, .rgb = malloc(50 * 20 * 3)};
    for (size_t i = 0; i < 50 * 20; i++)
        memcpy(im.rgb + i * 3, (uint8_t[]){0, 51, 255}, 3);
    ifd_image_prep_t p = ifd_image_prep_gemma3();
    p.height = 16;
    p.width = 24;
    size_t n = ifd_image_prep_floats(&p, &im);
    ck_assert_uint_eq(n, 3 * 16 * 24);
    float *out = malloc(n * sizeof(float));
    ck_assert_int_eq(ifd_image_preprocess(out, n - 1, &im, &p), IFD_ERANGE);
    ck_assert_int_eq(ifd_image_preprocess(out, n, &im, &p), 0);
    const float want[3] = {-1.0f, (float)(51 * 0.00392156862745098) * 2 - 1, 1.0f};
    for (int c = 0; c < 3; c++)
        for (size_t i = 0; i < 16 * 24; i++)
            IFD_CHECK(out[c * 16 * 24 + i] == want[c], "channel %d: %g", c,
                      (double)out[c * 16 * 24 + i]);
    free(out);
    ifd_image_free(&im);
}
END_TEST

/* The two halves (the resized u8 pictures, then normalization) give what the whole does. */
START_TEST(test_image_prep_halves)
{
    ifd_image_t im = {.width = 90, .height = 30, .rgb = pattern(90, 30, 3)};
    ifd_image_prep_t p = ifd_image_prep_gemma3();
    p.height = 12;
    p.width = 10;
    p.do_pan_and_scan = 1;
    p.pas_min_crop_size = 8;
    uint32_t count = ifd_image_prep_count(&p, &im);
    ck_assert_uint_eq(count, 4); /* 90 / 30 = 3 crops of 30 × 30, after the whole */
    size_t n = ifd_image_prep_floats(&p, &im);
    uint8_t *pics = malloc(n);
    float *whole = malloc(n * sizeof(float)), *halves = malloc(n * sizeof(float));
    ck_assert_int_eq(ifd_image_prep_resize(pics, n - 1, &im, &p), IFD_ERANGE);
    ck_assert_int_eq(ifd_image_prep_resize(pics, n, &im, &p), 0);
    ifd_image_prep_normalize(halves, pics, count, &p);
    ck_assert_int_eq(ifd_image_preprocess(whole, n, &im, &p), 0);
    ck_assert_mem_eq(whole, halves, n * sizeof(float));
    /* channel planes: picture k's channel c at [k][c] */
    size_t plane = 12 * 10;
    for (uint32_t k = 0; k < count; k++)
        for (int c = 0; c < 3; c++)
            for (size_t i = 0; i < plane; i++) {
                float v = (float)((double)pics[(k * plane + i) * 3 + c] * p.rescale_factor);
                IFD_TASSERT(halves[(k * 3 + c) * plane + i] == (v - 0.5f) / 0.5f);
            }
    free(whole);
    free(halves);
    free(pics);
    ifd_image_free(&im);
}
END_TEST

START_TEST(test_image_prep_config)
{
    static const char gemma[] =
        "{\"do_convert_rgb\": null, \"do_normalize\": true, \"do_pan_and_scan\": null,"
        " \"do_rescale\": true, \"do_resize\": true, \"image_mean\": [0.5, 0.5, 0.5],"
        " \"image_processor_type\": \"Gemma3ImageProcessor\", \"image_seq_length\": 256,"
        " \"image_std\": [0.5, 0.5, 0.5], \"pan_and_scan_max_num_crops\": 4,"
        " \"pan_and_scan_min_crop_size\": 256, \"pan_and_scan_min_ratio_to_activate\": 1.2,"
        " \"processor_class\": \"Gemma3Processor\", \"resample\": 2,"
        " \"rescale_factor\": 0.00392156862745098, \"size\": {\"height\": 896, \"width\": 896}}";
    ifd_image_prep_t p, g = ifd_image_prep_gemma3();
    char err[256];
    ck_assert_int_eq(ifd_image_prep_from_json(&p, gemma, strlen(gemma), err, sizeof err), 0);
    ck_assert(p.height == g.height && p.width == g.width && p.resample == g.resample &&
              p.rescale_factor == g.rescale_factor && p.mean[1] == g.mean[1] &&
              p.std[2] == g.std[2] && p.do_pan_and_scan == 0 && p.pas_min_crop_size == 256 &&
              p.pas_max_num_crops == 4 && p.pas_min_ratio == 1.2);
    static const struct {
        const char *json;
        int rc;
        const char *names;
    } bad[] = {
        {"{\"do_resize\": false}", IFD_ENOTSUP, "do_resize"},
        {"{\"size\": {\"shortest_edge\": 224}}", IFD_ENOTSUP, "size"},
        {"{\"size\": {\"height\": 0, \"width\": 3}}", IFD_EFORMAT, "height"},
        {"{\"resample\": 0}", IFD_ENOTSUP, "NEAREST"},
        {"{\"resample\": 9}", IFD_EFORMAT, "resample"},
        {"{\"image_mean\": [0.5, 0.5]}", IFD_EFORMAT, "image_mean"},
        {"{\"image_std\": \"x\"}", IFD_EFORMAT, "image_std"},
        {"{\"do_pan_and_scan\": 1}", IFD_EFORMAT, "do_pan_and_scan"},
        {"{\"pan_and_scan_max_num_crops\": 99}", IFD_ENOTSUP, "max_num_crops"},
        {"[1]", IFD_EFORMAT, "object"},
        {"{", IFD_EFORMAT, "object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        ck_assert_int_eq(
            ifd_image_prep_from_json(&p, bad[i].json, strlen(bad[i].json), err, sizeof err),
            bad[i].rc);
        ck_assert_msg(strstr(err, bad[i].names), "'%s' -> '%s'", bad[i].json, err);
    }
    static const char mean1[] = "{\"image_mean\": 0.25, \"do_pan_and_scan\": true}";
    ck_assert_int_eq(ifd_image_prep_from_json(&p, mean1, strlen(mean1), err, sizeof err), 0);
    ck_assert(p.mean[0] == 0.25 && p.mean[2] == 0.25 && p.do_pan_and_scan == 1);
}
END_TEST

/* ---- data URLs ------------------------------------------------------------- */

static char *b64(const uint8_t *d, size_t n, int pad)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = malloc(n / 3 * 4 + 8), *w = o;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v =
            (uint32_t)d[i] << 16 | (i + 1 < n ? d[i + 1] << 8 : 0) | (i + 2 < n ? d[i + 2] : 0);
        size_t k = n - i >= 3 ? 4 : n - i + 1;
        for (size_t j = 0; j < 4; j++)
            if (j < k)
                *w++ = a[(v >> (18 - 6 * j)) & 63];
            else if (pad)
                *w++ = '=';
    }
    *w = '\0';
    return o;
}

START_TEST(test_image_data_url)
{
    uint8_t bytes[100];
    for (int i = 0; i < 100; i++)
        bytes[i] = (uint8_t)(i * 73 + 5);
    char url[300], err[160];
    for (size_t n = 0; n <= 100; n++)
        for (int pad = 0; pad < 2; pad++) {
            char *e = b64(bytes, n, pad);
            snprintf(url, sizeof url, "data:image/jpeg;base64,%s", e);
            free(e);
            uint8_t *out;
            size_t len, ml;
            const char *mime;
            ck_assert_int_eq(
                ifd_image_data_url(url, strlen(url), 100, &out, &len, &mime, &ml, err, sizeof err),
                0);
            ck_assert_uint_eq(len, n);
            ck_assert_mem_eq(out, bytes, n);
            ck_assert_uint_eq(ml, 10);
            ck_assert(strncmp(mime, "image/jpeg", 10) == 0);
            free(out);
            if (n == 100) { /* one byte over the limit is refused before decoding */
                ck_assert_int_eq(ifd_image_data_url(url, strlen(url), 99, &out, &len, NULL, NULL,
                                                    err, sizeof err),
                                 IFD_ETOOBIG);
                ck_assert_ptr_null(out);
            }
        }
    static const struct {
        const char *url;
        const char *says;
    } bad[] = {
        {"http://example.com/a.png", "not a data URL"},
        {"data:image/png,rawbytes", "not base64"},
        {"data:image/png;base64", "not base64"},
        {"data:image/png;base64,iVBO R", "offset 26"},
        {"data:image/png;base64,iVB=RR", "offset 25"},
        {"data:image/png;base64,iVBOR", "bad length"},
        {"data:image/png;base64,====", "offset 22"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint8_t *out;
        size_t len;
        ck_assert_int_eq(ifd_image_data_url(bad[i].url, strlen(bad[i].url), 1000, &out, &len, NULL,
                                            NULL, err, sizeof err),
                         IFD_EFORMAT);
        ck_assert_msg(strstr(err, bad[i].says), "'%s' -> '%s'", bad[i].url, err);
    }
}
END_TEST

/* ---- EXIF orientation ---------------------------------------------------- */

/* The pattern PNG (w × h RGB) with an eXIf chunk holding `exif` (a TIFF block) after IHDR. */
static blob_t png_with_exif(uint32_t w, uint32_t h, const uint8_t *exif, size_t n)
{
    blob_t p = png_make(w, h, 3);
    const size_t at = 8 + 25; /* signature, IHDR */
    blob_t b = {malloc(p.n + n + 12), p.n + n + 12};
    memcpy(b.d, p.d, at);
    uint8_t *c = b.d + at;
    be32(c, (uint32_t)n);
    memcpy(c + 4, "eXIf", 4);
    memcpy(c + 8, exif, n);
    be32(c + 8 + n, crc32_png(c + 4, n + 4));
    memcpy(c + 12 + n, p.d + at, p.n - at);
    free(p.d);
    return b;
}

/* A little-endian TIFF block whose IFD0 holds one Orientation entry (type 3: SHORT). */
static size_t exif_block(uint8_t *e, int orientation)
{
    static const uint8_t head[] = {'I', 'I', 42, 0, 8, 0, 0, 0, 1, 0, 0x12, 0x01, 3, 0, 1, 0, 0, 0};
    memcpy(e, head, sizeof head);
    uint8_t tail[] = {(uint8_t)orientation, 0, 0, 0, 0, 0, 0, 0};
    memcpy(e + sizeof head, tail, sizeof tail);
    return sizeof head + sizeof tail;
}

/* Every orientation of the EXIF spec, as its own definition words it (where the stored
 * picture's row 0 and column 0 appear when displayed), on a picture whose pixels all differ:
 * each stored pixel lands where the tag says, and 5..8 swap the sides. */
START_TEST(test_image_exif_orientation)
{
    enum { W = 5, H = 3 };
    /* row 0 at: 0 top, 1 bottom, 2 left, 3 right; column 0 at: 0 left, 1 right, 2 top, 3 bottom */
    static const int row0[9] = {0, 0, 0, 1, 1, 2, 3, 3, 2}, col0[9] = {0, 0, 1, 1, 0, 2, 2, 3, 3};
    blob_t plain = png_make(W, H, 3);
    ifd_image_t ref;
    ck_assert_int_eq(decode(&ref, &plain, NULL), 0);
    ck_assert_uint_eq(ref.orientation, 1);
    for (int o = 1; o <= 8; o++) {
        uint8_t e[64];
        size_t n = exif_block(e, o);
        blob_t b = png_with_exif(W, H, e, n);
        ifd_image_t im;
        ck_assert_int_eq(decode(&im, &b, NULL), 0);
        ck_assert_uint_eq(im.orientation, o);
        const int swap = o >= 5;
        ck_assert_uint_eq(im.width, swap ? H : W);
        ck_assert_uint_eq(im.height, swap ? W : H);
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                int X, Y;
                if (!swap) {
                    Y = row0[o] == 0 ? y : H - 1 - y;
                    X = col0[o] == 0 ? x : W - 1 - x;
                } else {
                    X = row0[o] == 2 ? y : H - 1 - y;
                    Y = col0[o] == 2 ? x : W - 1 - x;
                }
                ck_assert_msg(memcmp(im.rgb + ((size_t)Y * im.width + X) * 3,
                                     ref.rgb + ((size_t)y * W + x) * 3, 3) == 0,
                              "orientation %d: stored (%d,%d) not at (%d,%d)", o, x, y, X, Y);
            }
        ifd_image_free(&im);
        free(b.d);
    }
    /* blocks that are no orientation, or that Pillow cannot read: the picture as stored */
    uint8_t e[64];
    size_t n = exif_block(e, 9);
    static const struct {
        int at, v;
    } breaks[] = {{-1, -1}, {0, 'X'}, {2, 43}, {4, 200}, {8, 0}, {12, 7}, {12, 0}};
    for (size_t k = 0; k < sizeof breaks / sizeof breaks[0]; k++) {
        n = exif_block(e, k == 0 ? 9 : 6);
        if (breaks[k].at >= 0)
            e[breaks[k].at] = (uint8_t)breaks[k].v; /* not TIFF, BigTIFF, IFD0 outside, no
                                                     * entries, UNDEFINED, no type */
        blob_t b = png_with_exif(W, H, e, n);
        ifd_image_t im;
        ck_assert_int_eq(decode(&im, &b, NULL), 0);
        ck_assert_msg(im.orientation == 1 && im.width == W &&
                          memcmp(im.rgb, ref.rgb, (size_t)W * H * 3) == 0,
                      "break %zu: orientation %u", k, im.orientation);
        ifd_image_free(&im);
        free(b.d);
    }
    /* every truncation of the block and a flip of each byte: a picture, never a crash */
    n = exif_block(e, 6);
    for (size_t cut = 0; cut <= n; cut++) {
        blob_t b = png_with_exif(W, H, e, cut);
        ifd_image_t im;
        ck_assert_int_eq(decode(&im, &b, NULL), 0);
        ck_assert_uint_eq(im.orientation, cut >= 22 ? 6 : 1); /* the entry ends at 22 */
        ifd_image_free(&im);
        free(b.d);
    }
    for (size_t i = 0; i < n; i++)
        for (int v = 0; v < 256; v += 51) {
            uint8_t f[64];
            memcpy(f, e, n);
            f[i] = (uint8_t)v;
            blob_t b = png_with_exif(W, H, f, n);
            ifd_image_t im;
            ck_assert_int_eq(decode(&im, &b, NULL), 0);
            ck_assert(im.orientation >= 1 && im.orientation <= 8);
            ifd_image_free(&im);
            free(b.d);
        }
    ifd_image_free(&ref);
    free(plain.d);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("image");
    ifd_test_case(s, "decode", 0,
                  IFD_TESTS(test_image_sniff, test_image_decode_formats, test_image_alpha_on_white,
                            test_image_gif_first_frame, test_image_exif_orientation));
    ifd_test_case(
        s, "hostile", 120,
        IFD_TESTS(test_image_bombs, test_image_jpeg_scans, test_image_truncated_and_corrupt));
    ifd_test_case(s, "prep", 60,
                  IFD_TESTS(test_image_resize_constant, test_image_pan_and_scan_crops,
                            test_image_preprocess_constant, test_image_prep_halves,
                            test_image_prep_config, test_image_data_url));
    return ifd_test_run(s);
}
