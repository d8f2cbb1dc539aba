/*
 * kvsize.h — how many KV blocks fit on a GPU: the arithmetic behind
 * `inferd --gpu-memory-fraction` (docs/configuration.md), kept apart from
 * any CUDA call so it is unit-tested on its own (tests/unit/test_kvsize.c).
 *
 * The worker's probe (`inferd-worker --kv-probe`, worker_cli.c) loads the
 * weights onto the device, asks the runtime for the free and total memory
 * (cudaMemGetInfo), and hands them here with an estimate of what the
 * engine's activations will take at its largest step:
 *
 *   usable = fraction * total - (total - free) - reserve
 *   blocks = usable / (bytes of one block in every layer, K and V)
 *
 * (total - free) counts everything already resident: the weights, the CUDA
 * context, cuBLASLt, and whatever other processes hold on that device.
 *
 * Pure functions; thread-safe.
 */
#ifndef IFD_KVSIZE_H
#define IFD_KVSIZE_H

#include <stdbool.h>
#include <stdint.h>

#include "model_config.h"

/* Device bytes the model's forward pass needs beyond the weights for a step
 * of max_tokens tokens in up to max_seqs sequences: the scratch activations
 * (model.c), the backend's scratch (rope_kv's K, attention's f32 output),
 * the logits rows and the split-K workspace, doubled, plus a fixed 64 MiB
 * for the GEMM workspace and allocator slack. An estimate from the shape
 * (a measured warm-up step is a later refinement); mm_bytes is the size of
 * a projection input element (2 for bf16, 4 in exact mode). */
uint64_t ifd_kvsize_act_reserve(const ifd_model_config_t *cfg, int max_tokens, int max_seqs,
                                int mm_bytes);

/* Blocks of `block_bytes_all_layers` bytes that fit in
 * fraction * total - (total - free) - reserve; 0 when nothing fits (never
 * negative). fraction outside (0, 1] gives 0. */
int64_t ifd_kvsize_blocks(uint64_t total, uint64_t free_bytes, double fraction, uint64_t reserve,
                          uint64_t block_bytes_all_layers);

#endif
