/*
 * gpu_model_test.h — the model-level fixtures shared by the CUDA backend
 * tests (test_backend_cuda.c, test_cuda_step.c): a tiny random-weight model
 * configuration and a "side" — one backend, one model loaded on it with
 * ifd_model_load_random (seed 42: the same weights on every backend), and a
 * K and a V region per layer allocated through the backend.
 *
 * Ownership: a side owns its backend (passed in, created by the caller),
 * its model and its KV regions; gt_side_close frees all of them and zeroes
 * the side, and is safe on a zeroed or half-opened side. Failures are
 * recorded with gt_fail (the current case fails) and returned as IFD_E*.
 * Single-threaded, like the rest of the harness.
 */
#ifndef IFD_GPU_MODEL_TEST_H
#define IFD_GPU_MODEL_TEST_H

#include "worker/backend.h"
#include "worker/model.h"

#include <stdbool.h>
#include <stddef.h>

enum { GT_SIDE_MAX_LAYERS = 4 };

/* The tiny model: n_embd 128, 4 query / 2 KV heads of 64, n_ff 192, a
 * 101-token vocabulary, n_layer layers (≤ GT_SIDE_MAX_LAYERS). A Gemma 3
 * one has a sliding window of 8 on layers 0 and 2 and the Gemma bases and
 * embedding scale. */
ifd_model_config_t gt_tiny_config(bool gemma, uint32_t n_layer);

typedef struct {
    ifd_backend_t *be;
    ifd_model_t *m;
    uint32_t n_layer;
    void *k[GT_SIDE_MAX_LAYERS], *v[GT_SIDE_MAX_LAYERS];
    ifd_kv_layer_t kv[GT_SIDE_MAX_LAYERS];
} gt_side_t;

/* Takes be (NULL with be_rc set when its creation failed: be_err is then
 * reported), loads the model and allocates, per layer, K and V regions of
 * n_blocks blocks of block_size positions in kv_dtype. */
int gt_side_open(gt_side_t *s, ifd_backend_t *be, int be_rc, const char *be_err,
                 const ifd_model_config_t *c, ifd_dtype_t kv_dtype, int block_size, int n_blocks);

void gt_side_close(gt_side_t *s);

#endif
