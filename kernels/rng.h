/*
 * rng.h — the counter-based random generator shared by the CPU sampler and
 * the CUDA sampling kernel: a pure function of (seed, position, counter),
 * so a given seed yields the same draws however requests are batched,
 * preempted or resumed on another worker.
 *
 * Construction: SplitMix64 finalizers over the three words, mixed in
 * sequence (each a bijection, so distinct inputs give well-spread outputs).
 * Header-only, integer ops only: compiles as C and as CUDA device code.
 */
#ifndef IFD_RNG_H
#define IFD_RNG_H

#include <stdint.h>

#if defined(__CUDACC__)
#define IFD_RNG_FN static __host__ __device__ __forceinline__
#else
#define IFD_RNG_FN static inline
#endif

IFD_RNG_FN uint64_t ifd_rng_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* 64 random bits for (seed, position, counter). */
IFD_RNG_FN uint64_t ifd_rng_u64(uint64_t seed, uint64_t position, uint64_t counter)
{
    uint64_t h = ifd_rng_mix64(seed + 0x9e3779b97f4a7c15ull);
    h = ifd_rng_mix64(h ^ (position + 0x632be59bd9b4e019ull));
    h = ifd_rng_mix64(h ^ (counter + 0x85157af5ull));
    return h;
}

/* A uniform double in [0, 1) with 53 random bits. */
IFD_RNG_FN double ifd_rng_uniform(uint64_t seed, uint64_t position, uint64_t counter)
{
    return (double)(ifd_rng_u64(seed, position, counter) >> 11) * (1.0 / 9007199254740992.0);
}

#endif
