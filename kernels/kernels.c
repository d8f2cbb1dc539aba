/*
 * kernels.c — run-time CPU feature detection for the CPU kernels.
 * The OS must also have enabled the AVX/AVX-512 register state (XCR0),
 * otherwise the instructions fault even though cpuid lists them.
 */
#include "kernels.h"

#include <cpuid.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

static ifd_cpu_features_t ifd__features;
static pthread_once_t ifd__features_once = PTHREAD_ONCE_INIT;

static uint64_t ifd__xgetbv(void)
{
#if defined(__x86_64__) || defined(__i386__)
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
#else
    return 0;
#endif
}

/* Linux ≥ 5.16 hands a process the AMX tile data state (8 KiB a thread)
 * only on request; without it the first tile instruction faults. */
static bool ifd__amx_permitted(void)
{
#if defined(__linux__) && defined(__x86_64__)
    enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#else
    return false;
#endif
}

static void ifd__detect(void)
{
    ifd_cpu_features_t f;
    memset(&f, 0, sizeof f);
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        bool osxsave = (c >> 27) & 1;
        bool avx = (c >> 28) & 1;
        uint64_t xcr0 = osxsave ? ifd__xgetbv() : 0;
        bool ymm = (xcr0 & 0x6) == 0x6;
        bool zmm = (xcr0 & 0xe6) == 0xe6;
        f.fma = avx && ymm && ((c >> 12) & 1);
        f.f16c = avx && ymm && ((c >> 29) & 1);
        if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
            f.avx2 = avx && ymm && ((b >> 5) & 1);
            f.avx512f = zmm && ((b >> 16) & 1);
            f.avx512bw = zmm && ((b >> 30) & 1);
            f.avx512vnni = zmm && ((c >> 11) & 1);
            bool tiles = (xcr0 & 0x60000) == 0x60000; /* XTILECFG, XTILEDATA */
            f.amx_int8 = f.avx512vnni && f.avx512bw && tiles && ((d >> 24) & 1) &&
                         ((d >> 25) & 1) && ifd__amx_permitted();
        }
        if (__get_cpuid_count(7, 1, &a, &b, &c, &d))
            f.avx512bf16 = zmm && ((a >> 5) & 1);
    }
#endif
#if defined(IFD_AVX512_EMU)
    /* tests/cpu_emu: AVX-512 (and AMX's tiles, qmatmul.c) emulated wherever
     * the AVX2 path runs */
    f.avx512f = f.avx512bw = f.avx512vnni = f.amx_int8 = f.avx2 && f.fma && f.f16c;
    f.avx512bf16 = false;
#endif
    const char *cap = getenv("INFERD_CPU");
    if (cap && strcmp(cap, "scalar") == 0)
        memset(&f, 0, sizeof f);
    else if (cap && strcmp(cap, "avx2") == 0)
        f.avx512f = f.avx512bw = f.avx512vnni = f.avx512bf16 = f.amx_int8 = false;
    else if (cap && strcmp(cap, "avx512") == 0)
        f.amx_int8 = false;
    ifd__features = f;
}

const ifd_cpu_features_t *ifd_cpu_features(void)
{
    pthread_once(&ifd__features_once, ifd__detect);
    return &ifd__features;
}

const char *ifd_cpu_isa_name(void)
{
    const ifd_cpu_features_t *f = ifd_cpu_features();
    if (f->avx512f && f->avx512bw)
        return "avx512";
    if (f->avx2 && f->fma)
        return "avx2";
    return "scalar";
}
