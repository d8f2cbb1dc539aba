/*
 * kvsize.h — how many KV blocks fit on a GPU: the arithmetic behind
 * `inferd --gpu-memory-fraction` (docs/configuration.md), kept apart from
 * any CUDA call so it is unit-tested on its own (tests/unit/test_kvsize.c).
 *
 * The worker's probe (`inferd-worker --kv-probe`, worker_cli.c) loads the
 * weights onto the device, runs the warm-up of kvprobe.h (the largest
 * steps and every decode graph the worker can record), asks the runtime for
 * the free and total memory (cudaMemGetInfo) and hands them here:
 *
 *   usable = fraction * total - (total - free) - margin
 *   blocks = usable / (bytes of one block in every layer, K and V)
 *
 * (total - free) counts everything resident after the warm-up: the weights,
 * the CUDA context, cuBLASLt, the activations and graphs measured, and
 * whatever other processes hold on that device.
 *
 * Pure functions; thread-safe.
 */
#ifndef IFD_KVSIZE_H
#define IFD_KVSIZE_H

#include <stdbool.h>
#include <stdint.h>

/* The safety margin kept beyond the measured warm-up on a device of
 * total_bytes: 64 MiB (1/64 of the device when that is less: small devices,
 * the emulator's) plus 1/20 of what the warm-up measured (activations +
 * graphs). It covers what the warm-up does not run: the pool segment's
 * rounding to the VMM granularity (2 MiB), the sampler's penalty histories
 * (8 bytes per distinct id of the rows with penalties), GEMM kernels the
 * CUDA runtime loads lazily for step sizes the warm-up did not run, other
 * growth orders of the backend's retired scratch, and allocator rounding. */
uint64_t ifd_kvsize_margin(uint64_t total_bytes, uint64_t measured_bytes);

/* Blocks of `block_bytes_all_layers` bytes that fit in
 * fraction * total - (total - free) - reserve; 0 when nothing fits (never
 * negative). fraction outside (0, 1] gives 0. */
int64_t ifd_kvsize_blocks(uint64_t total, uint64_t free_bytes, double fraction, uint64_t reserve,
                          uint64_t block_bytes_all_layers);

#endif
