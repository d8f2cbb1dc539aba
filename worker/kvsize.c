/*
 * kvsize.c — see kvsize.h.
 */
#include "kvsize.h"

uint64_t ifd_kvsize_act_reserve(const ifd_model_config_t *cfg, int max_tokens, int max_seqs,
                                int mm_bytes)
{
    const uint64_t E = cfg->n_embd, F = cfg->n_ff, V = cfg->n_vocab;
    const uint64_t qd = (uint64_t)cfg->n_head * cfg->head_dim;
    const uint64_t kvd = (uint64_t)cfg->n_head_kv * cfg->head_dim;
    const uint64_t T = max_tokens > 0 ? (uint64_t)max_tokens : 1;
    const uint64_t S = max_seqs > 0 ? (uint64_t)max_seqs : 1;
    const uint64_t mm = mm_bytes > 0 ? (uint64_t)mm_bytes : 4;
    /* model.c's scratch: x, qkv, q, t, gate|up in f32; a, o, g in mm_in;
     * tokens, pos, seq (4 bytes), slot (8) */
    uint64_t per_tok = 4 * (2 * E + qd + 2 * kvd + qd + 2 * F) + mm * (E + qd + F) + 20;
    /* the backend's scratch: contiguous K and V for rope_kv, attention's f32 out */
    per_tok += 4 * (2 * kvd + qd);
    /* the rows that sample: xs, ts (f32), xn, logits f32 */
    const uint64_t logits = S * (8 * E + mm * E + 4 * V);
    /* split-K partials: up to 32 splits of (head_dim + 2) floats per head and sequence */
    const uint64_t splitk = S * cfg->n_head * 32 * ((uint64_t)cfg->head_dim + 2) * 4;
    return 2 * (T * per_tok + logits + splitk) + ((uint64_t)64 << 20);
}

int64_t ifd_kvsize_blocks(uint64_t total, uint64_t free_bytes, double fraction, uint64_t reserve,
                          uint64_t block_bytes_all_layers)
{
    if (!(fraction > 0.0 && fraction <= 1.0) || block_bytes_all_layers == 0 || free_bytes > total)
        return 0;
    const double target = fraction * (double)total;
    const double used = (double)(total - free_bytes) + (double)reserve;
    if (target <= used)
        return 0;
    return (int64_t)((target - used) / (double)block_bytes_all_layers);
}
