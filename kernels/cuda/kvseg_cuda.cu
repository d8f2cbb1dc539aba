/*
 * kvseg_cuda.cu — CUDA data segments for the KV pool (see kvseg_cuda.h).
 *
 * A VMM segment is one physical allocation (cuMemCreate, rounded up to the
 * allocation granularity) mapped at a reserved virtual range with read/write
 * access for its device. Its per-mapping state (kvseg_map_t) remembers the
 * handle, range and size so release() undoes exactly what create/import did.
 * An IPC segment is a cudaMalloc'ed range (owner) or an opened IPC handle.
 */
#include "kvseg_cuda.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern "C" {
#include "error.h"
#include "log.h"
}

/* Driver entry points, fetched through the runtime. */
typedef struct {
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*MemGetAllocationGranularity)(size_t *, const CUmemAllocationProp *,
                                            CUmemAllocationGranularity_flags);
    CUresult (*MemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                          unsigned long long);
    CUresult (*MemRelease)(CUmemGenericAllocationHandle);
    CUresult (*MemExportToShareableHandle)(void *, CUmemGenericAllocationHandle,
                                           CUmemAllocationHandleType, unsigned long long);
    CUresult (*MemImportFromShareableHandle)(CUmemGenericAllocationHandle *, void *,
                                             CUmemAllocationHandleType);
    CUresult (*MemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*MemAddressFree)(CUdeviceptr, size_t);
    CUresult (*MemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                       unsigned long long);
    CUresult (*MemUnmap)(CUdeviceptr, size_t);
    CUresult (*MemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    CUresult (*GetErrorString)(CUresult, const char **);
} kvseg_drv_t;

struct ifd_cuda_kvseg {
    ifd_kvseg_provider_t prov;
    bool force_ipc;
    int device; /* CUDA ordinal of the segments, or -1: the pool's device index */
    bool drv_loaded;
    bool drv_ok;
    kvseg_drv_t drv;
};

typedef struct {
    ifd_kvseg_kind_t kind;
    bool owner;                          /* IPC: cudaMalloc'ed here (else opened) */
    CUmemGenericAllocationHandle handle; /* VMM */
    CUdeviceptr va;                      /* VMM: reserved range */
    size_t size;                         /* VMM: mapped (rounded) size */
} kvseg_map_t;

static int kvseg_rt_fail(const char *what, cudaError_t e)
{
    IFD_ERROR("kvseg_cuda: %s: %s", what, cudaGetErrorString(e));
    (void)cudaGetLastError();
    return IFD_ECUDA;
}

static int kvseg_drv_fail(ifd_cuda_kvseg_t *s, const char *what, CUresult r)
{
    const char *msg = NULL;
    if (s->drv.GetErrorString)
        s->drv.GetErrorString(r, &msg);
    IFD_ERROR("kvseg_cuda: %s: %s (%d)", what, msg ? msg : "CUDA driver error", (int)r);
    return IFD_ECUDA;
}

#define KVSEG_LOAD(field, name)                                                                    \
    do {                                                                                           \
        void *fn = NULL;                                                                           \
        cudaDriverEntryPointQueryResult q;                                                         \
        if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q) !=           \
                cudaSuccess ||                                                                     \
            q != cudaDriverEntryPointSuccess || !fn) {                                             \
            (void)cudaGetLastError();                                                              \
            IFD_WARN("kvseg_cuda: driver entry point %s not found", name);                         \
            return false;                                                                          \
        }                                                                                          \
        memcpy(&s->drv.field, &fn, sizeof fn);                                                     \
    } while (0)

