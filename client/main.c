/*
 * main.c — infer, the command-line client.
 *
 * Subcommands are a table (name, handler, one-line help). Today:
 * `infer inspect FILE.gguf [--json]`; prompting, chat, status and the
 * benchmarks arrive with the client issue.
 */
#include "error.h"
#include "inspect.h"
#include "log.h"
#include "tokcmd.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

typedef int (*ifd_cmd_fn)(int argc, char **argv);

static int ifd__cmd_inspect(int argc, char **argv)
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
            printf("Usage: infer inspect FILE.gguf [--json]\n\n"
                   "Print a GGUF model's architecture, hyper-parameters, tokenizer summary\n"
                   "and tensor table (--json: one JSON object).\n");
            return 0;
        default:
            return 2;
        }
    }
    if (optind + 1 != argc) {
        fprintf(stderr, "Usage: infer inspect FILE.gguf [--json]\n");
        return 2;
    }
    return ifd_inspect_file(stdout, stderr, argv[optind], json) == 0 ? 0 : 1;
}

static const struct {
    const char *name;
    ifd_cmd_fn fn;
    const char *help;
} ifd__cmds[] = {
    {"inspect", ifd__cmd_inspect, "print a GGUF model file's summary"},
    {"tokenize", ifd_tokcmd_tokenize, "print the token ids of text on stdin"},
    {"detokenize", ifd_tokcmd_detokenize, "print the text of token ids on stdin"},
};

static void ifd__usage(FILE *f)
{
    fprintf(f, "Usage: infer COMMAND [options]\n\nCommands:\n");
    for (size_t i = 0; i < sizeof ifd__cmds / sizeof ifd__cmds[0]; i++)
        fprintf(f, "  %-12s %s\n", ifd__cmds[i].name, ifd__cmds[i].help);
    fprintf(f, "\n  -h, --help     this help (infer COMMAND --help for a command's)\n"
               "  -V, --version  print the version\n");
}

int main(int argc, char **argv)
{
    ifd_log_set_tag("infer");
    if (argc < 2) {
        ifd__usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        ifd__usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "-V") == 0 || strcmp(argv[1], "--version") == 0) {
        printf("infer %s\n", IFD_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof ifd__cmds / sizeof ifd__cmds[0]; i++) {
        if (strcmp(argv[1], ifd__cmds[i].name) == 0) {
            optind = 1;
            return ifd__cmds[i].fn(argc - 1, argv + 1);
        }
    }
    fprintf(stderr, "infer: unknown command '%s'\n\n", argv[1]);
    ifd__usage(stderr);
    return 2;
}
