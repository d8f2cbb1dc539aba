/*
 * kernels.h — the compute kernels' C interface (CPU today; CUDA behind the
 * same shapes in kernels/cuda). Kernels know nothing of requests or sockets.
 *
 * Conventions (STYLE.md "Kernels"): outputs first, caller allocates, every
 * pointer carries a shape comment, offsets into the KV pool are 64-bit.
 * Functions return 0 or a negative IFD_E* code (IFD_ENOTSUP for shapes that
 * have no specialization).
 */
#ifndef IFD_KERNELS_H
#define IFD_KERNELS_H

#include <stdbool.h>

/* SIMD features of this CPU, detected once at run time (cpuid + xgetbv). */
typedef struct {
    bool avx2;
    bool fma;
    bool f16c;
    bool avx512f;
    bool avx512bw;
    bool avx512vnni;
    bool avx512bf16;
    /* AMX-TILE + AMX-INT8, the tile state enabled by the OS (XCR0) and this
     * process granted it (Linux arch_prctl ARCH_REQ_XCOMP_PERM, asked for
     * once by the detection): a VM that lists AMX without enabling it reads
     * false */
    bool amx_int8;
} ifd_cpu_features_t;

/* Thread-safe; the result is computed on first use and cached.
 * $INFERD_CPU=scalar|avx2|avx512 caps the features (for tests of fallbacks and
 * benchmarks; avx512 leaves AMX out). */
const ifd_cpu_features_t *ifd_cpu_features(void);

/* "avx512", "avx2", or "scalar": the widest path the CPU kernels will use. */
const char *ifd_cpu_isa_name(void);

#endif
