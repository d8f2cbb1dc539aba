#!/usr/bin/env python3
"""kv_decode_vs_llamacpp.py -- decode speed at long contexts per KV type, inferd against
llama.cpp (issue 26 item 3; docs/benchmarks.md, "Decode at long contexts per KV type").

For each KV type (--types, default f16,q8_0,q4_0), context (--contexts, default
4096,16384) and number of sequences (--seqs, default 1,16,64): B sequences of a C-token
random prompt are prefilled, then decoded together for --output tokens; reported is the
decode rate (tokens/s summed over the sequences) of each engine, both on the same GGUF
with the same threads:

  inferd     bench_engine --kv-dtype T --concurrency B --requests B --prompt C
             --prefill-cap off: its decode-only steps' rate (all prompts done);
  llama.cpp  llama-batched-bench -npp C -ntg O -npl B -ctk T -ctv T -fa on: speed_tg.

At long contexts a decode step reads the KV of every sequence besides the weights, so the
quantized types should be faster, and more so with more sequences. A configuration whose
f16 KV would exceed --max-kv-gib is skipped (and listed). Repetitions alternate the engine
order; medians and paired ratios (inferd ÷ llama.cpp per type; q8_0 ÷ f16 and q4_0 ÷ f16
per engine). Issue 26's targets: at 16k, q8_0 KV ≥ 1.2× f16 KV's rate, and ≥ 1.3×
llama.cpp's at the same KV type.

--shared-prompt: the B sequences share one C-token prompt, prefilled once (inferd: bench_engine
--shared-prompt, which serves the prompt once so that the B requests find it in the prefix
cache and prefill only its last block; llama.cpp: -pps -kvu, the prompt's cells shared by
every sequence in one unified KV buffer); each sequence still attends over the whole context
at every step, and the KV memory is one prompt plus B sequences' outputs. This is what makes
16k contexts with 16 and 64 sequences feasible (one prefill of C tokens per configuration
instead of B). What it does not model: B distinct contexts read from memory (with one shared
prompt the same blocks are read B times per step, and caches may hold part of them).

Figures are for a quiet machine (without --shared-prompt a prefill of 16 × 16k tokens takes
minutes per run on two cores); --smoke runs tiny contexts on the default model (the harness
check).

  bench/kv_decode_vs_llamacpp.py --bench-engine build/bench/bench_engine
      [--batched-bench ~/.cache/inferd/llamacpp-tools/bin/llama-batched-bench]
      [--model GGUF] [--types f16,q8_0,q4_0] [--contexts 4096,16384] [--seqs 1,16,64]
      [--output 32] [--threads 2] [--reps 1] [--max-kv-gib 10] [--shared-prompt]
      [--json FILE] [--smoke]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # keep bench/ and tests/ clean
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
import benchlib  # noqa: E402
import model_paths  # noqa: E402

# bits a KV value takes per type (a 32-value block's f16 scale included)
KV_BITS = {"f32": 32, "f16": 16, "bf16": 16, "q8_0": 8.5, "q4_0": 4.5}


def kv_bytes_per_token(model):
    """K and V bytes per token in f16, from the GGUF's geometry."""
    from gguf import GGUFReader
    r = GGUFReader(model)

    def val(key):
        f = r.fields.get(key)
        return None if f is None else f.parts[f.data[0]].tolist()[0]
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    layers = val(arch + ".block_count")
    heads = val(arch + ".attention.head_count")
    kv_heads = val(arch + ".attention.head_count_kv") or heads
    key_len = val(arch + ".attention.key_length") or val(arch + ".embedding_length") // heads
    val_len = val(arch + ".attention.value_length") or key_len
    return layers * kv_heads * (key_len + val_len) * 2


def run(cmd):
    """(stdout, seconds, load average before) of a command that must succeed."""
    load = benchlib.load_avg()
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("kv_decode: %s failed (%d):\n%s" % (" ".join(cmd), p.returncode,
                                                    p.stderr[-2000:]))
    return p.stdout, time.time() - t0, load


def inferd_rate(a, kv, ctx, seqs):
    out, secs, load = run([a.bench_engine, "--model", a.model, "--threads", str(a.threads),
                           "--kv-dtype", kv, "--concurrency", str(seqs), "--requests",
                           str(seqs), "--requests-c1", str(seqs), "--prompt", str(ctx),
                           "--output", str(a.output), "--budget", str(max(512, min(4096, ctx))),
                           "--prefill-cap", "off"]
                          + (["--shared-prompt"] if a.shared_prompt else []))
    doc = json.loads(out.strip().splitlines()[-1])
    r = doc["runs"][0]
    if a.shared_prompt and r.get("cached_tokens", 0) < seqs * (ctx - 2 * 16):
        sys.exit("kv_decode: --shared-prompt: the requests got %s prompt tokens from the prefix "
                 "cache, want about %d x %d" % (r.get("cached_tokens"), seqs, ctx))
    return r["decode_only_tok_s"], secs, load