static bool kvseg_load_driver(ifd_cuda_kvseg_t *s)
{
    if (s->drv_loaded)
        return s->drv_ok;
    s->drv_loaded = true;
    KVSEG_LOAD(GetErrorString, "cuGetErrorString");
    KVSEG_LOAD(DeviceGet, "cuDeviceGet");
    KVSEG_LOAD(DeviceGetAttribute, "cuDeviceGetAttribute");
    KVSEG_LOAD(MemGetAllocationGranularity, "cuMemGetAllocationGranularity");
    KVSEG_LOAD(MemCreate, "cuMemCreate");
    KVSEG_LOAD(MemRelease, "cuMemRelease");
    KVSEG_LOAD(MemExportToShareableHandle, "cuMemExportToShareableHandle");
    KVSEG_LOAD(MemImportFromShareableHandle, "cuMemImportFromShareableHandle");
    KVSEG_LOAD(MemAddressReserve, "cuMemAddressReserve");
    KVSEG_LOAD(MemAddressFree, "cuMemAddressFree");
    KVSEG_LOAD(MemMap, "cuMemMap");
    KVSEG_LOAD(MemUnmap, "cuMemUnmap");
    KVSEG_LOAD(MemSetAccess, "cuMemSetAccess");
    s->drv_ok = true;
    return true;
}

/* Makes dev current and its primary context live (the runtime creates it). */
static int kvseg_use_device(int dev)
{
    cudaError_t e = cudaSetDevice(dev);
    if (e != cudaSuccess)
        return kvseg_rt_fail("cudaSetDevice", e);
    e = cudaFree(0);
    if (e != cudaSuccess)
        return kvseg_rt_fail("cudaFree(0) (context init)", e);
    return 0;
}

/* What create and import start with: the segment's device (the one s is
 * pinned to, when it is) made current, and a zeroed mapping record in *m. */
static int kvseg_begin(const ifd_cuda_kvseg_t *s, int *dev, kvseg_map_t **m)
{
    if (s->device >= 0)
        *dev = s->device;
    int rc = kvseg_use_device(*dev);
    if (rc)
        return rc;
    *m = (kvseg_map_t *)calloc(1, sizeof **m);
    return *m ? 0 : IFD_ENOMEM;
}

static void kvseg_prop(CUmemAllocationProp *prop, CUdevice d)
{
    memset(prop, 0, sizeof *prop);
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = d;
    prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
}

/* VMM usable on dev? Fills the rounded size. */
static bool kvseg_vmm_ok(ifd_cuda_kvseg_t *s, int dev, uint64_t bytes, CUdevice *d, size_t *rounded)
{
    if (s->force_ipc || !kvseg_load_driver(s))
        return false;
    if (s->drv.DeviceGet(d, dev) != CUDA_SUCCESS)
        return false;
    int vmm = 0, fd = 0;
    if (s->drv.DeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                  *d) != CUDA_SUCCESS ||
        s->drv.DeviceGetAttribute(&fd,
                                  CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                                  *d) != CUDA_SUCCESS ||
        !vmm || !fd)
        return false;
    CUmemAllocationProp prop;
    kvseg_prop(&prop, *d);
    size_t g = 0;
    if (s->drv.MemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) !=
            CUDA_SUCCESS ||
        g == 0)
        return false;
    *rounded = (size_t)((bytes + g - 1) / g * g);
    return true;
}

/* Reserves a range, maps handle there and grants dev read/write. */
static int kvseg_vmm_map(ifd_cuda_kvseg_t *s, CUdevice d, kvseg_map_t *m)
{
    CUresult r = s->drv.MemAddressReserve(&m->va, m->size, 0, 0, 0);
    if (r != CUDA_SUCCESS)
        return kvseg_drv_fail(s, "cuMemAddressReserve", r);
    r = s->drv.MemMap(m->va, m->size, 0, m->handle, 0);
    if (r != CUDA_SUCCESS) {
        s->drv.MemAddressFree(m->va, m->size);
        return kvseg_drv_fail(s, "cuMemMap", r);
    }
    CUmemAccessDesc acc;
    memset(&acc, 0, sizeof acc);
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc.location.id = d;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = s->drv.MemSetAccess(m->va, m->size, &acc, 1);
    if (r != CUDA_SUCCESS) {
        s->drv.MemUnmap(m->va, m->size);
        s->drv.MemAddressFree(m->va, m->size);
        return kvseg_drv_fail(s, "cuMemSetAccess", r);
    }
    return 0;
}

