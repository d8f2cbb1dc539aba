/*
 * prompt.c — `infer "PROMPT"`: one request, the answer streamed to stdout
 * (see prompt.h).
 *
 * The answer always ends with a newline on stdout (added when the model's
 * text does not end with one), so shell pipelines see whole lines. With
 * --json the response is not streamed: the whole response object is
 * printed as the daemon sent it (pretty-printed).
 */
#include "prompt.h"

#include "api.h"
#include "cli.h"
#include "error.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum {
    OPT_RAW = IFD_CLI_OPT_FIRST_FREE,
    OPT_JSON,
    OPT_NO_STREAM,
    OPT_STATS,
    OPT_IMAGE,
};

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: infer [prompt] [options] PROMPT...\n"
            "       infer [prompt] [options] -          (the prompt from stdin)\n"
            "\n"
            "Send one prompt to inferd and stream the answer to stdout as it is generated.\n"
            "The words of PROMPT are joined with spaces; without PROMPT and with stdin not a\n"
            "terminal, stdin is the prompt. The prompt goes through the model's chat template\n"
            "as one user message (with --raw: as plain text to /v1/completions).\n"
            "\n"
            "  -s, --system TEXT       a system message before the prompt\n"
            "      --image FILE        an image the prompt is about (JPEG, PNG, WebP, GIF;\n"
            "                          repeatable), sent as a data URL before the text: the\n"
            "                          model must take images (Gemma 3 with its vision tower)\n"
            "      --raw               complete the text as given, no chat template\n"
            "      --json              print the whole response object (not streamed)\n"
            "      --no-stream         wait for the whole answer, then print it\n"
            "      --stats             after the answer, print tokens, time and speed to\n"
            "                          stderr\n"
            "  -h, --help              this help\n"
            "\n"
            "%s\n%s\n"
            "Examples:\n"
            "  infer \"Explain paged attention in one paragraph.\"\n"
            "  git diff | infer --system \"Review this patch.\" -\n"
            "  infer --raw -n 20 -t 0 \"The capital of France is\"\n"
            "  infer --image cat.jpg \"What is in this picture?\"\n"
            "\n"
            "Exit status: 0 ok, 2 usage, 3 daemon unreachable, 4 request rejected, 5 daemon\n"
            "error, 130 interrupted (see docs/cli.md).\n",
            ifd_cli_sampling_help, ifd_cli_conn_help);
}

