#!/usr/bin/env bash
# test_gpu_vs_hf_tiny.sh CMAKE_BUILD WORK — bench/gpu_vs_hf.py's whole flow on this CPU
# (--tiny --cpu; CTest test_gpu_vs_hf_tiny, label unit): it writes the Hugging Face
# directory, inferd (CPU backend) serves it through inferd-worker and the daemon, and
# without torch the NumPy oracle (tests/oracle/llama_oracle.py) reads the same directory.
# Checked: every part produced numbers, inferd's greedy tokens equal the oracle's and
# its own no-cache run's, and every logit row is within 1e-4 relative L2 of the oracle's
# (f32 vs f64), so the race's two engines see one model.
set -uo pipefail
cb=$1 work=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
IFD_PY_MODULES=numpy . "$src/tests/tools/test_python.sh"
rm -rf "$work"
mkdir -p "$work"
"$py" "$src/bench/gpu_vs_hf.py" --tiny --cpu --build "$cb" --work "$work" --out "$work/r.json" \
    --time-limit 100 > "$work/stdout" 2> "$work/stderr"
rc=$?
tail -n 5 "$work/stderr"
[ $rc -eq 0 ] || { echo "FAIL: gpu_vs_hf.py exited $rc"; exit 1; }
"$py" - "$work/r.json" << 'PY'
import json, sys
r = json.load(open(sys.argv[1]))
bad = []
def need(c, what):
    if not c:
        bad.append(what)
ifd = r.get("inferd", {})
for k in ("use_cache", "no_cache"):
    need(len((ifd.get(k) or {}).get("tokens", [])) == r["sizes"]["new"], f"inferd {k} tokens")
need(r.get("inferd_cache_vs_no_cache_identical") is True, "inferd cache == no-cache tokens")
ref = r.get("reference") or {}
if "transformers" not in r:
    need(r.get("greedy_256", {}).get("identical") is True, f"tokens == oracle: {r.get('greedy_256')}")
    need(ref.get("logits_rel_l2_max", 1) <= 1e-4, f"logits vs oracle: {ref}")
c = r.get("concurrent") or {}
need(c.get("output_tok_s", 0) > 0, "concurrent output tok/s")
need(c.get("via", "").startswith("the daemon") and c.get("completed") == r["sizes"]["conc"]
     and c.get("failed") == 0, f"the concurrent part through the daemon: {c}")
need((r.get("ttft") or {}).get("inferd_ms", 0) > 0, "inferd ttft")
need((r.get("batch1") or {}).get("inferd_gb_s", 0) > 0, "inferd bandwidth")
need(r.get("copy_gb_s", 0) > 0, "copy bandwidth")
need(not [n for n in r["notes"] if "transformers" not in n], f"notes: {r['notes']}")
if bad:
    print("FAIL:", "; ".join(bad))
    sys.exit(1)
print(f"ok: tiny race, logits rel L2 {ref.get('logits_rel_l2_max')}, "
      f"{r['concurrent']['output_tok_s']} tok/s at {r['concurrent']['concurrency']}")
PY
