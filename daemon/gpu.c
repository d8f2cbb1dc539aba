/*
 * gpu.c — see gpu.h.
 */
#include "gpu.h"

#include "error.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

static double ifd__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Reads the child's stdout to EOF or the deadline. 0, or IFD_ETIMEDOUT. */
static int ifd__read_all(int fd, char *buf, size_t cap, size_t *len, double deadline)
{
    *len = 0;
    for (;;) {
        double left = deadline - ifd__now();
        if (left <= 0)
            return IFD_ETIMEDOUT;
        struct pollfd pfd = {fd, POLLIN, 0};
        int pr = poll(&pfd, 1, (int)(left * 1000.0) + 1);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            continue; /* the deadline check above ends it */
        char tmp[4096];
        ssize_t r = read(fd, tmp, sizeof tmp);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return 0;
        size_t take = (size_t)r < cap - 1 - *len ? (size_t)r : cap - 1 - *len;
        memcpy(buf + *len, tmp, take);
        *len += take;
        buf[*len] = '\0';
    }
}

static uint64_t ifd__u64(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) && json_integer_value(v) > 0 ? (uint64_t)json_integer_value(v) : 0;
}

/* A probe running: its pid and the read end of its stdout. */
typedef struct {
    pid_t pid;
    int fd;
} ifd__probe_run_t;

/* Starts `worker --kv-probe ...` on GPU gpu. 0 with *run set, or a
 * negative code with the reason in err. */
static int ifd__probe_start(const ifd_gpu_probe_params_t *p, int gpu, ifd__probe_run_t *run,
                            char *err, size_t errlen)
{
    char frac[32], seed[32], bs[16], ms[16], mbt[16], mml[16], var[48];
    snprintf(frac, sizeof frac, "%.6g", p->fraction);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)p->weights_seed);
    snprintf(bs, sizeof bs, "%d", p->block_size);
    snprintf(ms, sizeof ms, "%d", p->max_seqs);
    snprintf(mbt, sizeof mbt, "%d", p->max_batched_tokens);
    snprintf(mml, sizeof mml, "%d", p->max_model_len);
    char *argv[32];
    int a = 0;
    argv[a++] = (char *)p->worker_binary;
    argv[a++] = (char *)"--kv-probe";
    argv[a++] = (char *)"--log-level";
    argv[a++] = (char *)"warn";
    argv[a++] = (char *)"--backend";
    argv[a++] = (char *)p->backend;
    argv[a++] = (char *)"--model";
    argv[a++] = (char *)p->model_path;
    if (p->random_weights && *p->random_weights) {
        argv[a++] = (char *)"--random-weights";
        argv[a++] = (char *)p->random_weights;
        argv[a++] = (char *)"--weights-seed";
        argv[a++] = seed;
    }
    argv[a++] = (char *)"--gpu-memory-fraction";
    argv[a++] = frac;
    argv[a++] = (char *)"--kv-dtype";
    argv[a++] = (char *)p->kv_dtype;
    argv[a++] = (char *)"--block-size";
    argv[a++] = bs;
    if (p->max_seqs > 0) {
        argv[a++] = (char *)"--max-seqs";
        argv[a++] = ms;
    }
    if (p->max_batched_tokens > 0) {
        argv[a++] = (char *)"--max-batched-tokens";
        argv[a++] = mbt;
    }
    if (p->max_model_len > 0) {
        argv[a++] = (char *)"--max-model-len";
        argv[a++] = mml;
    }
    argv[a] = NULL;

    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0) {
        int e = errno;
        snprintf(err, errlen, "GPU %d: pipe: %s", gpu, strerror(e));
        return -e;
    }
    char **env = ifd_gpu_env(gpu, var, sizeof var);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
    pid_t pid = -1;
    /* spawnp: a worker_binary without a slash is looked up in $PATH, as the
     * supervisor's uv_spawn does */
    int rc = env ? posix_spawnp(&pid, p->worker_binary, &fa, NULL, argv, env) : ENOMEM;
    posix_spawn_file_actions_destroy(&fa);
    free(env);
    close(pfd[1]);
    if (rc != 0) {
        close(pfd[0]);
        snprintf(err, errlen, "GPU %d: cannot run %s: %s", gpu, p->worker_binary, strerror(rc));
        return -rc;
    }
    run->pid = pid;
    run->fd = pfd[0];
    return 0;
}

