/*
 * tokcmd.c — `infer tokenize` / `infer detokenize` (see tokcmd.h). Thin: all
 * the work is in tokenizer.c and chat_template.c; this file parses options,
 * reads stdin and formats ids.
 */
#include "tokcmd.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat_template.h"
#include "error.h"
#include "tokenizer/tokenizer.h"

static char *read_all(FILE *f, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf)
        return NULL;
    for (;;) {
        if (n == cap) {
            char *p = realloc(buf, cap *= 2);
            if (!p) {
                free(buf);
                return NULL;
            }
            buf = p;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0)
            break;
    }
    if (ferror(f)) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* After a command's options: prints its usage (2) unless a vocabulary was
 * named and no operand is left, else loads that vocabulary into *t (1 when
 * it does not load). -1 to go on. */
static int load_tokenizer(const char *path, int argc, const char *usage, ifd_tokenizer_t **t)
{
    if (!path || optind != argc) {
        fputs(usage, stderr);
        return 2;
    }
    char err[512] = "";
    int rc = ifd_tokenizer_create_path(t, path, err, sizeof err);
    if (rc) {
        fprintf(stderr, "infer: %s\n", err[0] ? err : ifd_strerror(rc));
        return 1;
    }
    return -1;
}

static const char tok_usage[] =
    "Usage: infer tokenize (--vocab FILE.gguf | --model PATH) [options] < text\n\n"
    "Print the token ids of the UTF-8 text on stdin, separated by spaces.\n"
    "  --vocab FILE.gguf     vocabulary from a GGUF file (a model or a vocab-only file)\n"
    "  --model PATH          a GGUF file, or a Hugging Face directory / tokenizer.json\n"
    "  --test FILE.inp       llama.cpp vocab test cases: one line of ids per case\n"
    "                        (no BOS, no special-token parsing; the .out format)\n"
    "  --no-special          do not add BOS/EOS\n"
    "  --parse-special       match control-token text (e.g. <|im_start|>) in the input\n"
    "  --chat                treat stdin as one user message: apply the chat template\n"
    "  --chat-template NAME|FILE  template for --chat: a family (chatml, llama3, gemma,\n"
    "                        llama2, mistral, phi3) or a Jinja file; default: the model's\n";

int ifd_cli_tokcmd_tokenize(int argc, char **argv)
{
    static const struct option opts[] = {
        {"vocab", required_argument, NULL, 'v'},
        {"model", required_argument, NULL, 'm'},
        {"test", required_argument, NULL, 't'},
        {"no-special", no_argument, NULL, 'n'},
        {"parse-special", no_argument, NULL, 'p'},
        {"chat", no_argument, NULL, 'c'},
        {"chat-template", required_argument, NULL, 'T'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *path = NULL, *test = NULL, *tmpl = NULL;
    unsigned flags = IFD_TOK_ADD_SPECIAL;
    bool chat = false;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'v':
        case 'm':
            path = optarg;
            break;
        case 't':
            test = optarg;
            break;
        case 'n':
            flags &= ~IFD_TOK_ADD_SPECIAL;
            break;
        case 'p':
            flags |= IFD_TOK_PARSE_SPECIAL;
            break;
        case 'c':
            chat = true;
            break;
        case 'T':
            tmpl = optarg;
            break;
        case 'h':
            fputs(tok_usage, stdout);
            return 0;
        default:
            return 2;
        }
    }
    ifd_tokenizer_t *t;
    int status = load_tokenizer(path, argc, tok_usage, &t), rc = 0;
    if (status >= 0)
        return status;
    status = 1;
    char *text = NULL;
    size_t len = 0;
    ifd_tokens_t ids = {0};
    ifd_chat_template_t *ct = NULL;
    ifd_chat_prompt_t prompt = {0};
    if (test) {
        FILE *f = fopen(test, "rb");
        if (!f) {
            perror(test);
            goto out;
        }
        text = read_all(f, &len);
        fclose(f);
        if (!text) {
            fprintf(stderr, "infer: reading %s failed\n", test);
            goto out;
        }
        rc = ifd_tokenizer_run_vocab_test(t, text, len, stdout);
        status = rc ? 1 : 0;
        goto out;
    }
    text = read_all(stdin, &len);
    if (!text) {
        fprintf(stderr, "infer: reading stdin failed\n");
        goto out;
    }
    if (chat) {
        char err[512] = "";
        ifd_chat_params_t p = ifd_chat_default_params();
        p.name = tmpl;
        if ((rc = ifd_chat_template_create(&ct, t, &p, err, sizeof err))) {
            fprintf(stderr, "infer: %s\n", err[0] ? err : ifd_strerror(rc));
            goto out;
        }
        char *msg = realloc(text, len + 1);
        if (!msg)
            goto out;
        text = msg;
        text[len] = '\0';
        ifd_chat_msg_t m = {"user", text};
        if ((rc = ifd_chat_render(ct, &m, 1, true, &prompt)) ||
            (rc = ifd_chat_tokenize(ct, t, &prompt, &ids)))
            goto fail;
    } else if ((rc = ifd_tokenizer_encode(t, text, len, flags, &ids))) {
        goto fail;
    }
    for (size_t i = 0; i < ids.n; i++)
        printf(i ? " %d" : "%d", ids.ids[i]);
    putchar('\n');
    status = 0;
    goto out;
fail:
    fprintf(stderr, "infer: tokenize: %s\n", ifd_strerror(rc));
out:
    ifd_chat_prompt_free(&prompt);
    ifd_chat_template_destroy(ct);
    ifd_tokens_free(&ids);
    free(text);
    ifd_tokenizer_destroy(t);
    return status;
}

