/*
 * kvsize.c — see kvsize.h.
 */
#include "kvsize.h"

uint64_t ifd_kvsize_margin(uint64_t total_bytes, uint64_t measured_bytes)
{
    const uint64_t fixed = (uint64_t)64 << 20;
    return (total_bytes / 64 < fixed ? total_bytes / 64 : fixed) + measured_bytes / 20;
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
