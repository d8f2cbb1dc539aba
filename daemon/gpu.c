/*
 * gpu.c — see gpu.h.
 */
#include "gpu.h"

#include "error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

int ifd_gpu_parse_list(const char *s, int *ids, int max, int *n, char *err, size_t errlen)
{
    *n = 0;
    const char *p = s;
    while (*p) {
        while (*p == ' ')
            p++;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > 1023) {
            snprintf(err, errlen, "gpus '%s': expected GPU ids such as 0,1", s);
            return IFD_EINVAL;
        }
        for (int i = 0; i < *n; i++) {
            if (ids[i] == (int)v) {
                snprintf(err, errlen, "gpus '%s': GPU %ld is listed twice", s, v);
                return IFD_EINVAL;
            }
        }
        if (*n == max) {
            snprintf(err, errlen, "gpus '%s': at most %d GPUs", s, max);
            return IFD_EINVAL;
        }
        ids[(*n)++] = (int)v;
        p = end;
        while (*p == ' ')
            p++;
        if (*p == ',' && p[1])
            p++;
        else if (*p) {
            snprintf(err, errlen, "gpus '%s': expected GPU ids such as 0,1", s);
            return IFD_EINVAL;
        }
    }
    if (*n == 0) {
        snprintf(err, errlen, "gpus '%s': no GPU id", s);
        return IFD_EINVAL;
    }
    return 0;
}

char **ifd_gpu_env(int gpu, char *var, size_t varlen)
{
    size_t n = 0;
    for (char **e = environ; *e; e++)
        n++;
    char **env = calloc(n + 2, sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    for (char **e = environ; *e; e++)
        if (strncmp(*e, "CUDA_VISIBLE_DEVICES=", 21) != 0)
            env[k++] = *e;
    snprintf(var, varlen, "CUDA_VISIBLE_DEVICES=%d", gpu);
    env[k] = var;
    return env;
}