static int kvseg_create(void *ctx, int dev, uint64_t bytes, ifd_kvseg_export_t *exp, void **base,
                        void **priv)
{
    ifd_cuda_kvseg_t *s = (ifd_cuda_kvseg_t *)ctx;
    kvseg_map_t *m;
    int rc = kvseg_begin(s, &dev, &m);
    if (rc)
        return rc;
    CUdevice d;
    size_t rounded;
    const bool want_ipc = exp->kind == IFD_KVSEG_CUDA_IPC; /* the pool asks for the fallback */
    if (!want_ipc && kvseg_vmm_ok(s, dev, bytes, &d, &rounded)) {
        CUmemAllocationProp prop;
        kvseg_prop(&prop, d);
        m->kind = IFD_KVSEG_CUDA_VMM;
        m->size = rounded;
        CUresult r = s->drv.MemCreate(&m->handle, rounded, &prop, 0);
        if (r != CUDA_SUCCESS) {
            free(m);
            return kvseg_drv_fail(s, "cuMemCreate", r);
        }
        int fd = -1;
        r = s->drv.MemExportToShareableHandle(&fd, m->handle,
                                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        if (r != CUDA_SUCCESS) {
            s->drv.MemRelease(m->handle);
            free(m);
            return kvseg_drv_fail(s, "cuMemExportToShareableHandle", r);
        }
        if ((rc = kvseg_vmm_map(s, d, m)) != 0) {
            close(fd);
            s->drv.MemRelease(m->handle);
            free(m);
            return rc;
        }
        exp->kind = IFD_KVSEG_CUDA_VMM;
        exp->fd = fd;
        exp->bytes = bytes;
        *base = (void *)(uintptr_t)m->va;
        *priv = m;
        IFD_INFO("kvseg_cuda: device %d: %zu bytes of VMM memory, shared as fd %d", dev, rounded,
                 fd);
        return 0;
    }
    /* Fallback: cudaMalloc + IPC handle (dies with this process). */
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, (size_t)bytes);
    if (e != cudaSuccess) {
        free(m);
        return kvseg_rt_fail("cudaMalloc", e);
    }
    cudaIpcMemHandle_t h;
    e = cudaIpcGetMemHandle(&h, p);
    if (e != cudaSuccess) {
        cudaFree(p);
        free(m);
        return kvseg_rt_fail("cudaIpcGetMemHandle", e);
    }
    static_assert(sizeof h <= sizeof exp->handle, "cudaIpcMemHandle_t fits the export");
    m->kind = IFD_KVSEG_CUDA_IPC;
    m->owner = true;
    exp->kind = IFD_KVSEG_CUDA_IPC;
    exp->fd = -1;
    memset(exp->handle, 0, sizeof exp->handle);
    memcpy(exp->handle, &h, sizeof h);
    exp->bytes = bytes;
    *base = p;
    *priv = m;
    IFD_INFO("kvseg_cuda: device %d: %llu bytes via cudaMalloc + IPC handle (no VMM fd "
             "sharing%s): the memory dies with this process",
             dev, (unsigned long long)bytes, s->force_ipc || want_ipc ? ", forced" : "");
    return 0;
}

static int kvseg_import(void *ctx, int dev, const ifd_kvseg_export_t *exp, void **base, void **priv)
{
    ifd_cuda_kvseg_t *s = (ifd_cuda_kvseg_t *)ctx;
    kvseg_map_t *m;
    int rc = kvseg_begin(s, &dev, &m);
    if (rc)
        return rc;
    m->kind = exp->kind;
    if (exp->kind == IFD_KVSEG_CUDA_VMM) {
        CUdevice d;
        size_t rounded;
        bool force = s->force_ipc;
        s->force_ipc = false; /* importing a VMM segment needs VMM whatever we prefer */
        bool ok = kvseg_vmm_ok(s, dev, exp->bytes, &d, &rounded);
        s->force_ipc = force;
        if (!ok || exp->fd < 0) {
            free(m);
            IFD_ERROR("kvseg_cuda: device %d: cannot import a VMM segment (%s)", dev,
                      exp->fd < 0 ? "no fd" : "no VMM/POSIX-fd support");
            return IFD_ENOTSUP;
        }
        m->size = rounded;
        /* The fd stays the pool's: the import takes its own reference. */
        CUresult r = s->drv.MemImportFromShareableHandle(&m->handle, (void *)(uintptr_t)exp->fd,
                                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        if (r != CUDA_SUCCESS) {
            free(m);
            return kvseg_drv_fail(s, "cuMemImportFromShareableHandle", r);
        }
        if ((rc = kvseg_vmm_map(s, d, m)) != 0) {
            s->drv.MemRelease(m->handle);
            free(m);
            return rc;
        }
        *base = (void *)(uintptr_t)m->va;
        *priv = m;
        return 0;
    }
    if (exp->kind != IFD_KVSEG_CUDA_IPC) {
        free(m);
        return IFD_EINVAL;
    }
    cudaIpcMemHandle_t h;
    memcpy(&h, exp->handle, sizeof h);
    void *p = NULL;
    cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
        free(m);
        return kvseg_rt_fail("cudaIpcOpenMemHandle", e);
    }
    *base = p;
    *priv = m;
    return 0;
}

