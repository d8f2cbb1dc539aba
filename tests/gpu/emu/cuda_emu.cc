/*
 * cuda_emu.cc — the CPU emulator behind cuda_emu.h: fibers for the threads
 * of a block, checked barriers, warp-collective operations, lazy cp.async,
 * and the CUDA runtime API subset on host memory.
 *
 * Scheduling: every thread of the current block is a fiber (ucontext for its
 * first entry, _setjmp/_longjmp for every later switch, which needs no system
 * call). The scheduler makes passes over the fibers in a freshly shuffled
 * order, resuming each runnable one until it reaches a synchronisation point
 * or ends; after a pass, a block barrier opens when every live thread waits
 * at it, a warp barrier when all 32 lanes of the warp do. A pass in which
 * nothing ran and nothing opened is a deadlock (a divergent barrier) and
 * aborts. Warp exchanges use two deposit buffers alternately, so each needs
 * one barrier: a lane can only overwrite a buffer after the next exchange's
 * barrier, which every lane reaches after reading it.
 *
 * Test code: global state and abort() on misuse are fine here.
 */
#include "cuda_emu.h"
#include "cuda_emu_counters.h"
#include "cuda_emu_vmm.h"

#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <unordered_map>
#include <ucontext.h>
#include <vector>

/* A stream and a graph (the graph section at the end): a captured graph is
 * the list of operations recorded in stream order; an instantiated one a
 * copy of it. Every operation captured its arguments by value. */
struct CUstream_st {
    bool capturing = false;
    bool invalidated = false;
    std::vector<std::function<void()>> ops;
    /* A deferred stream (cudaStreamCreateWithPriority: the backend's copy
     * stream) does not run its operations when issued: they wait in
     * `later` until an event recorded behind them is synchronized, waited
     * on by another stream, or queried a second time (the first query
     * answers cudaErrorNotReady), or until the stream is synchronized or
     * destroyed. So the device's asynchrony is visible: a caller that reads
     * a copy's destination early, or lets its source be written before the
     * copy ran, gets the wrong bytes here too. */
    bool deferred = false;
    std::vector<std::function<void()>> later;
    size_t ran = 0; /* of later */
};
/* An event: its time (cudaEventElapsedTime) and, recorded on a deferred
 * stream, that stream and how many of its operations precede it. */
struct CUevent_st {
    double ms = 0.0;
    CUstream_st *stream = nullptr;
    size_t upto = 0;
    int queries = 0;
};
struct CUgraph_st {
    std::vector<std::function<void()>> ops;
};
struct CUgraphExec_st {
    std::vector<std::function<void()>> ops;
    size_t bytes; /* charged to the device's memory (cudaGraphInstantiate) */
};

