/*
 * cuda_emu.h — a CPU emulator for the CUDA kernels of kernels/cuda, so that
 * their indexing, masking and synchronisation can be tested where there is
 * no GPU (this build machine and CI). Test code only; never linked into
 * inferd.
 *
 * How: a kernel source (.cu) is compiled as C++ with -DIFD_CUDA_EMU; its
 * device primitives (kernels/cuda/cuda_prim.cuh) then call the functions
 * below. A launch runs the grid's blocks one after another on the calling
 * thread; the threads of a block are fibers that switch only at
 * synchronisation points (__syncthreads, __syncwarp, shuffles, MMA,
 * ldmatrix), in a pseudo-random order chosen anew at every point, so a
 * missing barrier shows up as wrong results. Barriers are checked: a
 * __syncthreads that not every live thread reaches, or a warp operation with
 * a lane missing, aborts with a message instead of hanging.
 *
 * Faithfulness: a cp.async group lands, at random, when it is committed or
 * only when the issuing thread waits for it (so both a read that did not
 * wait and a buffer refilled too early show up as wrong data); dynamic
 * shared memory starts NaN-poisoned (0xff bytes); ldmatrix and mma follow the
 * PTX fragment layouts. Not emulated: timing, memory-model subtleties, bank
 * conflicts, floating-point details of the hardware's MMA accumulation and
 * its fast math functions (libm is used instead). Streams run synchronously
 * on the calling thread except a stream made with a priority (the backend's
 * copy stream), which is deferred: its copies run only when an event behind
 * them is synchronized, waited on, or queried a second time (the first
 * query answers cudaErrorNotReady), so reading a copy's destination early,
 * or writing its source before it ran, shows up as wrong bytes.
 *
 * The CUDA runtime API subset the kernels and tests use (cudaMalloc,
 * cudaMemcpy, ... declared by the real <cuda_runtime.h>) is implemented in
 * cuda_emu.cc on host memory; "device 0" is the emulator. Single-threaded:
 * call it from one host thread. $IFD_EMU_SEED picks the scheduling order.
 */
#ifndef IFD_CUDA_EMU_H
#define IFD_CUDA_EMU_H

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>

/* The CUDA qualifiers: __shared__ variables become static locals (blocks
 * run one at a time, and all fibers of a block share them). */
#undef __shared__
#define __shared__ static
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

/* ---- launch and built-in variables ----------------------------------------- */

void ifd_emu_launch(dim3 grid, dim3 block, size_t smem, const std::function<void()> &body);
/* A launch on `stream` (IFD_LAUNCH): run now, or recorded into the graph
 * being captured on that stream (the body must hold its arguments by
 * value, as CUDA copies kernel parameters at capture). */
void ifd_emu_launch_on(cudaStream_t stream, dim3 grid, dim3 block, size_t smem,
                       std::function<void()> body);
/* Stream capture (the CUDA-graph slice, cuda_emu.cc's graph section): when
 * `stream` is capturing, appends op to its graph and returns true; else
 * returns false and the caller runs op now. For the emulated libraries
 * (cuBLASLt) whose calls take a stream. */
bool ifd_emu_enqueue(cudaStream_t stream, std::function<void()> op);
/* Counts a cuBLASLt heuristic query / matmul (cuda_emu_counters.h). */
void ifd_emu_count_lt(bool heuristic);
unsigned char *ifd_emu_dyn_smem();
uint3 ifd_emu_thread_idx();
uint3 ifd_emu_block_idx();
dim3 ifd_emu_block_dim();
dim3 ifd_emu_grid_dim();

#define threadIdx (ifd_emu_thread_idx())
#define blockIdx  (ifd_emu_block_idx())
#define blockDim  (ifd_emu_block_dim())
#define gridDim   (ifd_emu_grid_dim())

/* ---- synchronisation ---------------------------------------------------------- */

void __syncthreads();
void __syncwarp(unsigned mask = 0xffffffffu);

/* Deposits n <= 64 bytes from this lane, waits for the whole warp, and
 * copies all 32 lanes' deposits (lane-major, n bytes each) to all. */
void ifd_emu_warp_share(const void *mine, size_t n, void *all);
int ifd_emu_lane();

template <class T> static inline T ifd__emu_pick(T v, int src)
{
    T all[32];
    ifd_emu_warp_share(&v, sizeof v, all);
    return all[src & 31];
}

template <class T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32)
{
    (void)mask;
    (void)width;
    return ifd__emu_pick(v, src);
}

template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int lm, int width = 32)
{
    (void)mask;
    (void)width;
    return ifd__emu_pick(v, ifd_emu_lane() ^ lm);
}

template <class T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32)
{
    (void)mask;
    (void)width;
    int l = ifd_emu_lane();
    T r = ifd__emu_pick(v, l >= (int)d ? l - (int)d : l);
    return r;
}

template <class T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32)
{
    (void)mask;
    (void)width;
    int l = ifd_emu_lane();
    return ifd__emu_pick(v, l + (int)d < 32 ? l + (int)d : l);
}

/* ---- atomics: fibers switch only at sync points, so plain updates are atomic */

template <class T> static inline T atomicAdd(T *p, T v)
{
    T old = *p;
    *p = old + v;
    return old;
}

template <class T> static inline T atomicMax(T *p, T v)
{
    T old = *p;
    if (v > old)
        *p = v;
    return old;
}

/* ---- arithmetic intrinsics (IEEE round-to-nearest host operations; the
 * emulator's translation units are compiled with -ffp-contract=off) ------- */

static inline float __fdiv_rn(float a, float b)
{
    return a / b;
}
static inline float __fmul_rn(float a, float b)
{
    return a * b;
}
static inline float __fadd_rn(float a, float b)
{
    return a + b;
}
static inline float __fsub_rn(float a, float b)
{
    return a - b;
}
static inline float __fsqrt_rn(float a)
{
    return sqrtf(a);
}
static inline double __dmul_rn(double a, double b)
{
    return a * b;
}
static inline double __dadd_rn(double a, double b)
{
    return a + b;
}
static inline double __dsub_rn(double a, double b)
{
    return a - b;
}
static inline uint64_t __umul64hi(uint64_t a, uint64_t b)
{
    return (uint64_t)(((unsigned __int128)a * b) >> 64);
}
static inline float __int_as_float(int i)
{
    float f;
    memcpy(&f, &i, 4);
    return f;
}
static inline int __float_as_int(float f)
{
    int i;
    memcpy(&i, &f, 4);
    return i;
}
static inline float rsqrtf(float x)
{
    return 1.0f / sqrtf(x);
}
template <class T> static inline T __ldg(const T *p)
{
    return *p;
}

/* ---- 16-bit floats ---------------------------------------------------------- */

float ifd_emu_f16_to_f32(uint16_t h);
uint16_t ifd_emu_f32_to_f16(float f);

/* ---- tensor cores, ldmatrix, cp.async (warp-collective where PTX is) ---- */

void ifd_emu_mma_16816(float c[4], const uint32_t a[4], const uint32_t b[2], bool bf16);
/* mma.m16n8k32 with s8 inputs and s32 accumulation (exact integer sums). */
void ifd_emu_mma_16832_s8(int32_t c[4], const uint32_t a[4], const uint32_t b[2]);
void ifd_emu_ldmatrix_x4(uint32_t r[4], const void *row_addr, bool trans);
void ifd_emu_cp_async16(void *dst, const void *src, bool valid);
void ifd_emu_cp_async_commit();
void ifd_emu_cp_async_wait(int n);

#endif
