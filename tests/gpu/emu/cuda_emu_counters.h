/*
 * cuda_emu_counters.h — what the CUDA emulator (cuda_emu.cc, cublaslt_emu.cc)
 * has been asked to do, counted since the process started, so C tests can
 * assert properties of the backend that no result shows: that the steady-state
 * step allocates nothing, that the GEMM heuristic is queried once per shape,
 * that a graph is captured once and replayed. Test code only (emulator
 * builds, IFD_CUDA_EMU); single-threaded like the emulator.
 */
#ifndef IFD_CUDA_EMU_COUNTERS_H
#define IFD_CUDA_EMU_COUNTERS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    uint64_t mallocs;         /* cudaMalloc */
    uint64_t frees;           /* cudaFree of a non-NULL pointer */
    uint64_t host_allocs;     /* cudaHostAlloc / cudaMallocHost (pinned) */
    uint64_t launches;        /* kernels run (eagerly or from a graph) */
    uint64_t graph_captures;  /* cudaStreamEndCapture that returned a graph */
    uint64_t graph_launches;  /* cudaGraphLaunch */
    uint64_t lt_heuristics;   /* cublasLtMatmulAlgoGetHeuristic */
    uint64_t lt_matmuls;      /* cublasLtMatmul run (eagerly or from a graph) */
} ifd_emu_counters_t;

/* A snapshot of the counters. */
void ifd_emu_counters(ifd_emu_counters_t *out);

#ifdef __cplusplus
}
#endif

#endif
