#!/bin/sh
# Runs one *_avx512emu test binary (tests/cpu_emu/avx512_emu.h): its kernels
# are compiled for AVX2, so it needs a CPU with AVX2, FMA and F16C; elsewhere
# it skips (exit 77) and says so.
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)
for f in avx2 fma f16c; do
    case " $flags " in
        *" $f "*) ;;
        *) echo "SKIPPED: $1 needs a CPU with AVX2/FMA/F16C (no '$f' in /proc/cpuinfo)"; exit 77 ;;
    esac
done
exec "$@"