namespace
{

enum fiber_state { F_RUN, F_BAR_BLOCK, F_BAR_WARP, F_DONE };

struct copy_op {
    void *dst;
    const void *src;
    bool valid;
};

struct fiber {
    ucontext_t uc;
    jmp_buf jb;
    bool started = false;
    fiber_state st = F_RUN;
    uint3 tid;
    int lane = 0, warp = 0;
    int xparity = 0; /* which warp deposit buffer the next exchange uses */
    std::vector<copy_op> open_group;
    std::vector<std::vector<copy_op>> groups; /* committed, oldest first */
};

struct warp_buf {
    unsigned char slot[2][32][64];
};

struct block_state {
    dim3 grid, block;
    uint3 bidx;
    std::vector<fiber> f;
    std::vector<warp_buf> wb;
    jmp_buf sched;
    int cur = -1;
    const std::function<void()> *body = nullptr;
};

block_state *g_blk;
std::vector<unsigned char> g_smem;
std::vector<char *> g_stacks;
const size_t k_stack = 256 * 1024;
uint64_t g_rng = 0;
cudaError_t g_last = cudaSuccess;

uint64_t next_rand()
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

void die(const char *what)
{
    fprintf(stderr, "cuda_emu: %s (block %u,%u,%u)\n", what, g_blk ? g_blk->bidx.x : 0,
            g_blk ? g_blk->bidx.y : 0, g_blk ? g_blk->bidx.z : 0);
    abort();
}

fiber &me()
{
    if (!g_blk || g_blk->cur < 0)
        die("device function called outside a kernel launch");
    return g_blk->f[(size_t)g_blk->cur];
}

/* Back to the scheduler; returns when this fiber is resumed. */
void yield_to_sched()
{
    fiber &f = me();
    if (!_setjmp(f.jb))
        _longjmp(g_blk->sched, 1);
}

void fiber_entry()
{
    (*g_blk->body)();
    fiber &f = me();
    f.st = F_DONE;
    _longjmp(g_blk->sched, 1);
}

void apply(const copy_op &c)
{
    if (c.valid)
        memcpy(c.dst, c.src, 16);
    else
        memset(c.dst, 0, 16);
}

/* Runs fiber i until it yields or ends. Kept out of line so that no local of
 * the scheduler loop lives across the _setjmp. */
__attribute__((noinline)) void resume(block_state &b, int i)
{
    fiber &f = b.f[(size_t)i];
    b.cur = i;
    if (!_setjmp(b.sched)) {
        if (!f.started) {
            f.started = true;
            ucontext_t here;
            swapcontext(&here, &f.uc);
        } else {
            _longjmp(f.jb, 1);
        }
    }
    b.cur = -1;
}

void run_block()
{
    block_state &b = *g_blk;
    const size_t n = b.f.size();
    std::vector<size_t> order(n);
    size_t alive = n;
    while (alive > 0) {
        for (size_t i = 0; i < n; i++)
            order[i] = i;
        for (size_t i = n; i > 1; i--) {
            size_t j = (size_t)(next_rand() % i);
            size_t t = order[i - 1];
            order[i - 1] = order[j];
            order[j] = t;
        }
        bool progress = false;
        for (size_t k = 0; k < n; k++) {
            fiber &f = b.f[order[k]];
            if (f.st != F_RUN)
                continue;
            progress = true;
            resume(b, (int)order[k]);
        }
        /* Open barriers. */
        alive = 0;
        size_t at_block = 0;
        for (auto &f : b.f) {
            if (f.st != F_DONE)
                alive++;
            if (f.st == F_BAR_BLOCK)
                at_block++;
        }
        if (alive > 0 && at_block == alive) {
            for (auto &f : b.f)
                if (f.st == F_BAR_BLOCK)
                    f.st = F_RUN;
            progress = true;
        }
        for (size_t w = 0; w < n / 32; w++) {
            int waiting = 0, done = 0;
            for (size_t l = 0; l < 32; l++) {
                fiber_state s = b.f[w * 32 + l].st;
                waiting += s == F_BAR_WARP;
                done += s == F_DONE;
            }
            if (waiting == 32) {
                for (size_t l = 0; l < 32; l++)
                    b.f[w * 32 + l].st = F_RUN;
                progress = true;
            } else if (waiting > 0 && done > 0) {
                die("warp operation with exited lanes");
            }
        }
        if (alive > 0 && !progress)
            die("deadlock: threads wait at different barriers (divergent __syncthreads?)");
    }
}

void bar(fiber_state kind)
{
    me().st = kind;
    yield_to_sched();
}

/* ---- stream capture state (the graph section at the end) ---- */

ifd_emu_counters_t g_count;
int g_capturing = 0; /* streams capturing now: "unsafe" calls fail meanwhile */

/* An unsafe call (allocation, synchronous copy, synchronisation) while a
 * capture in cudaStreamCaptureModeGlobal runs: CUDA refuses it and
 * invalidates the capture; so does the emulator (see the graph section). */
bool capture_violation(const char *what);

} // namespace

/* ---- launch ---------------------------------------------------------------------- */

