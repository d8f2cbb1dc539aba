#!/usr/bin/env bash
# test_check_script.sh CMAKE_BUILD WORK — keeps tests/gpu/check.sh from rotting on a
# machine without a GPU (CTest test_gpu_check_emu, labels unit emu):
#  1. --dry-run lists tier A's tests, test_backend_cuda and the race, and exits 0;
#  2. the poisoned headers of tier A really stop a source that includes one;
#     --plan writes tier A's whole build.ninja (every kernel, test and the
#     benchmark) and its graph is complete (no source renamed away from it);
#  3. --emu --quick runs the real flow (generated build.ninja, tier A on the kernel
#     emulator, tier B's test_gpu_device from the CMake build, per-step limits, $OUT)
#     and passes, with the table printed last and every $OUT file in place.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cb=$1 work=$2
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work"
mkdir -p "$work/out"

dry=$(CMAKE_BUILD=$cb BUILD=$work/b bash "$here/check.sh" --emu --dry-run) || fail "--dry-run exited $?"
for w in test_gpu_attention test_gpu_sample test_backend_cuda test_gpu_kvpool gpu_vs_hf.py; do
    grep -q "$w" <<< "$dry" || fail "--dry-run does not list $w:"$'\n'"$dry"
done
CMAKE_BUILD=$cb bash "$here/check.sh" --quick > /dev/null 2>&1 && fail "--quick without --emu accepted"
plan=$(CMAKE_BUILD=$cb BUILD=$work/plan bash "$here/check.sh" --emu --plan 2>&1) ||
    fail "--plan: tier A's build graph is broken:"$'\n'"$plan"

out=$(CMAKE_BUILD=$cb BUILD=$work/b OUT=$work/out BUDGET=200 bash "$here/check.sh" --emu --quick 2>&1)
rc=$?
echo "$out" | tail -n 25
[ $rc -eq 0 ] || fail "check.sh --emu --quick exited $rc"
# the poison: tier A's include path must refuse a Debian library's header
echo '#include <jansson.h>' > "$work/p.c"
if cc -I"$work/b/poison" -c "$work/p.c" -o "$work/p.o" 2> "$work/p.err"; then
    fail "a tier A source including <jansson.h> compiled"
fi
grep -q "device machine lacks it" "$work/p.err" || fail "no poison message: $(cat "$work/p.err")"
tail -n 3 <<< "$out" | grep -q "overall: OK" || fail "the table is not last"
grep -Eq "^test_gpu_dequant +PASS" <<< "$out" || fail "test_gpu_dequant did not pass on the emulator"
grep -Eq "^test_gpu_device +(SKIP|PASS)" <<< "$out" || fail "tier B's test_gpu_device did not run"
for f in table.txt steps.log logs.tgz; do
    [ -s "$work/out/$f" ] || fail "\$OUT/$f missing"
done
grep -q "===== test_gpu_dequant.log" "$work/out/steps.log" || fail "steps.log lacks the test log"
tar -tzf "$work/out/logs.tgz" | grep -q "logs/test_gpu_dequant.log" || fail "logs.tgz lacks the test log"
n=$(find "$work/out" -type f | wc -l)
[ "$n" -le 8 ] || fail "$n files in \$OUT (the device tool returns at most 8)"
echo "ok: check.sh --dry-run, poison, --emu --quick"
