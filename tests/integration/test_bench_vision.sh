#!/usr/bin/env bash
# test_bench_vision.sh BENCH_VISION TINY_DIR — bench/bench_vision (label unit) on the tiny
# Gemma 3 vision model and on a cut-down random tower of gemma-3-4b's width (1 layer, 224 px):
# it exits 0 with one JSON line naming the shape, and refuses a bad shape; --image with
# --dump-pixels/--dump-features writes files of the right sizes. Not a timing test:
# it only keeps the benchmark runnable (its figures: docs/benchmarks.md, "Vision tower").
set -euo pipefail
bench=$1
tiny=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
out=$("$bench" --reps 2 --threads 1 --model "$tiny") || fail "tiny model: exit $?"
for want in '"bench": "vision"' '"image_size": 112' '"patches": 64' '"tokens": 16' \
            '"reps": 2' '"encode_ms": {"median": '; do
    grep -qF "$want" <<<"$out" || fail "tiny report lacks '$want': $out"
done
out=$("$bench" --reps 1 --threads 2 --random --layers 1 --image-size 224 --tokens 64) ||
    fail "random tower: exit $?"
for want in '"source": "random"' '"width": 1152' '"layers": 1' '"tokens": 64' \
            '"text_width": 2560'; do
    grep -qF "$want" <<<"$out" || fail "random report lacks '$want': $out"
done
if err=$("$bench" --random --tokens 15 2>&1); then fail "a 15-token tower was accepted"; fi
grep -q "must be a square" <<<"$err" || fail "bad shape message: $err"
if "$bench" --model "$tiny" --random >/dev/null 2>&1; then fail "two sources accepted"; fi
# --image with the dumps (tools/mtmd_check.py's inputs): the resized picture and the features
tmp=$(mktemp -d /tmp/inferd-bench-vision-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
"$bench" --reps 1 --threads 1 --mmproj "$tiny/gguf/mmproj-tiny-gemma3-f32.gguf" \
    --image "$tiny/image1.png" --dump-pixels "$tmp/p.rgb" --dump-features "$tmp/f.f32" \
    >/dev/null || fail "--image: exit $?"
[ "$(stat -c %s "$tmp/p.rgb")" = $((112 * 112 * 3)) ] || fail "--dump-pixels size"
[ "$(stat -c %s "$tmp/f.f32")" = $((16 * 64 * 4)) ] || fail "--dump-features size"
if "$bench" --model "$tiny" --dump-features "$tmp/x" >/dev/null 2>&1; then
    fail "--dump-features without --image accepted"
fi
if "$bench" --model "$tiny" --image "$tiny/config.json" >/dev/null 2>&1; then
    fail "a non-image --image accepted"
fi
echo ok