void ifd_emu_launch(dim3 grid, dim3 block, size_t smem, const std::function<void()> &body)
{
    size_t nthreads = (size_t)block.x * block.y * block.z;
    if (nthreads == 0 || nthreads % 32 != 0 || nthreads > 1024 || grid.x == 0 || grid.y == 0 ||
        grid.z == 0) {
        g_last = cudaErrorInvalidConfiguration;
        return;
    }
    if (smem > 227 * 1024) {
        g_last = cudaErrorInvalidValue;
        return;
    }
    if (g_rng == 0) {
        const char *s = getenv("IFD_EMU_SEED");
        g_rng = s ? strtoull(s, nullptr, 0) : 0x9e3779b97f4a7c15ull;
        if (g_rng == 0)
            g_rng = 1;
    }
    while (g_stacks.size() < nthreads)
        g_stacks.push_back((char *)malloc(k_stack));
    g_smem.assign(smem + 16, 0xff);

    g_count.launches++;
    block_state b;
    b.grid = grid;
    b.block = block;
    b.body = &body;
    g_blk = &b;
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                b.bidx = make_uint3(bx, by, bz);
                b.f.assign(nthreads, fiber());
                b.wb.assign(nthreads / 32, warp_buf());
                memset(g_smem.data(), 0xff, g_smem.size());
                for (size_t i = 0; i < nthreads; i++) {
                    fiber &f = b.f[i];
                    f.tid = make_uint3((unsigned)(i % block.x), (unsigned)(i / block.x % block.y),
                                       (unsigned)(i / ((size_t)block.x * block.y)));
                    f.lane = (int)(i % 32);
                    f.warp = (int)(i / 32);
                    getcontext(&f.uc);
                    f.uc.uc_stack.ss_sp = g_stacks[i];
                    f.uc.uc_stack.ss_size = k_stack;
                    f.uc.uc_link = nullptr;
                    makecontext(&f.uc, fiber_entry, 0);
                }
                run_block();
            }
    g_blk = nullptr;
}

unsigned char *ifd_emu_dyn_smem()
{
    uintptr_t p = (uintptr_t)g_smem.data();
    return (unsigned char *)((p + 15) & ~(uintptr_t)15);
}

uint3 ifd_emu_thread_idx()
{
    return me().tid;
}

uint3 ifd_emu_block_idx()
{
    me();
    return g_blk->bidx;
}

dim3 ifd_emu_block_dim()
{
    me();
    return g_blk->block;
}

dim3 ifd_emu_grid_dim()
{
    me();
    return g_blk->grid;
}

int ifd_emu_lane()
{
    return me().lane;
}

void __syncthreads()
{
    bar(F_BAR_BLOCK);
}

void __syncwarp(unsigned mask)
{
    if (mask != 0xffffffffu)
        die("__syncwarp with a partial mask is not emulated");
    bar(F_BAR_WARP);
}

void ifd_emu_warp_share(const void *mine, size_t n, void *all)
{
    if (n > 64)
        die("warp exchange larger than 64 bytes");
    fiber &f = me();
    warp_buf &w = g_blk->wb[(size_t)f.warp];
    int p = f.xparity;
    f.xparity ^= 1;
    memcpy(w.slot[p][f.lane], mine, n);
    bar(F_BAR_WARP);
    for (int l = 0; l < 32; l++)
        memcpy((unsigned char *)all + (size_t)l * n, w.slot[p][l], n);
}

/* ---- 16-bit floats ------------------------------------------------------------ */

float ifd_emu_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    int e = (h >> 10) & 0x1f;
    uint32_t m = h & 0x3ff;
    uint32_t u;
    if (e == 0x1f) {
        u = sign | 0x7f800000u | (m << 13);
    } else if (e == 0) {
        if (m == 0) {
            u = sign;
        } else {
            float f = ldexpf((float)m, -24);
            memcpy(&u, &f, 4);
            u |= sign;
        }
    } else {
        u = sign | ((uint32_t)(e - 15 + 127) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t ifd_emu_f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) /* rounds to >= 65520: inf */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below 2^-14: subnormal half (or zero) */
        float af;
        memcpy(&af, &a, 4);
        float q = af * 16777216.0f; /* units of 2^-24, exact */
        float r = nearbyintf(q);    /* round half to even (default mode) */
        return (uint16_t)(sign | (uint16_t)r);
    }
    uint32_t e = (a >> 23) - 127 + 15;
    uint32_t m = a & 0x7fffffu;
    uint32_t v = (e << 10) | (m >> 13);
    uint32_t rest = m & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (v & 1u)))
        v++;
    return (uint16_t)(sign | v);
}