static const char detok_usage[] =
    "Usage: infer detokenize (--vocab FILE.gguf | --model PATH) [--render-special] < ids\n\n"
    "Read token ids separated by whitespace on stdin and write the decoded text.\n"
    "  --render-special      print control tokens' text (e.g. <|im_end|>)\n";

int ifd_cli_tokcmd_detokenize(int argc, char **argv)
{
    static const struct option opts[] = {
        {"vocab", required_argument, NULL, 'v'},
        {"model", required_argument, NULL, 'm'},
        {"render-special", no_argument, NULL, 'r'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *path = NULL;
    unsigned flags = 0;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'v':
        case 'm':
            path = optarg;
            break;
        case 'r':
            flags |= IFD_DETOK_RENDER_SPECIAL;
            break;
        case 'h':
            fputs(detok_usage, stdout);
            return 0;
        default:
            return 2;
        }
    }
    ifd_tokenizer_t *t;
    int status = load_tokenizer(path, argc, detok_usage, &t);
    if (status >= 0)
        return status;
    status = 1;
    ifd_tokens_t ids = {0};
    char *out = NULL;
    size_t len = 0;
    char *in = read_all(stdin, &len);
    if (!in) {
        fprintf(stderr, "infer: reading stdin failed\n");
        goto out;
    }
    char *p = in, *end = in + len;
    while (p < end) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == ','))
            p++;
        if (p == end)
            break;
        char *e;
        long v = strtol(p, &e, 10);
        if (e == p || v < 0 || v >= ifd_tokenizer_n_vocab(t)) {
            fprintf(stderr,
                    "infer: detokenize: '%.20s' is not a token id of this vocabulary "
                    "(0..%d)\n",
                    p, ifd_tokenizer_n_vocab(t) - 1);
            goto out;
        }
        if (ifd_tokens_push(&ids, (ifd_token_t)v))
            goto out;
        p = e;
    }
    int rc = ifd_tokenizer_decode(t, ids.ids, ids.n, flags | IFD_DETOK_KEEP_BOS, &out, &len);
    if (rc) {
        fprintf(stderr, "infer: detokenize: %s\n", ifd_strerror(rc));
        goto out;
    }
    fwrite(out, 1, len, stdout);
    status = 0;
out:
    free(out);
    free(in);
    ifd_tokens_free(&ids);
    ifd_tokenizer_destroy(t);
    return status;
}
