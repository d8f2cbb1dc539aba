/*
 * fuzz_openai.c — OpenAI/vLLM request decoding (proto/openai.h): the body
 * of POST /v1/chat/completions, /v1/completions, /tokenize, /detokenize or
 * /v1/responses (chosen by the first byte) parsed into its request struct, then its
 * structured-output work done (ifd_oai_build_grammar, 1 s budget). Properties: no
 * memory error; a refusal is a 400 (or a 500 for memory) with a message;
 * an accepted request has the fields the daemon relies on in range.
 */
#include "fuzz.h"

#include "arena.h"
#include "error.h"
#include "proto/openai.h"
#include "proto/responses.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    int which = data[0] % 5;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_error_t e;
    memset(&e, 0, sizeof e);
    int rc;
    if (which < 2 || which == 4) {
        ifd_oai_request_t r;
        rc = which == 0   ? ifd_oai_parse_chat(&a, body, len, &r, &e)
             : which == 4 ? ifd_responses_parse(&a, body, len, &r, &e)
                          : ifd_oai_parse_completion(&a, body, len, &r, &e);
        if (rc == 0 && which == 4)
            IFD_FUZZ_CHECK(r.n == 1 && r.responses_echo && r.n_messages >= 1);
        /* the structured-output work the daemon does off its loop, within a
         * budget that libFuzzer's -timeout would catch it exceeding */
        ifd_grammar_budget_t b = ifd_grammar_default_budget();
        b.max_time_ms = 1000;
        if (rc == 0)
            rc = ifd_oai_build_grammar(&a, &r, &b, NULL, &e);
        if (rc == 0 && r.so_kind)
            IFD_FUZZ_CHECK(r.grammar != NULL);
        if (rc == 0) {
            IFD_FUZZ_CHECK(r.n >= 1 && r.n <= IFD_OAI_MAX_N);
            IFD_FUZZ_CHECK(r.n_stop <= IFD_OAI_MAX_STOP);
            for (size_t i = 0; i < r.n_stop; i++) /* non-empty; "\u0000" may lead */
                IFD_FUZZ_CHECK(r.stop[i] && r.stop_len[i] > 0 && !r.stop[i][r.stop_len[i]]);
            for (size_t i = 0; i < r.n_messages; i++) /* contents whole, NUL-terminated */
                IFD_FUZZ_CHECK(r.messages[i].content &&
                               !r.messages[i].content[r.messages[i].content_len]);
            /* image parts: in range, each naming its part, its message keeping its parts */
            IFD_FUZZ_CHECK(r.n_images <= IFD_OAI_MAX_IMAGES);
            for (size_t k = 0; k < r.n_images; k++) {
                const ifd_oai_image_t *im = &r.images[k];
                IFD_FUZZ_CHECK(im->url && !im->url[im->url_len] && im->param);
                IFD_FUZZ_CHECK(im->message < r.n_messages && r.messages[im->message].parts_json);
                IFD_FUZZ_CHECK(
                    k == 0 || im->message > r.images[k - 1].message ||
                    (im->message == r.images[k - 1].message && im->part > r.images[k - 1].part));
            }
        }
    } else if (which == 2) {
        ifd_oai_tokenize_t t;
        rc = ifd_oai_parse_tokenize(&a, body, len, &t, &e);
        if (rc == 0)
            IFD_FUZZ_CHECK((t.prompt != NULL) != (t.messages != NULL));
    } else {
        ifd_oai_detokenize_t d;
        rc = ifd_oai_parse_detokenize(&a, body, len, &d, &e);
        if (rc == 0)
            IFD_FUZZ_CHECK(d.n_tokens == 0 || d.tokens != NULL);
    }
    if (rc != 0) {
        IFD_FUZZ_CHECK(rc == IFD_EINVAL || rc == IFD_ENOMEM);
        IFD_FUZZ_CHECK(e.status == 400 || e.status == 404 || e.status == 500);
        IFD_FUZZ_CHECK(memchr(e.message, '\0', sizeof e.message) != NULL && e.message[0]);
    }
    ifd_arena_close(&a);
    return 0;
}