/* ---- mma, ldmatrix, cp.async -------------------------------------------------------- */

void ifd_emu_mma_16816(float c[4], const uint32_t a[4], const uint32_t b[2], bool bf16)
{
    struct frag {
        uint32_t a[4], b[2];
    } mine, all[32];
    memcpy(mine.a, a, sizeof mine.a);
    memcpy(mine.b, b, sizeof mine.b);
    ifd_emu_warp_share(&mine, sizeof mine, all);
    auto h2f = [bf16](uint16_t h) {
        if (bf16) {
            uint32_t u = (uint32_t)h << 16;
            float f;
            memcpy(&f, &u, 4);
            return f;
        }
        return ifd_emu_f16_to_f32(h);
    };
    auto A = [&](int r, int k) {
        int lane = (r % 8) * 4 + (k % 8) / 2;
        int reg = (r >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
        uint32_t v = all[lane].a[reg];
        return h2f((uint16_t)(k % 2 ? v >> 16 : v & 0xffff));
    };
    auto B = [&](int k, int n) {
        int lane = n * 4 + (k % 8) / 2;
        uint32_t v = all[lane].b[k >= 8 ? 1 : 0];
        return h2f((uint16_t)(k % 2 ? v >> 16 : v & 0xffff));
    };
    int lane = ifd_emu_lane(), g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; i++) {
        int r = g + (i >= 2 ? 8 : 0), n = 2 * t + (i % 2);
        float s = c[i];
        for (int k = 0; k < 16; k++)
            s += A(r, k) * B(k, n);
        c[i] = s;
    }
}

/* PTX ISA "mma.m16n8k32" for .s8: a[0] = A[g][4t..4t+3], a[1] = A[g+8][4t..4t+3],
 * a[2] = A[g][16+4t..16+4t+3], a[3] = A[g+8][16+4t..], b[0] = B[4t..4t+3][g],
 * b[1] = B[16+4t..16+4t+3][g], bytes in k order (lowest byte first); C as m16n8k16's.
 * The sums are exact in int32 (|A·B| <= 32 · 128 · 128), as on the hardware. */
void ifd_emu_mma_16832_s8(int32_t c[4], const uint32_t a[4], const uint32_t b[2])
{
    struct frag {
        uint32_t a[4], b[2];
    } mine, all[32];
    memcpy(mine.a, a, sizeof mine.a);
    memcpy(mine.b, b, sizeof mine.b);
    ifd_emu_warp_share(&mine, sizeof mine, all);
    auto byte = [](uint32_t v, int k) { return (int32_t)(int8_t)(uint8_t)(v >> (8 * (k % 4))); };
    auto A = [&](int r, int k) {
        int lane = (r % 8) * 4 + (k % 16) / 4;
        int reg = (r >= 8 ? 1 : 0) + (k >= 16 ? 2 : 0);
        return byte(all[lane].a[reg], k);
    };
    auto B = [&](int k, int n) {
        int lane = n * 4 + (k % 16) / 4;
        return byte(all[lane].b[k >= 16 ? 1 : 0], k);
    };
    int lane = ifd_emu_lane(), g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; i++) {
        int r = g + (i >= 2 ? 8 : 0), n = 2 * t + (i % 2);
        int32_t s = c[i];
        for (int k = 0; k < 32; k++)
            s += A(r, k) * B(k, n);
        c[i] = s;
    }
}

