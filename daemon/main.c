/*
 * main.c — inferd, the router daemon.
 *
 * Today it parses its command line only: the listeners, HTTP API and worker
 * supervision arrive with the router issue (see README.md, "Status").
 */
#include "error.h"
#include "log.h"

#include <getopt.h>
#include <stdio.h>

static void ifd__usage(FILE *f)
{
    fprintf(f, "Usage: inferd --model PATH [options]\n"
               "\n"
               "The inferd router daemon: serves a model over an OpenAI-compatible HTTP API\n"
               "on a Unix socket.\n"
               "\n"
               "  --model PATH     GGUF file to serve\n"
               "  -h, --help       this help\n"
               "  -V, --version    print the version\n"
               "\n"
               "Serving is not implemented yet in this version; see README.md (Status).\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    int c;
    ifd_log_set_tag("inferd");
    while ((c = getopt_long(argc, argv, "m:hV", opts, NULL)) != -1) {
        switch (c) {
        case 'm':
            break;
        case 'h':
            ifd__usage(stdout);
            return 0;
        case 'V':
            printf("inferd %s\n", IFD_VERSION);
            return 0;
        default:
            ifd__usage(stderr);
            return 2;
        }
    }
    IFD_ERROR("serving is not implemented yet in this version (see README.md, Status)");
    return 1;
}
