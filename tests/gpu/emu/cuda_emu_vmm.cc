/*
 * cuda_emu_vmm.cc — the emulator's slice of CUDA memory sharing between
 * processes: the driver's virtual memory management (cuMemCreate,
 * cuMemExportToShareableHandle / cuMemImportFromShareableHandle with POSIX
 * fds, cuMemAddressReserve, cuMemMap, cuMemSetAccess, cuMemUnmap,
 * cuMemRelease, ...), reached the way kernels/cuda/kvseg_cuda.cu reaches it
 * (cudaGetDriverEntryPointByVersion), and the runtime's legacy IPC
 * (cudaIpcGetMemHandle / cudaIpcOpenMemHandle / cudaIpcCloseMemHandle).
 *
 * The emulator's device memory is host memory, so sharing is emulated with
 * what the kernel offers for host memory, keeping the lifetimes a real
 * driver gives:
 *  - a VMM allocation is a memfd; its "physical memory" lives while any fd
 *    or mapping of it does. The exported POSIX fd is a dup of the memfd, so
 *    a process that holds it (the router) keeps the memory alive after the
 *    creator's death, exactly like the driver's shareable handle.
 *    cuMemMap maps it PROT_NONE at a reserved range; only cuMemSetAccess
 *    makes it readable and writable (touching it before faults, as on a GPU).
 *  - every cudaMalloc is a memfd too (ifd__emu_dev_alloc), kept open by the
 *    allocating process; an IPC handle names (pid, fd, size, a nonce) and is
 *    opened through /proc/PID/fd/FD. When the creator dies or frees the
 *    memory, the handle no longer opens — as on the real driver, legacy IPC
 *    memory dies with its allocator. The nonce (in the memfd's name) makes a
 *    reused pid or fd number fail instead of opening someone else's memory.
 *
 * $IFD_EMU_VMM_FORGET=1 makes the emulator behave like a driver that frees a
 * VMM allocation when its creator dies even though another process holds the
 * exported fd: importing such a handle then finds the memory zeroed (what a
 * freed-and-reallocated page would show). The KV pool must detect that.
 * $IFD_EMU_NO_VMM=1 reports a device without VMM / POSIX-fd support (the
 * provider then falls back to IPC).
 *
 * Not emulated: granularity other than 2 MiB, multiple devices, peer access,
 * the memory-model details of concurrent access. Test code: global state is
 * fine here; one mutex guards the bookkeeping maps.
 */
#include "cuda_emu_vmm.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <cerrno>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <mutex>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace
{

const size_t k_granularity = (size_t)2 << 20;
const uint32_t k_ipc_magic = 0x50494d45u; /* "EMIP" */

struct dev_alloc {
    int fd;
    size_t bytes; /* mapped length (page-rounded) */
    uint64_t nonce;
};

/* cudaMalloc'ed ranges by base address, and IPC-opened ones; g_mu guards
 * these maps and g_handle_types (a worker may allocate from two threads). */
std::mutex g_mu;
std::map<uintptr_t, dev_alloc> g_allocs;
std::map<uintptr_t, size_t> g_ipc_open;
uint64_t g_nonce_ctr = 0;

/* What an emulated cudaIpcMemHandle_t holds. */
struct ipc_handle {
    uint32_t magic;
    int32_t pid;
    int32_t fd;
    uint32_t pad;
    uint64_t bytes;
    uint64_t nonce;
};
static_assert(sizeof(ipc_handle) <= sizeof(cudaIpcMemHandle_t), "fits the runtime's handle");

bool env_on(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

size_t page_round(size_t n)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return n == 0 ? pg : (n + pg - 1) / pg * pg;
}

uint64_t next_nonce()
{
    /* Unique per process and allocation; the pid keeps children apart. */
    return ((uint64_t)getpid() << 32) ^ (++g_nonce_ctr * 0x9e3779b97f4a7c15ull);
}

/* The name of the file behind fd (readlink of /proc/PID/fd/FD). */
bool fd_name(int pid, int fd, char *out, size_t n)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, fd);
    ssize_t got = readlink(path, out, n - 1);
    if (got < 0)
        return false;
    out[got] = '\0';
    return true;
}