void ifd_emu_ldmatrix_x4(uint32_t r[4], const void *row_addr, bool trans)
{
    const unsigned char *all[32];
    const unsigned char *mine = (const unsigned char *)row_addr;
    if (((uintptr_t)mine & 15) != 0)
        die("ldmatrix row address not 16-byte aligned");
    ifd_emu_warp_share(&mine, sizeof mine, all);
    int lane = ifd_emu_lane();
    for (int i = 0; i < 4; i++) {
        if (!trans) {
            memcpy(&r[i], all[i * 8 + lane / 4] + 4 * (lane % 4), 4);
        } else {
            uint16_t lo, hi;
            memcpy(&lo, all[i * 8 + 2 * (lane % 4)] + 2 * (lane / 4), 2);
            memcpy(&hi, all[i * 8 + 2 * (lane % 4) + 1] + 2 * (lane / 4), 2);
            r[i] = (uint32_t)lo | ((uint32_t)hi << 16);
        }
    }
}

void ifd_emu_cp_async16(void *dst, const void *src, bool valid)
{
    if (((uintptr_t)dst & 15) != 0 || (valid && ((uintptr_t)src & 15) != 0))
        die("cp.async with a misaligned address");
    me().open_group.push_back(copy_op{dst, src, valid});
}

/* A committed group lands, at random, either at once or only when waited
 * for: the first exposes a buffer overwritten while others still read it,
 * the second a read that did not wait. */
void ifd_emu_cp_async_commit()
{
    fiber &f = me();
    if (next_rand() & 1) {
        for (const copy_op &c : f.open_group)
            apply(c);
        f.open_group.clear();
    }
    f.groups.push_back(std::move(f.open_group));
    f.open_group.clear();
}

void ifd_emu_cp_async_wait(int n)
{
    fiber &f = me();
    while (f.groups.size() > (size_t)n) {
        for (const copy_op &c : f.groups.front())
            apply(c);
        f.groups.erase(f.groups.begin());
    }
}

/* ---- the CUDA runtime API subset ------------------------------------------------------- */

/* Device memory is shareable host memory (cuda_emu_vmm.cc: IPC handles),
 * $IFD_EMU_DEVICE_MIB of it (default 1 GiB): cudaMemGetInfo reports as in
 * use what this process holds — cudaMalloc'ed bytes, mapped VMM memory and
 * graphs (cuda_emu_vmm.h) — and an allocation that does not fit fails with
 * cudaErrorMemoryAllocation (the daemon sizes its KV pool from that; a pool
 * sized too large makes the worker's steps fail here as on a GPU). */
static std::mutex g_dev_mu;
static size_t g_dev_used;
static std::unordered_map<uintptr_t, size_t> g_dev_sizes;

static size_t dev_total()
{
    static const size_t total = [] {
        const char *s = getenv("IFD_EMU_DEVICE_MIB");
        long v = s ? strtol(s, nullptr, 10) : 0;
        return (size_t)(v > 0 ? v : 1024) << 20;
    }();
    return total;
}

bool ifd__emu_mem_charge(size_t n)
{
    std::lock_guard<std::mutex> lk(g_dev_mu);
    if (n > dev_total() - g_dev_used)
        return false;
    g_dev_used += n;
    return true;
}

void ifd__emu_mem_release(size_t n)
{
    std::lock_guard<std::mutex> lk(g_dev_mu);
    g_dev_used -= n < g_dev_used ? n : g_dev_used;
}

/* Runs a deferred stream's operations up to (not including) index upto. */
static void emu_run_deferred(CUstream_st *s, size_t upto)
{
    while (s && s->ran < upto && s->ran < s->later.size())
        s->later[s->ran++]();
}

