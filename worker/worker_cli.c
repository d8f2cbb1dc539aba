/*
 * worker_cli.c — inferd-worker's command line.
 *
 * Modes today: --inspect FILE.gguf [--json]. The engine (--serve), offline
 * generation (--prompt) and the backends arrive with their issues.
 */
#include "worker_cli.h"

#include "error.h"
#include "inspect.h"
#include "kernels.h"
#include "log.h"
#ifdef IFD_HAVE_CUDA
#include "cuda/cuda_device.h"
#endif

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static void ifd__usage(FILE *f)
{
    fprintf(f,
            "Usage: inferd-worker --inspect FILE.gguf [--json]\n"
            "       inferd-worker --devices\n"
            "\n"
            "The inferd worker: runs a model for the inferd router (one process per GPU).\n"
            "\n"
            "  --inspect FILE   print a GGUF file's architecture, hyper-parameters,\n"
            "                   tokenizer summary and tensor table\n"
            "  --json           machine-readable output for --inspect\n"
            "  --devices        list the compute devices this worker can use\n"
            "  --log-level L    error | warn | info | debug (default: $INFERD_LOG or info)\n"
            "  -h, --help       this help\n"
            "  -V, --version    print the version\n");
}

static int ifd__devices(void)
{
    printf("cpu: %s\n", ifd_cpu_isa_name());
#ifdef IFD_HAVE_CUDA
    int n;
    char err[256];
    if (ifd_cuda_device_count(&n, err, sizeof err) != 0) {
        printf("cuda: none (%s)\n", err);
    } else {
        for (int i = 0; i < n; i++) {
            char desc[256];
            ifd_cuda_device_describe(i, desc, sizeof desc);
            printf("cuda:%d: %s\n", i, desc);
        }
    }
#else
    printf("cuda: not built (configure with -DINFERD_CUDA=ON)\n");
#endif
    return 0;
}

int ifd_worker_main(int argc, char **argv)
{
    enum { OPT_JSON = 256, OPT_DEVICES, OPT_LOG_LEVEL };
    static const struct option opts[] = {
        {"inspect", required_argument, NULL, 'i'},
        {"json", no_argument, NULL, OPT_JSON},
        {"devices", no_argument, NULL, OPT_DEVICES},
        {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    const char *inspect = NULL;
    bool json = false, devices = false;
    int c;
    optind = 1;
    ifd_log_set_tag("inferd-worker");
    while ((c = getopt_long(argc, argv, "hV", opts, NULL)) != -1) {
        switch (c) {
        case 'i':
            inspect = optarg;
            break;
        case OPT_JSON:
            json = true;
            break;
        case OPT_DEVICES:
            devices = true;
            break;
        case OPT_LOG_LEVEL: {
            ifd_log_level_t l;
            if (ifd_log_parse_level(optarg, &l) != 0) {
                fprintf(stderr, "inferd-worker: bad --log-level '%s'\n", optarg);
                return 2;
            }
            ifd_log_set_level(l);
            break;
        }
        case 'h':
            ifd__usage(stdout);
            return 0;
        case 'V':
            printf("inferd-worker %s\n", IFD_VERSION);
            return 0;
        default:
            ifd__usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "inferd-worker: unexpected argument '%s'\n", argv[optind]);
        ifd__usage(stderr);
        return 2;
    }
    if (devices)
        return ifd__devices();
    if (inspect)
        return ifd_inspect_file(stdout, stderr, inspect, json) == 0 ? 0 : 1;
    ifd__usage(stderr);
    return 2;
}