/* ---- driver API (reached through cudaGetDriverEntryPointByVersion) ------------------------ */

CUresult emu_cuGetErrorString(CUresult r, const char **s)
{
    switch (r) {
    case CUDA_SUCCESS:
        *s = "no error (emulator)";
        break;
    case CUDA_ERROR_INVALID_VALUE:
        *s = "invalid argument (emulator)";
        break;
    case CUDA_ERROR_OUT_OF_MEMORY:
        *s = "out of memory (emulator)";
        break;
    case CUDA_ERROR_INVALID_DEVICE:
        *s = "invalid device ordinal (emulator)";
        break;
    case CUDA_ERROR_INVALID_HANDLE:
        *s = "invalid resource handle (emulator)";
        break;
    case CUDA_ERROR_NOT_SUPPORTED:
        *s = "operation not supported (emulator)";
        break;
    default:
        *s = "error (emulator)";
        break;
    }
    return CUDA_SUCCESS;
}

CUresult emu_cuDeviceGet(CUdevice *d, int ordinal)
{
    if (ordinal != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *d = 0;
    return CUDA_SUCCESS;
}

CUresult emu_cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
    if (d != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
        *v = env_on("IFD_EMU_NO_VMM") ? 0 : 1;
        break;
    default:
        *v = 0;
        break;
    }
    return CUDA_SUCCESS;
}

bool prop_ok(const CUmemAllocationProp *p)
{
    return p && p->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
           p->location.type == CU_MEM_LOCATION_TYPE_DEVICE && p->location.id == 0;
}

CUresult emu_cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *p,
                                           CUmemAllocationGranularity_flags f)
{
    (void)f;
    if (!prop_ok(p))
        return CUDA_ERROR_INVALID_VALUE;
    *g = k_granularity;
    return CUDA_SUCCESS;
}

/* A generic allocation handle is the memfd's number + 1 (0 is never valid);
 * what the allocation may be exported as is remembered beside it. */
std::map<CUmemGenericAllocationHandle, unsigned> g_handle_types;

CUresult emu_cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *p,
                         unsigned long long flags)
{
    if (!prop_ok(p) || flags != 0 || size == 0 || size % k_granularity != 0)
        return CUDA_ERROR_INVALID_VALUE;
    char name[64];
    snprintf(name, sizeof name, "cuda_emu_vmm:%d", (int)getpid());
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (ftruncate(fd, (off_t)size) != 0) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *h = (CUmemGenericAllocationHandle)fd + 1;
    std::lock_guard<std::mutex> lk(g_mu);
    g_handle_types[*h] = (unsigned)p->requestedHandleTypes;
    return CUDA_SUCCESS;
}

int handle_fd(CUmemGenericAllocationHandle h)
{
    std::lock_guard<std::mutex> lk(g_mu);
    return g_handle_types.count(h) ? (int)(h - 1) : -1;
}

CUresult emu_cuMemRelease(CUmemGenericAllocationHandle h)
{
    int fd = handle_fd(h);
    if (fd < 0)
        return CUDA_ERROR_INVALID_HANDLE;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        g_handle_types.erase(h);
    }
    close(fd); /* the memory lives on while mapped or exported */
    return CUDA_SUCCESS;
}

CUresult emu_cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h,
                                          CUmemAllocationHandleType type, unsigned long long flags)
{
    int fd = handle_fd(h);
    if (fd < 0)
        return CUDA_ERROR_INVALID_HANDLE;
    unsigned types;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        types = g_handle_types[h];
    }
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || flags != 0 ||
        !(types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        return CUDA_ERROR_NOT_SUPPORTED;
    int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dup_fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *(int *)out = dup_fd;
    return CUDA_SUCCESS;
}