extern "C" {

cudaError_t cudaMalloc(void **p, size_t n)
{
    if (capture_violation("cudaMalloc"))
        return g_last = cudaErrorStreamCaptureUnsupported;
    g_count.mallocs++;
    *p = nullptr;
    if (!ifd__emu_mem_charge(n))
        return g_last = cudaErrorMemoryAllocation;
    *p = ifd__emu_dev_alloc(n);
    if (*p) {
        std::lock_guard<std::mutex> lk(g_dev_mu);
        g_dev_sizes[(uintptr_t)*p] = n;
    } else {
        ifd__emu_mem_release(n);
    }
    return *p ? cudaSuccess : (g_last = cudaErrorMemoryAllocation);
}

cudaError_t cudaFree(void *p)
{
    if (capture_violation("cudaFree"))
        return g_last = cudaErrorStreamCaptureUnsupported;
    g_count.frees += p != nullptr;
    if (p && !ifd__emu_dev_free(p))
        return g_last = cudaErrorInvalidValue;
    if (p) {
        size_t n = 0;
        {
            std::lock_guard<std::mutex> lk(g_dev_mu);
            auto it = g_dev_sizes.find((uintptr_t)p);
            if (it != g_dev_sizes.end()) {
                n = it->second;
                g_dev_sizes.erase(it);
            }
        }
        ifd__emu_mem_release(n);
    }
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind k)
{
    (void)k;
    if (capture_violation("cudaMemcpy"))
        return g_last = cudaErrorStreamCaptureUnsupported;
    memmove(d, s, n);
    return cudaSuccess;
}

/* Async copies and sets: recorded by value while their stream captures. */
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t st)
{
    (void)k;
    if (!ifd_emu_enqueue(st, [=]() { memmove(d, s, n); }))
        memmove(d, s, n);
    return cudaSuccess;
}

cudaError_t cudaMemset(void *d, int v, size_t n)
{
    if (capture_violation("cudaMemset"))
        return g_last = cudaErrorStreamCaptureUnsupported;
    memset(d, v, n);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t st)
{
    if (!ifd_emu_enqueue(st, [=]() { memset(d, v, n); }))
        memset(d, v, n);
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = g_last;
    g_last = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void)
{
    return g_last;
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess:
        return "no error (emulator)";
    case cudaErrorInvalidValue:
        return "invalid argument (emulator)";
    case cudaErrorMemoryAllocation:
        return "out of memory (emulator)";
    case cudaErrorInvalidConfiguration:
        return "invalid configuration argument (emulator)";
    default:
        return "error (emulator)";
    }
}

const char *cudaGetErrorName(cudaError_t e)
{
    return cudaGetErrorString(e);
}

cudaError_t cudaDeviceSynchronize(void)
{
    if (capture_violation("cudaDeviceSynchronize"))
        return g_last = cudaErrorStreamCaptureUnsupported;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    if (capture_violation("cudaStreamSynchronize"))
        return g_last = cudaErrorStreamCaptureUnsupported;
    if (s && s->deferred)
        emu_run_deferred(s, s->later.size());
    return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *n)
{
    *n = 1;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *d)
{
    *d = 0;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int d)
{
    return d == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}

cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int dev)
{
    (void)dev;
    switch (a) {
    case cudaDevAttrMultiProcessorCount:
        *v = 4;
        break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
        *v = 227 * 1024;
        break;
    case cudaDevAttrComputeCapabilityMajor:
        *v = 9;
        break;
    case cudaDevAttrComputeCapabilityMinor:
        *v = 0;
        break;
    default:
        *v = 0;
        break;
    }
    return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void *f, cudaFuncAttribute a, int v)
{
    (void)f;
    (void)a;
    (void)v;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev)
{
    if (dev != 0)
        return cudaErrorInvalidDevice;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "inferd CUDA emulator (CPU)");
    p->totalGlobalMem = dev_total();
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 4;
    return cudaSuccess;
}

/* Events: host wall-clock time (the emulator runs launches synchronously),
 * and on a deferred stream the point they complete at (CUstream_st). */
cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    *e = new CUevent_st();
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    (void)flags;
    return cudaEventCreate(e);
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    delete e;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    e->ms = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
    e->stream = s && s->deferred ? s : nullptr;
    e->upto = e->stream ? s->later.size() : 0;
    e->queries = 0;
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    emu_run_deferred(e->stream, e->upto);
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
    if (!e->stream || e->stream->ran >= e->upto)
        return cudaSuccess;
    if (e->queries++ == 0)
        return cudaErrorNotReady; /* not an error: cudaGetLastError stays clean */
    emu_run_deferred(e->stream, e->upto);
    return cudaSuccess;
}

/* Another stream waiting for e: the emulator runs what e waits for now (a
 * deferred stream waiting for a synchronous one has nothing to wait for). */
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    (void)flags;
    if (e->stream && e->stream != s)
        emu_run_deferred(e->stream, e->upto);
    return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    *ms = (float)(b->ms - a->ms);
    return cudaSuccess;
}

/* Streams: launches and copies run synchronously on the calling thread, so
 * a stream only holds its capture state (the graph section). */
cudaError_t cudaStreamCreate(cudaStream_t *s)
{
    *s = new CUstream_st();
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    (void)flags;
    return cudaStreamCreate(s);
}

/* A stream with a priority: deferred (CUstream_st), as the backend's copy
 * stream is the only one made so. */
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags, int priority)
{
    (void)flags;
    (void)priority;
    *s = new CUstream_st();
    (*s)->deferred = true;
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    if (s && s->capturing)
        return g_last = cudaErrorStreamCaptureUnmatched;
    if (s && s->deferred)
        emu_run_deferred(s, s->later.size());
    delete s;
    return cudaSuccess;
}

cudaError_t cudaMemcpy2DAsync(void *d, size_t dpitch, const void *s, size_t spitch, size_t width,
                              size_t height, cudaMemcpyKind k, cudaStream_t st)
{
    (void)k;
    if (width > dpitch || width > spitch)
        return g_last = cudaErrorInvalidValue;
    auto op = [=]() {
        for (size_t r = 0; r < height; r++)
            memmove((char *)d + r * dpitch, (const char *)s + r * spitch, width);
    };
    if (!ifd_emu_enqueue(st, op))
        op();
    return cudaSuccess;
}

/* Pinned host memory: plain host memory here, counted apart from cudaMalloc. */
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags)
{
    (void)flags;
    if (capture_violation("cudaHostAlloc"))
        return g_last = cudaErrorStreamCaptureUnsupported;
    g_count.host_allocs++;
    *p = aligned_alloc(256, (n + 255) & ~(size_t)255);
    return *p ? cudaSuccess : (g_last = cudaErrorMemoryAllocation);
}

cudaError_t cudaMallocHost(void **p, size_t n)
{
    return cudaHostAlloc(p, n, 0);
}

cudaError_t cudaFreeHost(void *p)
{
    if (capture_violation("cudaFreeHost"))
        return g_last = cudaErrorStreamCaptureUnsupported;
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total)
{
    std::lock_guard<std::mutex> lk(g_dev_mu);
    size_t used = g_dev_used;
    *free_b = used < dev_total() ? dev_total() - used : 0;
    *total = dev_total();
    return cudaSuccess;
}

} /* extern "C" */

/* ---- CUDA graphs and counters (gpu-step, issue 13) -------------------------------------
 * Stream capture records every asynchronous operation issued on the
 * capturing stream (kernel launches, async copies and sets, cuBLASLt
 * matmuls) with its arguments by value, without running it; the graph
 * replays them in order on cudaGraphLaunch. As in CUDA's global capture
 * mode, an unsafe call while any capture runs (cudaMalloc, cudaFree,
 * cudaHostAlloc, synchronous copies, synchronisation) fails with
 * cudaErrorStreamCaptureUnsupported and invalidates the capture, so a
 * backend that allocates or synchronises inside a graph is caught here
 * rather than on the device. Only the legacy default stream (NULL) cannot
 * capture. */