static void kvseg_release(void *ctx, void *base, uint64_t bytes, void *priv)
{
    ifd_cuda_kvseg_t *s = (ifd_cuda_kvseg_t *)ctx;
    kvseg_map_t *m = (kvseg_map_t *)priv;
    (void)bytes;
    if (!m)
        return;
    if (m->kind == IFD_KVSEG_CUDA_VMM) {
        /* The physical memory lives on while any fd or import holds it. */
        s->drv.MemUnmap(m->va, m->size);
        s->drv.MemAddressFree(m->va, m->size);
        s->drv.MemRelease(m->handle);
    } else if (m->owner) {
        cudaFree(base);
    } else {
        cudaIpcCloseMemHandle(base);
    }
    (void)cudaGetLastError();
    free(m);
}

static int kvseg_copy(void *ctx, void *dst, const void *src, uint64_t n)
{
    (void)ctx;
    cudaError_t e = cudaMemcpy(dst, src, (size_t)n, cudaMemcpyDeviceToDevice);
    return e == cudaSuccess ? 0 : kvseg_rt_fail("cudaMemcpy (device to device)", e);
}

static int kvseg_write(void *ctx, void *dst_dev, const void *src_host, uint64_t n)
{
    (void)ctx;
    return ifd_cuda_kvseg_upload(dst_dev, src_host, (size_t)n);
}

static int kvseg_read(void *ctx, void *dst_host, const void *src_dev, uint64_t n)
{
    (void)ctx;
    return ifd_cuda_kvseg_download(dst_host, src_dev, (size_t)n);
}

extern "C" int ifd_cuda_kvseg_create(bool force_ipc, int device, ifd_cuda_kvseg_t **out)
{
    ifd_cuda_kvseg_t *s = (ifd_cuda_kvseg_t *)calloc(1, sizeof *s);
    if (!s)
        return IFD_ENOMEM;
    s->force_ipc = force_ipc;
    s->device = device;
    s->prov.ctx = s;
    s->prov.create = kvseg_create;
    s->prov.import = kvseg_import;
    s->prov.release = kvseg_release;
    s->prov.copy = kvseg_copy;
    s->prov.write = kvseg_write;
    s->prov.read = kvseg_read;
    *out = s;
    return 0;
}

extern "C" void ifd_cuda_kvseg_destroy(ifd_cuda_kvseg_t *s)
{
    free(s);
}

extern "C" const ifd_kvseg_provider_t *ifd_cuda_kvseg_provider(ifd_cuda_kvseg_t *s)
{
    return &s->prov;
}

extern "C" int ifd_cuda_kvseg_upload(void *dst_dev, const void *src_host, size_t n)
{
    cudaError_t e = cudaMemcpy(dst_dev, src_host, n, cudaMemcpyHostToDevice);
    return e == cudaSuccess ? 0 : kvseg_rt_fail("cudaMemcpy (host to device)", e);
}

extern "C" int ifd_cuda_kvseg_download(void *dst_host, const void *src_dev, size_t n)
{
    cudaError_t e = cudaMemcpy(dst_host, src_dev, n, cudaMemcpyDeviceToHost);
    return e == cudaSuccess ? 0 : kvseg_rt_fail("cudaMemcpy (device to host)", e);
}