/* $IFD_EMU_VMM_FORGET: a driver that dropped the memory of a dead creator. */
void forget_if_creator_died(int fd)
{
    char name[256];
    int pid = 0;
    if (!env_on("IFD_EMU_VMM_FORGET") || !fd_name(getpid(), fd, name, sizeof name) ||
        sscanf(name, "/memfd:cuda_emu_vmm:%d", &pid) != 1 || pid <= 0)
        return;
    if (kill(pid, 0) == 0 || errno != ESRCH)
        return;
    struct stat st;
    if (fstat(fd, &st) == 0)
        (void)fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, st.st_size);
}

CUresult emu_cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os_handle,
                                            CUmemAllocationHandleType type)
{
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    int src = (int)(intptr_t)os_handle;
    char name[256];
    if (src < 0 || !fd_name(getpid(), src, name, sizeof name) ||
        strncmp(name, "/memfd:cuda_emu_vmm:", 20) != 0)
        return CUDA_ERROR_INVALID_HANDLE; /* not an fd the emulated driver exported */
    int fd = fcntl(src, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    forget_if_creator_died(fd);
    *h = (CUmemGenericAllocationHandle)fd + 1;
    std::lock_guard<std::mutex> lk(g_mu);
    g_handle_types[*h] = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return CUDA_SUCCESS;
}

CUresult emu_cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
                                 unsigned long long flags)
{
    (void)align;
    if (size == 0 || size % k_granularity != 0 || addr != 0 || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    void *p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *ptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

CUresult emu_cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    return munmap((void *)(uintptr_t)ptr, size) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult emu_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                      unsigned long long flags)
{
    int fd = handle_fd(h);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        return CUDA_ERROR_INVALID_HANDLE;
    if (flags != 0 || offset % k_granularity != 0 || offset + size > (size_t)st.st_size)
        return CUDA_ERROR_INVALID_VALUE;
    /* The device memory this process maps counts against its budget. */
    if (!ifd__emu_mem_charge(size))
        return CUDA_ERROR_OUT_OF_MEMORY;
    /* Mapped but inaccessible until cuMemSetAccess, as on the driver. */
    void *p = mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, fd,
                   (off_t)offset);
    if (p == MAP_FAILED) {
        ifd__emu_mem_release(size);
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult emu_cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t n)
{
    if (n != 1 || desc->location.type != CU_MEM_LOCATION_TYPE_DEVICE || desc->location.id != 0)
        return CUDA_ERROR_INVALID_VALUE;
    int prot = desc->flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE
               : desc->flags == CU_MEM_ACCESS_FLAGS_PROT_READ    ? PROT_READ
                                                                 : PROT_NONE;
    return mprotect((void *)(uintptr_t)ptr, size, prot) == 0 ? CUDA_SUCCESS
                                                             : CUDA_ERROR_INVALID_VALUE;
}

CUresult emu_cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    /* Back to a bare reservation. */
    void *p = mmap((void *)(uintptr_t)ptr, size, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_INVALID_VALUE;
    ifd__emu_mem_release(size);
    return CUDA_SUCCESS;
}

struct entry_point {
    const char *name;
    void *fn;
};

#define EMU_EP(name) {#name, (void *)emu_##name}
const entry_point k_entry_points[] = {
    EMU_EP(cuGetErrorString),
    EMU_EP(cuDeviceGet),
    EMU_EP(cuDeviceGetAttribute),
    EMU_EP(cuMemGetAllocationGranularity),
    EMU_EP(cuMemCreate),
    EMU_EP(cuMemRelease),
    EMU_EP(cuMemExportToShareableHandle),
    EMU_EP(cuMemImportFromShareableHandle),
    EMU_EP(cuMemAddressReserve),
    EMU_EP(cuMemAddressFree),
    EMU_EP(cuMemMap),
    EMU_EP(cuMemUnmap),
    EMU_EP(cuMemSetAccess),
};
#undef EMU_EP

} // namespace

