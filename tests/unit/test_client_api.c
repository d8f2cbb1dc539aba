/*
 * test_client_api.c — the CLI's OpenAI layer (client/api.h): request bodies
 * carry exactly the fields that were set; the reader, fed a chat stream and
 * a completions stream split at every byte, delivers the text, counts the
 * content-bearing chunks (role-only and usage-only chunks apart), takes the
 * finish reason and usage, stops at [DONE], records an error event, and
 * parses non-streamed bodies; error messages are extracted from OpenAI,
 * plain and non-JSON error bodies; `--image` / `/image` files become data
 * URL parts that decode back to the file (a non-image or missing file is
 * refused with the reason), and user messages carry them before the text.
 */
#include "testutil.h"

#include "client/api.h"
#include "error.h"
#include "image/dataurl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

START_TEST(test_bodies)
{
    ifd_cli_api_params_t p = ifd_cli_api_default_params();
    json_t *msgs = json_pack("[{s:s,s:s}]", "role", "user", "content", "hi");
    char *s = ifd_cli_api_chat_body(&p, msgs);
    json_t *o = json_loads(s, 0, NULL);
    ck_assert(json_is_true(json_object_get(o, "stream")));
    ck_assert(json_is_true(json_object_get(json_object_get(o, "stream_options"), "include_usage")));
    ck_assert_int_eq(json_object_size(o), 3); /* stream, stream_options, messages */
    json_decref(o);
    free(s);

    p.model = "m";
    p.max_tokens = 7;
    p.temperature = 0;
    p.top_p = 0.5;
    p.has_seed = true;
    p.seed = -3;
    p.stream = false;
    p.ignore_eos = true;
    p.use_cache = 0;
    s = ifd_cli_api_chat_body(&p, msgs);
    o = json_loads(s, 0, NULL);
    ck_assert_str_eq(json_string_value(json_object_get(o, "model")), "m");
    ck_assert_int_eq(json_integer_value(json_object_get(o, "max_completion_tokens")), 7);
    ck_assert(json_real_value(json_object_get(o, "temperature")) == 0.0);
    ck_assert(json_real_value(json_object_get(o, "top_p")) == 0.5);
    ck_assert_int_eq(json_integer_value(json_object_get(o, "seed")), -3);
    ck_assert(json_is_false(json_object_get(o, "stream")));
    ck_assert_ptr_null(json_object_get(o, "stream_options"));
    ck_assert(json_is_true(json_object_get(o, "ignore_eos")));
    ck_assert(json_is_false(json_object_get(o, "use_cache")));
    json_decref(o);
    free(s);
    json_decref(msgs);

    int32_t toks[] = {5, 6, 7};
    s = ifd_cli_api_completion_body(&p, NULL, toks, 3);
    o = json_loads(s, 0, NULL);
    ck_assert_int_eq(json_integer_value(json_object_get(o, "max_tokens")), 7);
    ck_assert_int_eq(json_array_size(json_object_get(o, "prompt")), 3);
    ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(o, "prompt"), 2)), 7);
    json_decref(o);
    free(s);
    s = ifd_cli_api_completion_body(&p, "text", NULL, 0);
    ck_assert_ptr_nonnull(strstr(s, "\"prompt\":\"text\""));
    free(s);
}
END_TEST

typedef struct {
    ifd_buf_t text;
    int chunks, with_text;
} seen_t;

static int on_text(void *ud, const char *t, size_t n)
{
    return ifd_buf_append(&((seen_t *)ud)->text, t, n);
}

static void on_chunk(void *ud, bool has_text)
{
    seen_t *s = ud;
    s->chunks++;
    s->with_text += has_text;
}

static const char chat_stream[] =
    ": ping\n\n"
    "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,"
    "\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}],\"usage\":null}"
    "\n\n"
    "data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"},"
    "\"finish_reason\":null}],\"usage\":null}\r\n\r\n"
    "data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo \\u00fc\"},"
    "\"finish_reason\":\"length\"}],\"usage\":null}\n\n"
    "data: {\"id\":\"chatcmpl-1\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,"
    "\"completion_tokens\":2,\"total_tokens\":11,\"prompt_tokens_details\":{\"cached_tokens\":4}}}"
    "\n\n"
    "data: [DONE]\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"after\"}}]}\n\n";

START_TEST(test_chat_stream)
{
    size_t len = strlen(chat_stream);
    for (size_t step = 1; step <= len; step = step < 8 ? step + 1 : step * 3) {
        seen_t s = {0};
        ifd_cli_api_reader_t r;
        ifd_cli_api_reader_init(&r, on_text, on_chunk, &s);
        for (size_t i = 0; i < len; i += step)
            ck_assert_int_eq(
                ifd_cli_api_reader_feed(&r, true, chat_stream + i, len - i < step ? len - i : step),
                0);
        ck_assert_int_eq(ifd_cli_api_reader_finish(&r), 0);
        ck_assert(r.done);
        ck_assert_str_eq(s.text.data, "Hello \xc3\xbc");
        ck_assert_int_eq(s.chunks, 3);
        ck_assert_int_eq(s.with_text, 2);
        ck_assert_uint_eq(r.n_chunks, 3);
        ck_assert_str_eq(r.finish_reason, "length");
        ck_assert(r.has_usage);
        ck_assert_int_eq(r.usage.prompt_tokens, 9);
        ck_assert_int_eq(r.usage.completion_tokens, 2);
        ck_assert_int_eq(r.usage.cached_tokens, 4);
        ck_assert_str_eq(r.id, "chatcmpl-1");
        ck_assert_str_eq(r.error, "");
        ifd_cli_api_reader_close(&r);
        ifd_buf_free(&s.text);
    }
}
END_TEST

