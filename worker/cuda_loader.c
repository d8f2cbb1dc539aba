/*
 * cuda_loader.c — finds and opens libinferd-cuda.so (cuda_module.h) the
 * first time a CUDA backend or the CUDA devices are asked for; a CPU-only
 * worker never calls it, so it never maps libcudart or libcublasLt.
 *
 * The outcome (the table, or the one-line reason there is none) is kept for
 * the life of the process: pthread_once, so it is loaded at most once.
 * With IFD_CUDA_STATIC the backend is linked into the program (the
 * emulator worker) and the table is returned without dlopen.
 */
#include "cuda_module.h"

#include "error.h"
#include "log.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_once_t ifd__cm_once = PTHREAD_ONCE_INIT;
static const ifd_cuda_module_t *ifd__cm;
enum { IFD__CM_PATH = PATH_MAX + 64 };
static char ifd__cm_err[2 * IFD__CM_PATH + 128];

#ifdef IFD_CUDA_STATIC
static void ifd__cm_open(void)
{
    ifd__cm = ifd_cuda_module();
}
#else
/* dlopen(path) and check the table; 0, or -1 with the reason in why. */
static int ifd__cm_try(const char *path, char *why, size_t whylen)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(why, whylen, "%s", dlerror());
        return -1;
    }
    const ifd_cuda_module_t *(*entry)(void);
    *(void **)&entry = dlsym(h, "ifd_cuda_module");
    const ifd_cuda_module_t *m = entry ? entry() : NULL;
    if (!m || m->abi != IFD_CUDA_MODULE_ABI || strcmp(m->version, IFD_VERSION) != 0 ||
        m->ops_size != sizeof(ifd_backend_ops_t)) {
        snprintf(why, whylen, "%s: not a CUDA module of this build (inferd %s)", path,
                 IFD_VERSION);
        dlclose(h);
        return -1;
    }
    ifd__cm = m; /* never dlclosed: backends and their kernels live in it */
    IFD_DEBUG("CUDA backend module: %s", path);
    return 0;
}

static void ifd__cm_open(void)
{
    char why[512] = "";
    const char *env = getenv(IFD_CUDA_MODULE_ENV);
    if (env && env[0]) {
        if (ifd__cm_try(env, why, sizeof why))
            snprintf(ifd__cm_err, sizeof ifd__cm_err,
                     "cannot load the CUDA backend module (%s=%s): %s", IFD_CUDA_MODULE_ENV,
                     env, why);
        return;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        snprintf(ifd__cm_err, sizeof ifd__cm_err,
                 "cannot load the CUDA backend module: /proc/self/exe unreadable (set %s)",
                 IFD_CUDA_MODULE_ENV);
        return;
    }
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = '\0';
    static const char *const rel[] = {"/" IFD_CUDA_MODULE_NAME,
                                      "/../lib/inferd/" IFD_CUDA_MODULE_NAME};
    char tried[2][IFD__CM_PATH];
    for (int i = 0; i < 2; i++) {
        snprintf(tried[i], sizeof tried[i], "%s%s", exe, rel[i]);
        if (access(tried[i], F_OK) != 0)
            continue;
        if (ifd__cm_try(tried[i], why, sizeof why) == 0)
            return;
        /* present but unusable (its CUDA libraries missing, another build): say so */
        snprintf(ifd__cm_err, sizeof ifd__cm_err, "cannot load the CUDA backend module: %s",
                 why);
        return;
    }
    snprintf(ifd__cm_err, sizeof ifd__cm_err,
             "no CUDA backend module: neither %s nor %s exists (install it, or set %s)",
             tried[0], tried[1], IFD_CUDA_MODULE_ENV);
}
#endif

const ifd_cuda_module_t *ifd_cuda_module_load(char *errbuf, size_t errlen)
{
    pthread_once(&ifd__cm_once, ifd__cm_open);
    if (!ifd__cm && errbuf && errlen)
        snprintf(errbuf, errlen, "%s", ifd__cm_err);
    return ifd__cm;
}