/* ---- cudaMalloc'ed memory as memfds ------------------------------------------------------- */

void *ifd__emu_dev_alloc(size_t n)
{
    size_t bytes = page_round(n);
    uint64_t nonce;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        nonce = next_nonce();
    }
    char name[64];
    snprintf(name, sizeof name, "cuda_emu_dev:%016" PRIx64, nonce);
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0)
        return NULL;
    if (ftruncate(fd, (off_t)bytes) != 0) {
        close(fd);
        return NULL;
    }
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        return NULL;
    }
    std::lock_guard<std::mutex> lk(g_mu);
    g_allocs[(uintptr_t)p] = dev_alloc{fd, bytes, nonce};
    return p;
}

bool ifd__emu_dev_free(void *p)
{
    dev_alloc a;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        auto it = g_allocs.find((uintptr_t)p);
        if (it == g_allocs.end())
            return false;
        a = it->second;
        g_allocs.erase(it);
    }
    munmap(p, a.bytes);
    close(a.fd);
    return true;
}

extern "C" {

cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned int version,
                                             unsigned long long flags,
                                             cudaDriverEntryPointQueryResult *status)
{
    (void)version;
    (void)flags;
    for (const entry_point &e : k_entry_points)
        if (strcmp(e.name, symbol) == 0) {
            *fn = e.fn;
            if (status)
                *status = cudaDriverEntryPointSuccess;
            return cudaSuccess;
        }
    *fn = NULL;
    if (status)
        *status = cudaDriverEntryPointSymbolNotFound;
    return cudaSuccess;
}

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *p)
{
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = g_allocs.find((uintptr_t)p);
    if (it == g_allocs.end())
        return cudaErrorInvalidValue; /* not the base of a cudaMalloc allocation */
    ipc_handle ih;
    memset(&ih, 0, sizeof ih);
    ih.magic = k_ipc_magic;
    ih.pid = (int32_t)getpid();
    ih.fd = it->second.fd;
    ih.bytes = it->second.bytes;
    ih.nonce = it->second.nonce;
    memset(h, 0, sizeof *h);
    memcpy(h, &ih, sizeof ih);
    return cudaSuccess;
}

cudaError_t cudaIpcOpenMemHandle(void **p, cudaIpcMemHandle_t h, unsigned int flags)
{
    (void)flags;
    ipc_handle ih;
    memcpy(&ih, &h, sizeof ih);
    *p = NULL;
    if (ih.magic != k_ipc_magic || ih.pid <= 0)
        return cudaErrorInvalidResourceHandle;
    if (ih.pid == (int32_t)getpid())
        return cudaErrorInvalidDevice; /* the driver refuses to open one's own handle */
    char want[64], name[256];
    snprintf(want, sizeof want, "/memfd:cuda_emu_dev:%016" PRIx64, ih.nonce);
    if (!fd_name(ih.pid, ih.fd, name, sizeof name) || strncmp(name, want, strlen(want)) != 0)
        return cudaErrorInvalidResourceHandle; /* the allocator is gone (or freed it) */
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)ih.pid, (int)ih.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return cudaErrorInvalidResourceHandle;
    void *m = mmap(NULL, (size_t)ih.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return cudaErrorMemoryAllocation;
    std::lock_guard<std::mutex> lk(g_mu);
    g_ipc_open[(uintptr_t)m] = (size_t)ih.bytes;
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaIpcCloseMemHandle(void *p)
{
    size_t bytes;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        auto it = g_ipc_open.find((uintptr_t)p);
        if (it == g_ipc_open.end())
            return cudaErrorInvalidValue;
        bytes = it->second;
        g_ipc_open.erase(it);
    }
    munmap(p, bytes);
    return cudaSuccess;
}

} /* extern "C" */