def llama_rate(a, kv, ctx, seqs):
    # -pps -kvu: one prompt's cells shared by all sequences (n_ctx_req = pp + pl·tg)
    n_kv = (ctx + seqs * a.output if a.shared_prompt else seqs * (ctx + a.output)) + 256
    out, secs, load = run([a.batched_bench, "-m", a.model, "-t", str(a.threads), "-tb",
                           str(a.threads), "-c", str(n_kv), "-b", "2048", "-ub", "512",
                           "-npp", str(ctx), "-ntg", str(a.output), "-npl", str(seqs),
                           "-ctk", kv, "-ctv", kv, "-fa", "on", "--output-format", "jsonl"]
                          + (["-pps", "-kvu"] if a.shared_prompt else []))
    recs = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    rec = [r for r in recs if r.get("pl") == seqs and r.get("pp") == ctx]
    if not rec:
        sys.exit("kv_decode: llama-batched-bench printed no result:\n" + out[-2000:])
    return rec[0]["speed_tg"], secs, load


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench-engine", required=True)
    ap.add_argument("--batched-bench", default="", help="llama.cpp's llama-batched-bench")
    ap.add_argument("--model", default=model_paths.model_path())
    ap.add_argument("--types", default="f16,q8_0,q4_0")
    ap.add_argument("--contexts", default="4096,16384")
    ap.add_argument("--seqs", default="1,16,64")
    ap.add_argument("--output", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--max-kv-gib", type=float, default=10.0)
    ap.add_argument("--shared-prompt", action="store_true",
                    help="the sequences share one prompt, prefilled once")
    ap.add_argument("--json")
    ap.add_argument("--smoke", action="store_true", help="a context of 128 tokens, 2 sequences")
    a = ap.parse_args()
    if a.smoke:
        a.contexts, a.seqs, a.output, a.reps = "128", "2", 8, 1
    types = a.types.split(",")
    bad = [t for t in types if t not in KV_BITS]
    if bad:
        sys.exit("kv_decode: unknown KV types %s (of %s)" % (bad, ",".join(KV_BITS)))
    engines = ["inferd"] + (["llama.cpp"] if a.batched_bench else [])
    per_tok = kv_bytes_per_token(a.model)
    configs, skipped = [], []
    for ctx in map(int, a.contexts.split(",")):
        for seqs in map(int, a.seqs.split(",")):
            toks = ctx + seqs * (a.output + 32) if a.shared_prompt else seqs * (ctx + a.output)
            gib = toks * per_tok / 2**30
            (configs if gib <= a.max_kv_gib else skipped).append((ctx, seqs))
    rates = {}  # (engine, kv, ctx, seqs) -> [tok/s per rep]
    runs = []
    for rep in range(a.reps):
        for ctx, seqs in configs:
            for kv in types:
                order = engines if rep % 2 == 0 else engines[::-1]
                for e in order:
                    f = inferd_rate if e == "inferd" else llama_rate
                    r, secs, load = f(a, kv, ctx, seqs)
                    rates.setdefault((e, kv, ctx, seqs), []).append(r)
                    runs.append({"rep": rep, "engine": e, "kv": kv, "context": ctx,
                                 "seqs": seqs, "decode_tok_s": round(r, 2),
                                 "seconds": round(secs, 1), "load_avg": load})
                    print("kv_decode: rep %d %s kv %s ctx %d seqs %d: %.2f tok/s (load %s)" %
                          (rep, e, kv, ctx, seqs, r, load[0]), file=sys.stderr)
    results = []
    for ctx, seqs in configs:
        row = {"context": ctx, "seqs": seqs}
        for e in engines:
            for kv in types:
                row["%s_%s_tok_s" % (e, kv)] = round(statistics.median(
                    rates[(e, kv, ctx, seqs)]), 2)
                if kv != "f16" and "f16" in types:
                    row["%s_%s_over_f16" % (e, kv)] = benchlib.paired_ratio(
                        rates[(e, kv, ctx, seqs)], rates[(e, "f16", ctx, seqs)])
        if "llama.cpp" in engines:
            for kv in types:
                row["inferd_over_llama_%s" % kv] = benchlib.paired_ratio(
                    rates[("inferd", kv, ctx, seqs)], rates[("llama.cpp", kv, ctx, seqs)])
        results.append(row)
    report = benchlib.report_head("kv_decode_vs_llamacpp", a.threads, os.path.join(HERE, ".."))
    report.update({"model": a.model, "smoke": a.smoke, "output_tokens": a.output,
                   "shared_prompt": a.shared_prompt,
                   "kv_f16_bytes_per_token": per_tok, "engines": engines,
                   "batched_bench": a.batched_bench or None, "results": results,
                   "skipped_over_max_kv": [{"context": c, "seqs": s} for c, s in skipped],
                   "runs": runs, "load_avg_end": benchlib.load_avg()})
    benchlib.write_report(report, a.json)


if __name__ == "__main__":
    main()