/* Reads a started probe's answer (until `deadline`), reaps it, parses it. */
static int ifd__probe_finish(const ifd_gpu_probe_params_t *p, int gpu, ifd__probe_run_t *run,
                             double deadline, ifd_gpu_probe_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    char buf[8192];
    size_t len = 0;
    int rrc = ifd__read_all(run->fd, buf, sizeof buf, &len, deadline);
    close(run->fd);
    if (rrc)
        kill(run->pid, SIGKILL);
    int st = 0;
    while (waitpid(run->pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (rrc) {
        snprintf(err, errlen, "GPU %d: sizing the KV pool (%s --kv-probe) took over %.0f s",
                 gpu, p->worker_binary, p->timeout_s);
        return rrc;
    }
    /* the last line is the probe's JSON */
    while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
        buf[--len] = '\0';
    char *line = strrchr(buf, '\n');
    line = line ? line + 1 : buf;
    json_error_t je;
    json_t *j = json_loads(line, 0, &je);
    if (!json_is_object(j)) {
        json_decref(j);
        if (WIFSIGNALED(st))
            snprintf(err, errlen, "GPU %d: %s --kv-probe was killed by signal %d", gpu,
                     p->worker_binary, WTERMSIG(st));
        else
            snprintf(err, errlen, "GPU %d: %s --kv-probe gave no result (exit status %d): "
                                  "is it an inferd-worker of this version?",
                     gpu, p->worker_binary, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        return IFD_EFORMAT;
    }
    int rc = 0;
    if (!json_is_true(json_object_get(j, "ok"))) {
        const char *why = json_string_value(json_object_get(j, "error"));
        snprintf(err, errlen, "GPU %d: %s", gpu, why ? why : "the probe failed");
        rc = IFD_ENODEV;
    } else {
        out->n_blocks = (int64_t)ifd__u64(j, "n_blocks");
        out->total_bytes = ifd__u64(j, "total_bytes");
        out->free_bytes = ifd__u64(j, "free_bytes");
        out->weight_bytes = ifd__u64(j, "weight_bytes");
        out->activation_bytes = ifd__u64(j, "activation_bytes");
        out->graph_bytes = ifd__u64(j, "graph_bytes");
        out->margin_bytes = ifd__u64(j, "margin_bytes");
        out->n_graphs = (int)ifd__u64(j, "n_graphs");
        out->block_bytes = ifd__u64(j, "block_bytes");
        const char *dev = json_string_value(json_object_get(j, "device"));
        snprintf(out->device, sizeof out->device, "%s", dev ? dev : "?");
        if (out->n_blocks < 1) {
            snprintf(err, errlen, "GPU %d: no KV block fits", gpu);
            rc = IFD_ENOMEM;
        }
    }
    json_decref(j);
    return rc;
}

int ifd_gpu_probe_all(const ifd_gpu_probe_params_t *p, const int *gpus, int n,
                      ifd_gpu_probe_t *out, char *err, size_t errlen)
{
    ifd__probe_run_t run[IFD_GPU_MAX];
    if (n < 1 || n > IFD_GPU_MAX) {
        snprintf(err, errlen, "%d GPUs (1..%d)", n, IFD_GPU_MAX);
        return IFD_EINVAL;
    }
    int started = 0, rc = 0;
    for (; started < n; started++)
        if ((rc = ifd__probe_start(p, gpus[started], &run[started], err, errlen)))
            break;
    const double deadline = ifd__now() + p->timeout_s;
    char e2[512];
    for (int i = 0; i < started; i++) {
        if (rc) { /* one failed: end the others, keep the first reason */
            kill(run[i].pid, SIGKILL);
            ifd__probe_finish(p, gpus[i], &run[i], deadline, &out[i], e2, sizeof e2);
            continue;
        }
        rc = ifd__probe_finish(p, gpus[i], &run[i], deadline, &out[i], err, errlen);
    }
    return rc;
}
