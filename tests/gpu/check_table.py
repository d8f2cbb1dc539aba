#!/usr/bin/env python3
"""check_table.py — the benchmark half of tests/gpu/check.sh's results table.

    check_table.py BENCH_GPU_KERNELS.json GPU_VS_HF.json

Prints bench/gpu_kernels.c's numbers and bench/gpu_vs_hf.py's against the
targets of issue 13 (decode attention and batch-1 decode >= 80% of the copy
bandwidth measured in the same run, prefill attention >= 350 TFLOP/s, small
kernels >= 80%, >= 10x transformers' eager decode, >= 10,000 output tok/s at
64 concurrent requests). A missing or unreadable file is one line saying so;
standard library only (it runs on the device machine and here)."""
import json
import sys


def load(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        print(f"{what}: not run (no {path})")
    except Exception as e:  # a truncated file from a killed run, say
        print(f"{what}: unreadable JSON in {path} ({e})")
    return None


TARGETS = True  # False on the emulator or a CPU run: their numbers are no speed


def met(ok):
    return "met" if ok else "NOT met"


def target(text, ok):
    return f"{text} {met(ok)}" if TARGETS else ""


def kernels(r):
    global TARGETS
    if r.get("skipped"):
        print("bench_gpu_kernels: skipped:", r.get("reason"))
        return
    if "emulator" in r["device"]:
        TARGETS = False
        print("bench_gpu_kernels on the emulator: a smoke test, its numbers mean nothing")
    cp = r["copy_gb_s"]
    print(f"bench_gpu_kernels ({r['device']}; median of {r['runs']} runs of "
          f"{r.get('reps', 1)} back-to-back launches): copy {cp:.0f} GB/s")
    fmt = "  {:<34} {:>9} {:>10}  {:>8}  {}"
    print(fmt.format("kernel", "ms", "GB/s|TF/s", "of copy", "target"))
    for d in r["decode"]:
        tgt = target(">=80%", d["frac_copy"] >= 0.8) if d["batch"] == 64 else ""
        print(fmt.format(f"decode b{d['batch']} x ctx{d['ctx']}", f"{d['ms']:.4f}",
                         f"{d['gb_s']:.0f}", f"{100 * d['frac_copy']:.0f}%", tgt))
    p = r["prefill"]
    print(fmt.format(f"prefill b{p['batch']} x {p['len']} causal", f"{p['ms']:.4f}",
                     f"{p['tflop_s']:.0f} TF", "", target(">=350 TF", p["tflop_s"] >= 350)))
    for s in r["small"]:
        tgt = ""
        if s["kernel"] in ("rmsnorm_residual", "rope_kv_write", "swiglu"):
            tgt = target(">=80%", s["frac_copy"] >= 0.8)
        print(fmt.format(s["kernel"], f"{s['ms']:.4f}", f"{s['gb_s']:.0f}",
                         f"{100 * s['frac_copy']:.0f}%", tgt))
    sm = r["sample"]
    print(fmt.format(f"sample {sm['rows']} x {sm['vocab']}", f"{sm['ms']:.4f}", "", "", ""))
    for k in ("mask", "softcap", "logprobs"):  # absent from results of older builds
        if k in r:
            print(fmt.format(f"{k} {r[k]['rows']} x {r[k]['vocab']}", f"{r[k]['ms']:.4f}", "",
                             "", ""))


def num(x, f="{:.1f}"):
    return "-" if x is None else f.format(x)


def race(r):
    global TARGETS
    TARGETS = r.get("mode") == "device"
    if not TARGETS:
        print("gpu_vs_hf on the CPU (--cpu): a test of the flow, no GPU numbers")
    print(f"gpu_vs_hf ({r.get('mode')}; shape {r.get('shape')}, {r.get('device')}):")
    for note in r.get("notes", []):
        print("  note:", note)
    hf, ifd = r.get("transformers") or {}, r.get("inferd") or {}
    fmt = "  {:<40} {:>14} {:>14}  {}"
    print(fmt.format("", "transformers", "inferd", ""))
    g = r.get("greedy_256") or {}
    ref = r.get("reference") or {}
    if ref:
        print(f"  reference {ref.get('engine')}: logits rel L2 max "
              f"{num(ref.get('logits_rel_l2_max'), '{:.2e}')} {ref.get('logits_error', '')}")
    for cache in ("use_cache", "no_cache"):
        a, b = hf.get(cache) or {}, ifd.get(cache) or {}
        print(fmt.format(f"{(r.get('sizes') or {}).get('new')} greedy tokens, {cache}: tok/s",
                         num(a.get("tok_s")),
                         num(b.get("tok_s")), ""))
    if g:
        print(fmt.format(f"  tokens identical to {g.get('against')} (first divergence)", "", "",
                         f"{g.get('identical')} ({g.get('first_divergence')})"))
    if "inferd_cache_vs_no_cache_identical" in r:
        print(fmt.format("  inferd cache = no-cache tokens", "", "",
                         str(r["inferd_cache_vs_no_cache_identical"])))
    b1 = r.get("batch1") or {}
    if b1:
        print(fmt.format("batch-1 decode tok/s", num(b1.get("hf_tok_s")),
                         num(b1.get("inferd_tok_s")), ""))
        fr = b1.get("frac_copy")
        print(fmt.format("  inferd bandwidth (weights x tok/s)", "",
                         num(b1.get("inferd_gb_s"), "{:.0f} GB/s"),
                         "" if fr is None else f"{100 * fr:.0f}% of copy "
                         f"{num(r.get('copy_gb_s'), '{:.0f}')} GB/s; " + target(">=80%", fr >= 0.8)))
        sp = b1.get("speedup_vs_hf_eager")
        if sp is not None:
            print(fmt.format("  vs transformers' eager decode", "", f"{sp:.1f}x",
                             target(">=10x", sp >= 10)))
    c = r.get("concurrent") or {}
    if c:
        ok = c.get("output_tok_s")
        tgt = "" if ok is None else target(">=10000", ok >= 10000)
        print(fmt.format(f"{c.get('concurrency')} x ({c.get('prompt')} in / {c.get('output')} out) "
                         "out tok/s", "", num(ok), f"{tgt} via {c.get('via')}"))
    t = r.get("ttft") or {}
    if t:
        print(fmt.format(f"TTFT, {t.get('prompt')}-token prompt (ms)",
                         f"{num(t.get('hf_cold_ms'))} cold", f"{num(t.get('inferd_ms'))} cold", ""))
        print(fmt.format("", f"{num(t.get('hf_ms'))} warm", "", ""))


def main():
    if len(sys.argv) != 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    r = load(sys.argv[1], "bench_gpu_kernels")
    if r is not None:
        try:
            kernels(r)
        except (KeyError, TypeError) as e:
            print(f"bench_gpu_kernels: unexpected JSON ({e!r})")
    r = load(sys.argv[2], "gpu_vs_hf")
    if r is not None:
        try:
            race(r)
        except (KeyError, TypeError, AttributeError) as e:
            print(f"gpu_vs_hf: unexpected JSON ({e!r})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