namespace
{

std::vector<CUstream_st *> g_capture_streams;

bool capture_violation(const char *what)
{
    if (g_capturing == 0)
        return false;
    fprintf(stderr, "cuda_emu: %s during stream capture (invalidates the capture)\n", what);
    for (CUstream_st *st : g_capture_streams)
        st->invalidated = true;
    return true;
}

} // namespace

bool ifd_emu_enqueue(cudaStream_t stream, std::function<void()> op)
{
    if (stream && stream->deferred) {
        stream->later.push_back(std::move(op));
        return true;
    }
    if (!stream || !stream->capturing)
        return false;
    stream->ops.push_back(std::move(op));
    return true;
}

void ifd_emu_launch_on(cudaStream_t stream, dim3 grid, dim3 block, size_t smem,
                       std::function<void()> body)
{
    if (stream && stream->capturing) {
        /* a bad configuration fails at the launch, as on the device */
        size_t nthreads = (size_t)block.x * block.y * block.z;
        if (nthreads == 0 || nthreads % 32 != 0 || nthreads > 1024 || grid.x == 0 ||
            grid.y == 0 || grid.z == 0 || smem > 227 * 1024) {
            g_last = cudaErrorInvalidConfiguration;
            return;
        }
        stream->ops.push_back([=]() { ifd_emu_launch(grid, block, smem, body); });
        return;
    }
    ifd_emu_launch(grid, block, smem, body);
}

void ifd_emu_count_lt(bool heuristic)
{
    if (heuristic)
        g_count.lt_heuristics++;
    else
        g_count.lt_matmuls++;
}

extern "C" {

void ifd_emu_counters(ifd_emu_counters_t *out)
{
    *out = g_count;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode)
{
    (void)mode; /* every capture is treated as global (the strictest) */
    if (!s || s->capturing)
        return g_last = cudaErrorIllegalState;
    s->capturing = true;
    s->invalidated = false;
    s->ops.clear();
    g_capturing++;
    g_capture_streams.push_back(s);
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus *st)
{
    *st = !s || !s->capturing      ? cudaStreamCaptureStatusNone
          : s->invalidated         ? cudaStreamCaptureStatusInvalidated
                                   : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g)
{
    if (!s || !s->capturing)
        return g_last = cudaErrorIllegalState;
    s->capturing = false;
    g_capturing--;
    for (size_t i = 0; i < g_capture_streams.size(); i++)
        if (g_capture_streams[i] == s)
            g_capture_streams.erase(g_capture_streams.begin() + (long)i);
    *g = nullptr;
    if (s->invalidated) {
        s->ops.clear();
        return g_last = cudaErrorStreamCaptureInvalidated;
    }
    CUgraph_st *graph = new CUgraph_st();
    graph->ops.swap(s->ops);
    *g = graph;
    g_count.graph_captures++;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long flags)
{
    (void)flags;
    if (!g)
        return g_last = cudaErrorInvalidValue;
    /* An instantiated graph holds device memory (its nodes' parameters and
     * the driver's bookkeeping): charged here so that pool sizing has to
     * count graphs. 1 MiB + 64 KiB per operation is a stand-in, larger
     * than a real driver's (so that a test's small device notices graphs
     * left out of the sizing), not a measurement of one. */
    const size_t bytes = ((size_t)1 << 20) + g->ops.size() * ((size_t)64 << 10);
    if (!ifd__emu_mem_charge(bytes))
        return g_last = cudaErrorMemoryAllocation;
    CUgraphExec_st *x = new CUgraphExec_st();
    x->ops = g->ops;
    x->bytes = bytes;
    *e = x;
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s)
{
    if (!e)
        return g_last = cudaErrorInvalidValue;
    g_count.graph_launches++;
    if (s && s->capturing) { /* a graph launched into a capture: its operations */
        for (auto &op : e->ops)
            s->ops.push_back(op);
        return cudaSuccess;
    }
    for (auto &op : e->ops)
        op();
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e)
{
    if (e)
        ifd__emu_mem_release(e->bytes);
    delete e;
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
    delete g;
    return cudaSuccess;
}

} /* extern "C" */
