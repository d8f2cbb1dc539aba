/*
 * backend_factory.c — see backend_factory.h.
 *
 * Every CUDA question goes through the module's table (cuda_module.h), and
 * the module is loaded by the first of them, never by a CPU backend: that is
 * why the CUDA branches load it here rather than at start-up. Without CUDA
 * in the build the same functions answer IFD_ENOTSUP with the configure
 * option to name.
 */
#include "backend_factory.h"

#include "error.h"
#ifdef IFD_HAVE_CUDA
#include "cuda_module.h"
#endif

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define IFD__NO_CUDA "this build has no CUDA backend (configure with -DINFERD_CUDA=ON)"

int ifd_backend_factory_create(ifd_backend_t **out, const char *name, int threads,
                               ifd_weights_dtype_t weights, char *err, size_t errlen)
{
    int rc;
    if (!name || strcmp(name, "cpu") == 0) {
        if ((rc = ifd_backend_cpu_create_ex(out, threads, weights)))
            snprintf(err, errlen, "cannot start the CPU backend: %s", ifd_strerror(rc));
        return rc;
    }
    if (strcmp(name, "cuda") == 0 || strcmp(name, "cuda-f32") == 0) {
#ifdef IFD_HAVE_CUDA
        /* the module maps the CUDA libraries: only now, never for a CPU backend */
        const ifd_cuda_module_t *cm = ifd_cuda_module_load(err, errlen);
        if (!cm)
            return IFD_ENODEV;
        return cm->backend_create(out, 0, strcmp(name, "cuda-f32") == 0, err, errlen);
#else
        snprintf(err, errlen, "backend '%s': this build has no CUDA backend "
                              "(configure with -DINFERD_CUDA=ON)", name);
        return IFD_ENOTSUP;
#endif
    }
    snprintf(err, errlen, "unknown backend '%s' (cpu, cuda, cuda-f32)", name);
    return IFD_EINVAL;
}

void ifd_backend_factory_describe(const char *name, int threads, int gpu, char *out,
                                  size_t outlen)
{
    if (!name || strcmp(name, "cpu") == 0) {
        snprintf(out, outlen, "cpu (%d threads)",
                 threads > 0 ? threads : (int)sysconf(_SC_NPROCESSORS_ONLN));
        return;
    }
    char desc[128] = "cuda";
#ifdef IFD_HAVE_CUDA
    const ifd_cuda_module_t *cm = ifd_cuda_module_load(NULL, 0); /* loaded by the create */
    if (cm)
        cm->device_describe(0, desc, sizeof desc);
#endif
    snprintf(out, outlen, "%s (GPU %d%s)", desc, gpu,
             strcmp(name, "cuda-f32") == 0 ? ", exact f32" : "");
}

int ifd_backend_factory_gpu_check(char *err, size_t errlen)
{
#ifdef IFD_HAVE_CUDA
    int n_dev;
    const ifd_cuda_module_t *cm = ifd_cuda_module_load(err, errlen);
    if (!cm)
        return IFD_ENODEV; /* its one line says why */
    if (cm->device_count(&n_dev, err, errlen) != 0) {
        char why[900];
        snprintf(why, sizeof why, "%s", err);
        snprintf(err, errlen, "no CUDA device: %s", why);
        return IFD_ENODEV;
    }
    return 0;
#else
    snprintf(err, errlen, IFD__NO_CUDA);
    return IFD_ENOTSUP;
#endif
}

#ifdef IFD_HAVE_CUDA
/* ifd_kvprobe_size's view of the device's free memory, read between the
 * warm-up's steps. */
static int ifd__gpu_mem(void *ctx, uint64_t *free_bytes)
{
    const ifd_cuda_module_t *cm = ctx;
    size_t f = 0, t = 0;
    char err[256];
    int rc = cm->mem_info(&f, &t, err, sizeof err);
    *free_bytes = f;
    return rc;
}
#endif

int ifd_backend_factory_gpu_size(ifd_backend_t *be, ifd_model_t *m, ifd_model_t *draft,
                                 const ifd_kvprobe_params_t *warm, double fraction,
                                 ifd_kvprobe_size_t *out, char *desc, size_t desclen, char *err,
                                 size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (desclen)
        desc[0] = '\0';
#ifdef IFD_HAVE_CUDA
    const ifd_cuda_module_t *cm = ifd_cuda_module_load(err, errlen);
    if (!cm)
        return IFD_ENODEV;
    size_t free_b = 0, total_b = 0;
    int rc = be->ops->sync(be);
    if (!rc)
        rc = cm->mem_info(&free_b, &total_b, err, errlen);
    if (rc)
        return rc;
    cm->device_describe(0, desc, desclen);
    const int n_ctx = (int)ifd_model_config(m)->n_ctx_train;
    ifd_kvprobe_size_params_t sp = {
        .warm = *warm, .fraction = fraction, .total_bytes = total_b, .draft = draft};
    if (sp.warm.max_ctx <= 0 || sp.warm.max_ctx > n_ctx)
        sp.warm.max_ctx = n_ctx > 0 ? n_ctx : 1;
    return ifd_kvprobe_size(m, &sp, ifd__gpu_mem, (void *)cm, out, err, errlen);
#else
    (void)be;
    (void)m;
    (void)draft;
    (void)warm;
    (void)fraction;
    snprintf(err, errlen, IFD__NO_CUDA);
    return IFD_ENOTSUP;
#endif
}
