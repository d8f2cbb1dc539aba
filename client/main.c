/*
 * main.c — infer, the command-line client.
 *
 * Subcommands are a table (name, handler, one-line help). A first argument
 * that is no command is a prompt (`infer "Hello"`, `infer -n 20 "Hi"`,
 * `infer -`), except a lone word that looks like a mistyped command.
 * docs/cli.md is the manual.
 */
#include "bench.h"
#include "chat.h"
#include "error.h"
#include "inspect/inspect.h"
#include "log.h"
#include "prompt.h"
#include "status.h"
#include "tokcmd.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

typedef int (*cmd_fn)(int argc, char **argv);

static int cmd_inspect(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    bool json = false;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'j':
            json = true;
            break;
        case 'h':
            printf("Usage: infer inspect FILE.gguf|DIR [--json]\n\n"
                   "Print a GGUF file's or Hugging Face directory's format, architecture,\n"
                   "hyper-parameters, tokenizer summary and tensors (--json: one JSON object).\n");
            return 0;
        default:
            return 2;
        }
    }
    if (optind + 1 != argc) {
        fprintf(stderr, "Usage: infer inspect FILE.gguf|DIR [--json]\n");
        return 2;
    }
    return ifd_inspect_file(stdout, stderr, argv[optind], json) == 0 ? 0 : 1;
}

static const struct {
    const char *name;
    cmd_fn fn;
    const char *help;
} k_cmds[] = {
    {"prompt", ifd_cli_prompt_main,
     "send one prompt, stream the answer (same as infer \"PROMPT\")"},
    {"chat", ifd_cli_chat_main, "talk with the model: history, streaming, /commands"},
    {"models", ifd_cli_status_models_main, "list the models the daemon serves"},
    {"status", ifd_cli_status_main, "workers, KV blocks, prefix hits, queue, tokens/s (--watch)"},
    {"bench", ifd_cli_bench_main, "serving benchmarks: bench serve, bench cache"},
    {"inspect", cmd_inspect, "print a GGUF file's or Hugging Face directory's summary"},
    {"tokenize", ifd_cli_tokcmd_tokenize, "print the token ids of text on stdin"},
    {"detokenize", ifd_cli_tokcmd_detokenize, "print the text of token ids on stdin"},
};

static void usage(FILE *f)
{
    fprintf(f, "Usage: infer [options] PROMPT...   (or - for stdin; see infer prompt --help)\n"
               "       infer COMMAND [options]\n\nCommands:\n");
    for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++)
        fprintf(f, "  %-12s %s\n", k_cmds[i].name, k_cmds[i].help);
    fprintf(f, "\n  -h, --help     this help (infer COMMAND --help for a command's)\n"
               "  -V, --version  print the version\n"
               "\nExit status: 0 ok, 1 local failure, 2 usage, 3 daemon unreachable, 4 request\n"
               "rejected (HTTP 4xx), 5 daemon error, 130 interrupted. See docs/cli.md.\n");
}

/* Edit distance of two short words (a mistyped command), capped at 3. */
static int distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 31 || lb > 31)
        return 3;
    int d[32][32];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        for (size_t j = 1; j <= lb; j++) {
            int x = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < x)
                x = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < x)
                x = d[i][j - 1] + 1;
            d[i][j] = x;
        }
    }
    return d[la][lb] < 3 ? d[la][lb] : 3;
}

/* A lone lowercase word with a '-' in it or close to a command's name is
 * taken for a mistyped command rather than a one-word prompt. NULL: a
 * prompt; else the command to suggest ("" when none is close). */
static const char *mistyped(int argc, char **argv)
{
    const char *w = argv[1];
    if (argc != 2 || !(w[0] >= 'a' && w[0] <= 'z') ||
        strspn(w, "abcdefghijklmnopqrstuvwxyz-") != strlen(w))
        return NULL;
    const char *best = NULL;
    for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++)
        if (distance(w, k_cmds[i].name) <= (strlen(w) > 4 ? 2 : 1))
            best = k_cmds[i].name;
    if (best)
        return best;
    return strchr(w, '-') ? "" : NULL;
}

int main(int argc, char **argv)
{
    ifd_log_set_tag("infer");
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "-V") == 0 || strcmp(argv[1], "--version") == 0) {
        printf("infer %s\n", IFD_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++) {
        if (strcmp(argv[1], k_cmds[i].name) == 0) {
            optind = 1;
            return k_cmds[i].fn(argc - 1, argv + 1);
        }
    }
    const char *near = mistyped(argc, argv);
    if (near) {
        fprintf(stderr, "infer: unknown command '%s'", argv[1]);
        if (near[0])
            fprintf(stderr, " — did you mean '%s'?", near);
        fprintf(stderr, "\n(to send it as a prompt: infer prompt %s; all commands: infer --help)\n",
                argv[1]);
        return 2;
    }
    optind = 1;
    return ifd_cli_prompt_main(argc, argv);
}
