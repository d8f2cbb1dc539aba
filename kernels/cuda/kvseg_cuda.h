/*
 * kvseg_cuda.h — the CUDA device-memory provider for the KV pool's data
 * segments (ifd_kvseg_provider_t in common/kvpool/kvpool.h). Built only with the
 * CUDA backend (IFD_HAVE_CUDA); common/ and the router never link CUDA, so
 * this lives with the kernels and the worker hands it to
 * ifd_kvpool_bind_segment.
 *
 * Preferred path (IFD_KVSEG_CUDA_VMM): cuMemCreate with a POSIX
 * file-descriptor shareable handle, exported with
 * cuMemExportToShareableHandle. The fd travels like a memfd (SCM_RIGHTS) and
 * holds a reference to the physical allocation: the router keeps it, so the
 * memory — and every cached prefix block in it — survives the death of the
 * worker that allocated it; a restarted worker imports the same fd
 * (cuMemImportFromShareableHandle) and maps it again.
 * Fallback (IFD_KVSEG_CUDA_IPC, when the device or driver lacks VMM or POSIX
 * fd handles, when the pool asks for it, or when forced): cudaMalloc + cudaIpcGetMemHandle; the 64-byte
 * handle is stored in the pool's metadata and other processes open it with
 * cudaIpcOpenMemHandle. This memory dies with the allocating process: after
 * that worker dies the router must call ifd_kvpool_invalidate_device.
 *
 * Driver API entry points are fetched through the runtime
 * (cudaGetDriverEntryPointByVersion), so binaries do not link libcuda and
 * start (and skip) on machines without a driver.
 *
 * Threading: a provider may be used by one pool handle at a time; CUDA
 * calls run on the calling thread's current device, which create/import
 * set to `dev`. Errors: IFD_ECUDA (logged with the driver's message),
 * IFD_ENODEV, IFD_ENOTSUP, IFD_ENOMEM.
 */
#ifndef IFD_KVSEG_CUDA_H
#define IFD_KVSEG_CUDA_H

#include <stdbool.h>

#include "kvpool/kvpool.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ifd_cuda_kvseg ifd_cuda_kvseg_t;

/* Makes a provider. force_ipc skips VMM (tests the fallback). device: the
 * CUDA device (ordinal in this process) its segments live on, whatever the
 * pool's device index is — a GPU worker sees its GPU as device 0 under
 * CUDA_VISIBLE_DEVICES while it serves pool device i; device < 0 takes the
 * pool's index as the ordinal. 0 or IFD_ENOMEM. Destroy it after every pool
 * handle that uses it. */
int ifd_cuda_kvseg_create(bool force_ipc, int device, ifd_cuda_kvseg_t **out);
void ifd_cuda_kvseg_destroy(ifd_cuda_kvseg_t *s);

/* The provider to pass to ifd_kvpool_bind_segment; lives as long as s. */
const ifd_kvseg_provider_t *ifd_cuda_kvseg_provider(ifd_cuda_kvseg_t *s);

/* Host <-> device copies of n bytes (synchronous), for tests and tools.
 * 0 or IFD_ECUDA. */
int ifd_cuda_kvseg_upload(void *dst_dev, const void *src_host, size_t n);
int ifd_cuda_kvseg_download(void *dst_host, const void *src_dev, size_t n);

#ifdef __cplusplus
}
#endif

#endif