START_TEST(test_completion_and_errors)
{
    const char *st = "data: {\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":null}]}\n\n"
                     "data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":null}]}\n\n"
                     "data: {\"error\":{\"message\":\"worker died\",\"type\":\"server_error\"}}\n\n"
                     "data: [DONE]\n\n";
    seen_t s = {0};
    ifd_cli_api_reader_t r;
    ifd_cli_api_reader_init(&r, on_text, on_chunk, &s);
    ck_assert_int_eq(ifd_cli_api_reader_feed(&r, true, st, strlen(st)), 0);
    ck_assert_str_eq(s.text.data, "a");
    ck_assert_int_eq(s.chunks, 2); /* an empty text still counts (vLLM) */
    ck_assert_int_eq(s.with_text, 1);
    ck_assert_str_eq(r.error, "worker died");
    ck_assert(r.done);
    ifd_cli_api_reader_close(&r);
    ifd_buf_free(&s.text);

    /* not JSON inside the stream */
    ifd_cli_api_reader_init(&r, NULL, NULL, NULL);
    ck_assert_int_eq(ifd_cli_api_reader_feed(&r, true, "data: {oops\n\n", 13), IFD_EFORMAT);
    ifd_cli_api_reader_close(&r);

    /* a whole object */
    const char *body = "{\"id\":\"x\",\"object\":\"chat.completion\",\"choices\":[{\"index\":0,"
                       "\"message\":{\"role\":\"assistant\",\"content\":\"whole\"},"
                       "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":1,"
                       "\"completion_tokens\":1,\"total_tokens\":2}}";
    memset(&s, 0, sizeof(s));
    ifd_cli_api_reader_init(&r, on_text, on_chunk, &s);
    r.keep_response = true;
    ck_assert_int_eq(ifd_cli_api_reader_feed(&r, false, body, 10), 0);
    ck_assert_int_eq(ifd_cli_api_reader_feed(&r, false, body + 10, strlen(body) - 10), 0);
    ck_assert_int_eq(ifd_cli_api_reader_finish(&r), 0);
    ck_assert_str_eq(s.text.data, "whole");
    ck_assert_str_eq(r.finish_reason, "stop");
    ck_assert_ptr_nonnull(r.response);
    ck_assert_int_eq(r.usage.completion_tokens, 1);
    ifd_cli_api_reader_close(&r);
    ifd_buf_free(&s.text);

    char msg[64];
    const char *e1 = "{\"error\":{\"message\":\"bad temperature\",\"param\":\"temperature\"}}";
    ifd_cli_api_error_message(e1, strlen(e1), msg, sizeof(msg));
    ck_assert_str_eq(msg, "bad temperature");
    ifd_cli_api_error_message("{\"error\":\"plain\"}", 17, msg, sizeof(msg));
    ck_assert_str_eq(msg, "plain");
    ifd_cli_api_error_message("Bad Gateway\r\nmore", 17, msg, sizeof(msg));
    ck_assert_str_eq(msg, "Bad Gateway");
    ifd_cli_api_error_message(NULL, 0, msg, sizeof(msg));
    ck_assert_str_eq(msg, "");
}
END_TEST

START_TEST(test_image_parts)
{
    const char *root = getenv("INFERD_SOURCE_DIR");
    char path[1024], err[512] = "";
    snprintf(path, sizeof path, "%s/tests/data/tiny-gemma3-vision/image0.png", root ? root : ".");
    json_t *part = ifd_cli_api_image_part(path, err, sizeof err);
    ck_assert_msg(part != NULL, "%s", err);
    ck_assert_str_eq(json_string_value(json_object_get(part, "type")), "image_url");
    const char *url = json_string_value(json_object_get(json_object_get(part, "image_url"), "url"));
    ck_assert_ptr_nonnull(url);
    ck_assert(strncmp(url, "data:image/png;base64,", 22) == 0);
    /* the URL decodes back to the file's bytes */
    uint8_t *bytes;
    size_t n, mlen;
    const char *mime;
    ck_assert_int_eq(
        ifd_image_data_url(url, strlen(url), 1 << 20, &bytes, &n, &mime, &mlen, err, sizeof err),
        0);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    uint8_t *file = malloc(n + 1);
    ck_assert_uint_eq(fread(file, 1, n + 1, f), n);
    fclose(f);
    ck_assert(memcmp(file, bytes, n) == 0);
    free(file);
    free(bytes);
    /* a user message: the images, then the text; none: a plain string */
    json_t *imgs = json_pack("[O]", part);
    json_t *m = ifd_cli_api_user_message("What?", imgs);
    ck_assert_str_eq(json_string_value(json_object_get(m, "role")), "user");
    json_t *c = json_object_get(m, "content");
    ck_assert_uint_eq(json_array_size(c), 2);
    ck_assert(json_equal(json_array_get(c, 0), part));
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(c, 1), "text")), "What?");
    json_decref(m);
    json_array_clear(imgs);
    m = ifd_cli_api_user_message("Hi", imgs);
    ck_assert_str_eq(json_string_value(json_object_get(m, "content")), "Hi");
    json_decref(m);
    json_decref(imgs);
    json_decref(part);
    /* refusals say why */
    snprintf(path, sizeof path, "%s/tests/data/tiny-gemma3-vision/config.json", root ? root : ".");
    ck_assert_ptr_null(ifd_cli_api_image_part(path, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "not an image"));
    ck_assert_ptr_null(ifd_cli_api_image_part("/nonexistent/cat.png", err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "No such file"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("client_api");
    ifd_test_case(
        s, "api", 0,
        IFD_TESTS(test_bodies, test_chat_stream, test_completion_and_errors, test_image_parts));
    return ifd_test_run(s);
}