/* Reads all of stdin into b. 0 or -1 (message printed). */
static int read_stdin(ifd_buf_t *b)
{
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), stdin)) > 0)
        if (ifd_buf_append(b, buf, n) < 0)
            return -1;
    if (ferror(stdin)) {
        fprintf(stderr, "infer: reading stdin failed\n");
        return -1;
    }
    if (ifd_buf_append(b, "", 0) < 0)
        return -1;
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int ifd_cli_prompt_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"system", required_argument, NULL, 's'},
        {"raw", no_argument, NULL, OPT_RAW},
        {"json", no_argument, NULL, OPT_JSON},
        {"no-stream", no_argument, NULL, OPT_NO_STREAM},
        {"stats", no_argument, NULL, OPT_STATS},
        {"image", required_argument, NULL, OPT_IMAGE},
        {"help", no_argument, NULL, 'h'},
        IFD_CLI_SAMPLING_LONGOPTS,
        IFD_CLI_CONN_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    ifd_cli_api_params_t p = ifd_cli_api_default_params();
    ifd_cli_conn_t co;
    ifd_cli_conn_defaults(&co);
    const char *system = NULL;
    bool raw = false, json = false, stats = false;
    json_t *images = json_array();
    char err[512];
    int c;
    while ((c = ifd_cli_getopt(argc, argv, "s:h" IFD_CLI_SAMPLING_SHORTOPTS, opts, &co, &p)) >= 0) {
        switch (c) {
        case 's':
            system = optarg;
            break;
        case OPT_RAW:
            raw = true;
            break;
        case OPT_JSON:
            json = true;
            p.stream = false;
            break;
        case OPT_NO_STREAM:
            p.stream = false;
            break;
        case OPT_STATS:
            stats = true;
            break;
        case OPT_IMAGE: {
            json_t *part = ifd_cli_api_image_part(optarg, err, sizeof err);
            if (!part) {
                fprintf(stderr, "infer: %s\n", err);
                json_decref(images);
                return IFD_CLI_EXIT_FAIL;
            }
            json_array_append_new(images, part);
            break;
        }
        case 'h':
            usage(stdout);
            json_decref(images);
            return IFD_CLI_EXIT_OK;
        default:
            json_decref(images);
            return ifd_cli_usage_hint("prompt");
        }
    }
    if (c == IFD_CLI_OPT_BAD) {
        json_decref(images);
        return IFD_CLI_EXIT_USAGE;
    }
    if (raw && json_array_size(images)) {
        fprintf(stderr, "infer: --image needs the chat template (not --raw)\n");
        json_decref(images);
        return IFD_CLI_EXIT_USAGE;
    }
    /* getopt moved the prompt's words to the end; "--" protects words starting with "-". */
    ifd_buf_t text = IFD_BUF_INIT;
    int code = IFD_CLI_EXIT_FAIL;
    bool from_stdin = false;
    for (int i = optind; i < argc; i++) {
        if (strcmp(argv[i], "-") == 0 && argc - optind == 1) {
            from_stdin = true;
            break;
        }
        if (text.len && ifd_buf_append(&text, " ", 1) < 0)
            goto out;
        if (ifd_buf_puts(&text, argv[i]) < 0)
            goto out;
    }
    if (optind == argc) {
        if (isatty(STDIN_FILENO)) {
            fprintf(stderr, "infer: no prompt given (try 'infer prompt --help', or 'infer chat' "
                            "to talk)\n");
            code = IFD_CLI_EXIT_USAGE;
            goto out;
        }
        from_stdin = true;
    }
    if (from_stdin && read_stdin(&text) < 0)
        goto out;
    if (!text.data && ifd_buf_append(&text, "", 0) < 0)
        goto out;

    ifd_cli_http_target_t t;
    if ((code = ifd_cli_target(&co, &t)) != 0)
        goto out;

    char *body = NULL;
    const char *path;
    if (raw) {
        if (system)
            fprintf(stderr, "infer: --system is ignored with --raw (no chat template)\n");
        body = ifd_cli_api_completion_body(&p, text.data, NULL, 0);
        path = "/v1/completions";
    } else {
        json_t *msgs = json_array();
        if (system)
            json_array_append_new(msgs,
                                  json_pack("{s:s,s:s}", "role", "system", "content", system));
        json_array_append_new(msgs, ifd_cli_api_user_message(text.data, images));
        body = ifd_cli_api_chat_body(&p, msgs);
        json_decref(msgs);
        path = "/v1/chat/completions";
    }
    if (!body) {
        fprintf(stderr, "infer: out of memory (or the prompt is not valid UTF-8)\n");
        code = IFD_CLI_EXIT_FAIL;
        goto out;
    }

    ifd_cli_api_reader_t r;
    ifd_cli_api_reader_init(&r, NULL, NULL, NULL);
    r.keep_response = json;
    ifd_buf_t answer = IFD_BUF_INIT;
    ifd_cli_catch_sigint(true);
    double t0 = now_s();
    code = ifd_cli_complete(&t, &co, path, body, json ? NULL : stdout, &answer, &r);
    double dt = now_s() - t0;
    ifd_cli_catch_sigint(false);
    if (code == IFD_CLI_EXIT_INTERRUPTED) {
        fflush(stdout);
        fprintf(stderr, "\ninfer: interrupted\n");
    } else if (code == IFD_CLI_EXIT_OK && json) {
        if (r.response && json_dumpf(r.response, stdout, JSON_INDENT(2)) == 0)
            fputc('\n', stdout);
    } else if (answer.len && answer.data[answer.len - 1] != '\n') {
        fputc('\n', stdout);
    } else if (code == IFD_CLI_EXIT_OK && !answer.len) {
        fputc('\n', stdout);
    }
    if (code == IFD_CLI_EXIT_OK && stats) {
        fprintf(stderr, "[%lld prompt tokens (%lld cached), %lld generated, finish %s, %.2f s",
                (long long)r.usage.prompt_tokens, (long long)r.usage.cached_tokens,
                (long long)r.usage.completion_tokens, r.finish_reason[0] ? r.finish_reason : "?",
                dt);
        if (dt > 0 && r.usage.completion_tokens > 0)
            fprintf(stderr, ", %.1f tokens/s", (double)r.usage.completion_tokens / dt);
        fprintf(stderr, "]\n");
    }
    if (fflush(stdout) != 0 && code == IFD_CLI_EXIT_OK)
        code = IFD_CLI_EXIT_FAIL;
    ifd_buf_free(&answer);
    ifd_cli_api_reader_close(&r);
    free(body);
out:
    ifd_buf_free(&text);
    json_decref(images);
    return code;
}
