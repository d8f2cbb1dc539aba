/*
 * test_cuda_emu_mma.cc — the emulator's integer tensor-core MMA
 * (ifd_mma_16832_s8, mma.m16n8k32.row.col.s32.s8.s8.s32) against a plain
 * integer matrix product, on random int8 matrices including the extremes
 * (-128, 127), with a non-zero accumulator. The fragments are built here
 * from the PTX ISA's description of the .s8 m16n8k32 layout (written out
 * independently of the emulator's decoding), so a wrong register or byte
 * order on either side fails. The attention kernels' q8_0 path rests on it
 * (attn_common.cuh); on a device test_gpu_attention checks the real
 * instruction through them. Label unit + emu; runs in milliseconds.
 */
#include "cuda/cuda_prim.cuh"

#include <cstdio>
#include <cstdlib>

namespace
{

int8_t A[16][32], B[32][8]; /* A row-major (m x k), B as k x n */
int32_t C0[16][8], D[16][8];

uint64_t rng = 0x2545f4914f6cdd1dull;
uint32_t next_u32()
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* Four int8 values as one register, the first in the lowest byte. */
uint32_t pack4(const int8_t *v0, int stride)
{
    uint32_t u = 0;
    for (int j = 0; j < 4; j++)
        u |= (uint32_t)(uint8_t)v0[j * stride] << (8 * j);
    return u;
}

int run(int round)
{
    for (int r = 0; r < 16; r++)
        for (int k = 0; k < 32; k++)
            A[r][k] = round == 0 ? (int8_t)-128 : (int8_t)next_u32();
    for (int k = 0; k < 32; k++)
        for (int n = 0; n < 8; n++)
            B[k][n] = round == 0 ? (int8_t)-128 : (int8_t)next_u32();
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 8; n++)
            C0[r][n] = (int32_t)(next_u32() % 2001) - 1000;

    ifd_emu_launch(dim3(1), dim3(32), 0, [] {
        const int lane = (int)threadIdx.x, g = lane / 4, t = lane % 4;
        /* PTX: a0 = A[g][4t..], a1 = A[g+8][4t..], a2 = A[g][4t+16..],
         * a3 = A[g+8][4t+16..]; b0 = B[4t..][g], b1 = B[4t+16..][g];
         * c0,c1 = C[g][2t, 2t+1], c2,c3 = C[g+8][2t, 2t+1]. */
        const uint32_t a[4] = {pack4(&A[g][4 * t], 1), pack4(&A[g + 8][4 * t], 1),
                               pack4(&A[g][4 * t + 16], 1), pack4(&A[g + 8][4 * t + 16], 1)};
        const uint32_t b[2] = {pack4(&B[4 * t][g], 8), pack4(&B[4 * t + 16][g], 8)};
        int32_t c[4] = {C0[g][2 * t], C0[g][2 * t + 1], C0[g + 8][2 * t], C0[g + 8][2 * t + 1]};
        ifd_mma_16832_s8(c, a, b);
        D[g][2 * t] = c[0], D[g][2 * t + 1] = c[1];
        D[g + 8][2 * t] = c[2], D[g + 8][2 * t + 1] = c[3];
    });

    int bad = 0;
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 8; n++) {
            int32_t ref = C0[r][n];
            for (int k = 0; k < 32; k++)
                ref += (int32_t)A[r][k] * B[k][n];
            if (D[r][n] != ref && bad++ < 5)
                fprintf(stderr, "round %d: D[%d][%d] = %d, expected %d\n", round, r, n, D[r][n],
                        ref);
        }
    return bad;
}

} // namespace

int main()
{
    int bad = 0;
    for (int round = 0; round < 20; round++)
        bad += run(round);
    printf("test_cuda_emu_mma: %s (20 rounds, mma.m16n8k32.s8)\n", bad ? "FAIL" : "ok");
    return bad ? 1 : 0;
}
