/*
 * fuzz_chat.c — the chat-template renderer (common/chat/chat_template.h) and the
 * tokenization of its output. The first byte picks a built-in family, or a
 * Jinja template (the first part of the input, rendered by common/chat/jinja);
 * the rest is split at 0x1e into messages, each "role\x1fcontent".
 * Properties: no memory error; a template text is refused only with a
 * message and a parse/limit code; a render is refused only with IFD_EINVAL
 * (an inexpressible role, a template that raised, invalid UTF-8) or
 * IFD_ETOOBIG (a Jinja limit); a rendered prompt's content spans are sorted,
 * non-overlapping and inside the text; tokenizing it succeeds. Without the
 * default model it skips (exit 77).
 */
#include "fuzz.h"

#include "chat/chat_template.h"
#include "error.h"
#include "modelfile/model_config.h"
#include "tokenizer/tokenizer.h"

#include <limits.h>
#include <string.h>

static ifd_tokenizer_t *ifd__tok;
static const char *const ifd__families[] = {"chatml", "llama3",  "gemma",
                                            "llama2", "mistral", "phi3"};
#define IFD__N_FAM (sizeof ifd__families / sizeof ifd__families[0])

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    char path[PATH_MAX], err[512];
    ifd_default_model_path(path, sizeof path);
    if (ifd_tokenizer_create_gguf_file(&ifd__tok, path, err, sizeof err) != 0) {
        printf("SKIPPED: the default model's tokenizer: %s (run deploy/fetch-model.sh)\n", err);
        exit(77);
    }
    return 0;
}

#define IFD__MAX_MSGS 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2 || size > 8192)
        return 0;
    unsigned pick = data[0];
    bool gen = data[1] & 1;
    char *buf = malloc(size - 1);
    memcpy(buf, data + 2, size - 2);
    buf[size - 2] = '\0';
    /* split into parts at 0x1e; each part into role and content at 0x1f */
    char *parts[IFD__MAX_MSGS + 1];
    size_t np = 0;
    for (char *p = buf; np <= IFD__MAX_MSGS;) {
        parts[np++] = p;
        char *e = strchr(p, 0x1e);
        if (!e)
            break;
        *e = '\0';
        p = e + 1;
    }
    ifd_chat_params_t cp = ifd_chat_default_params();
    size_t first = 0;
    if (pick % (IFD__N_FAM + 1) < IFD__N_FAM) {
        cp.name = ifd__families[pick % (IFD__N_FAM + 1)];
    } else {
        cp.jinja = parts[0]; /* detect the family from a template text */
        first = 1;
    }
    char err[512];
    ifd_chat_template_t *tpl = NULL;
    int rc = ifd_chat_template_create(&tpl, ifd__tok, &cp, err, sizeof err);
    if (rc) { /* only a template text can be refused: unknown, or not parsing */
        IFD_FUZZ_CHECK(cp.jinja && err[0]);
        IFD_FUZZ_CHECK(rc == IFD_ENOTFOUND || rc == IFD_ENOTSUP || rc == IFD_EFORMAT ||
                       rc == IFD_ETOOBIG);
        free(buf);
        return 0;
    }
    ifd_chat_msg_t msgs[IFD__MAX_MSGS];
    size_t n = 0;
    for (size_t i = first; i < np && n < IFD__MAX_MSGS; i++) {
        char *sep = strchr(parts[i], 0x1f);
        if (sep) {
            *sep = '\0';
            msgs[n].role = parts[i];
            msgs[n].content = sep + 1;
        } else {
            static const char *const roles[] = {"system", "user", "assistant"};
            msgs[n].role = roles[n % 3];
            msgs[n].content = parts[i];
        }
        n++;
    }
    ifd_chat_prompt_t p;
    rc = ifd_chat_render(tpl, msgs, n, gen, &p);
    if (rc) { /* an inexpressible role, a template that raised, a Jinja limit */
        if (rc != IFD_EINVAL && rc != IFD_ETOOBIG)
            fprintf(stderr, "ifd_chat_render: %s\n", ifd_err_name(rc));
        IFD_FUZZ_CHECK(rc == IFD_EINVAL || rc == IFD_ETOOBIG);
    } else {
        IFD_FUZZ_CHECK(p.text && strlen(p.text) <= p.len);
        size_t prev = 0;
        for (size_t i = 0; i < p.n_content; i++) {
            IFD_FUZZ_CHECK(p.content[i].off >= prev);
            IFD_FUZZ_CHECK(p.content[i].off + p.content[i].len <= p.len);
            prev = p.content[i].off + p.content[i].len;
        }
        ifd_tokens_t ids = {0};
        IFD_FUZZ_CHECK(ifd_chat_tokenize(tpl, ifd__tok, &p, &ids) == 0);
        ifd_tokens_free(&ids);
        ifd_chat_prompt_free(&p);
    }
    ifd_chat_template_destroy(tpl);
    free(buf);
    return 0;
}
