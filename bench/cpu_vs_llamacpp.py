#!/usr/bin/env python3
"""cpu_vs_llamacpp.py -- the measuring half of bench/cpu_vs_llamacpp.sh (run that).

For each model and repetition, every workload runs once per engine, each in
a process of its own (so each has its own peak RSS, read with wait4), the
engine order alternating between repetitions so both see the same machine:

  single   1 sequence, a 512-token random prompt prefilled in one batch
           (pp512: prompt tokens/s), then 128 decode steps (tg128: tokens/s)
  batchedB B sequences (4, 16, 64) of 32-token random prompts prefilled in one
           batch, then 64 decode steps of B tokens (decode tokens/s)

Two more engines take the single workload only, each its project's own
llama-bench (--llama-bench, --ik-bench: `-p 512 -n 128 -r 1`, f16 KV, the
same threads): "llama-bench" (llama.cpp's tool, built from the same source
as the Python driver) and "ik_llama.cpp" (with `-rtr 1 -fa 1`, its best CPU
mode: run-time repacked weights and flash attention). Their ratios are
reported as "ratio_vs_<engine>" (inferd / that engine); "best_peer" names
the fastest peer per metric and "ratio_vs_best_peer" is inferd over it.

inferd runs bench/bench_engine (the real engine, CPU backend, f16 KV pool;
prefill_only_tok_s / decode_only_tok_s of its steps), llama.cpp runs
bench/llamacpp_driver.py (llama-cpp-python's llama_decode, f16 KV), with the
same thread count and the same KV capacity in tokens. Reported per metric:
the median over repetitions for each engine, and inferd / llama.cpp as the
median of the per-repetition ratios (paired, so a load change during the run
hits both sides of a ratio alike). For RSS a ratio above 1 means inferd uses
more. The load average before every run is recorded with it.

--also-isa ISA adds a third engine, "inferd@ISA": the same bench_engine runs
with INFERD_CPU=ISA (a cap on the CPU kernels' SIMD path, e.g. avx2 on an
AVX-512 machine), in the same alternation, and "ratio_vs_ISA" = inferd /
inferd@ISA per metric: what the wider path is worth, measured in one run.

Decode bandwidth: bench/bench_membw (--membw) measures the machine's streaming
read bandwidth with the same thread count before and after the runs
("read_gb_s"); per model, "decode_gb_s" is the weights' bytes (inferd's
resident weight bytes: the GGUF's tensors, which llama.cpp reads too) × the
batch-1 decode tok/s (tg128) of each engine, and "decode_bw_fraction" that ÷
the mean of the two read measurements: how close batch-1 decode is to the
memory's limit.
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # keep bench/ clean
import benchlib  # noqa: E402  (bench/benchlib.py, next to this script)

ENGINES = ("llama.cpp", "inferd")


def spawn_measured(cmd, env=None):
    """Runs cmd (with env added to the environment); returns (its last stdout line as
    JSON, its peak RSS in MiB, seconds, the load average before it)."""
    load = benchlib.load_avg()
    t0 = time.time()
    with open(os.devnull, "rb") as devnull:
        p = subprocess.Popen(cmd, stdin=devnull, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env={**os.environ, **(env or {})})
        # read both pipes to the end, then reap with wait4 to get the child's rusage
        out, err = _drain(p)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    out, err = out.decode(), err.decode()
    if p.returncode != 0:
        sys.exit("cpu_vs_llamacpp: %s failed (%d):\n%s" % (shlex.join(cmd), p.returncode, err[-2000:]))
    try:
        doc = json.loads(out) if out.lstrip().startswith("[") else \
            json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        sys.exit("cpu_vs_llamacpp: %s printed no JSON:\n%s" % (shlex.join(cmd), out[-2000:]))
    return doc, ru.ru_maxrss / 1024.0, time.time() - t0, load


def _drain(p):
    import selectors
    sel = selectors.DefaultSelector()
    bufs = {p.stdout: [], p.stderr: []}
    for f in bufs:
        sel.register(f, selectors.EVENT_READ)
    while sel.get_map():
        for key, _ in sel.select():
            chunk = os.read(key.fd, 65536)
            if chunk:
                bufs[key.fileobj].append(chunk)
            else:
                sel.unregister(key.fileobj)
    return b"".join(bufs[p.stdout]), b"".join(bufs[p.stderr])


def kv_tokens(conc, prompt, output):
    """bench_engine's pool capacity in tokens (blocks of 16, see bench_engine.c)."""
    return (conc * ((prompt + output) // 16 + 2) + 16) * 16


def workloads(smoke, only=""):
    if smoke:
        return [("single", 1, 32, 9), ("batched2", 2, 8, 5)]
    w = [("single", 1, 512, 129), ("batched4", 4, 32, 65), ("batched16", 16, 32, 65),
         ("batched64", 64, 32, 65)]
    if only:
        names = only.split(",")
        unknown = set(names) - {x[0] for x in w}
        if unknown:
            sys.exit("cpu_vs_llamacpp: unknown workloads %s" % ",".join(sorted(unknown)))
        w = [x for x in w if x[0] in names]
    return w


# the peers' llama-bench runs: engine -> extra arguments
BENCH_ENGINES = {"llama-bench": [], "ik_llama.cpp": ["-rtr", "1", "-fa", "1"]}


def command(engine, a, model, conc, prompt, output):
    budget = max(512, conc * prompt)
    if engine in BENCH_ENGINES:
        exe = a.llama_bench if engine == "llama-bench" else a.ik_bench
        return [exe, "-m", model, "-t", str(a.threads), "-p", str(prompt), "-n", str(output - 1),
                "-r", "1", "-o", "json"] + BENCH_ENGINES[engine]
    if engine.startswith("inferd"):
        return [a.bench_engine, "--model", model, "--threads", str(a.threads), "--concurrency",
                str(conc), "--requests", str(conc), "--requests-c1", str(conc), "--prompt",
                str(prompt), "--output", str(output), "--budget", str(budget),
                "--prefill-cap", "off"]
    return [a.llama_python, a.driver, "--model", model, "--threads", str(a.threads),
            "--concurrency", str(conc), "--prompt", str(prompt), "--output", str(output),
            "--budget", str(budget), "--n-ctx", str(kv_tokens(conc, prompt, output))]


def bench_metrics(records, prompt, output):
    """pp/tg tokens/s from llama-bench's JSON records."""
    out = {}
    for r in records:
        if r.get("n_prompt") and not r.get("n_gen"):
            out["pp%d_tok_s" % prompt] = round(r["avg_ts"], 2)
        elif r.get("n_gen") and not r.get("n_prompt"):
            out["tg%d_tok_s" % (output - 1)] = round(r["avg_ts"], 2)
    return out


def metrics_of(wname, doc, prompt, output):
    run = doc["runs"][0]
    if wname == "single":
        return {"pp%d_tok_s" % prompt: run["prefill_only_tok_s"],
                "tg%d_tok_s" % (output - 1): run["decode_only_tok_s"]}
    return {"%s_decode_tok_s" % wname: run["decode_only_tok_s"]}


def read_bandwidth(a):
    """bench_membw's median streaming read, GB/s, with the benchmark's thread count."""
    cmd = [a.membw, "--threads", str(a.threads)] + (["--mib", "64", "--rounds", "3"]
                                                    if a.smoke else [])
    doc = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    print("cpu_vs_llamacpp: read bandwidth %.1f GB/s (best %.1f)" %
          (doc["read_gb_s"], doc["best_gb_s"]), file=sys.stderr)
    return doc["read_gb_s"]


def decode_bandwidth(m, engines, read_gb_s):
    """decode_gb_s and decode_bw_fraction from the batch-1 decode row (tgN_tok_s)."""
    tg = [k for k in m["summary"] if k.startswith("tg") and k.endswith("_tok_s")]
    if not tg or not m["weight_bytes"]:
        return
    row = m["summary"][tg[0]]
    # the GGUF's tensor bytes: every engine reads the same quantized weights
    gbs = {e: round(m["weight_bytes"] * row[e] / 1e9, 2) for e in engines if e in row}
    m["summary"]["decode_gb_s"] = gbs
    m["summary"]["decode_bw_fraction"] = {e: round(gbs[e] / read_gb_s, 3) for e in gbs}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench-engine", required=True)
    ap.add_argument("--driver", required=True)
    ap.add_argument("--llama-python", required=True)
    ap.add_argument("--model", action="append", required=True, help="name=path")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--repo", default=".")
    ap.add_argument("--json", default="")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--inferd-only", action="store_true")
    ap.add_argument("--workloads", default="", help="a subset, e.g. single,batched16")
    ap.add_argument("--also-isa", default="", help="also run inferd capped to this SIMD path")
    ap.add_argument("--membw", default="", help="bench_membw, for the read bandwidth")
    ap.add_argument("--llama-bench", default="", help="llama.cpp's llama-bench (single only)")
    ap.add_argument("--ik-bench", default="", help="ik_llama.cpp's llama-bench (single only)")
    a = ap.parse_args()
    if a.smoke:
        a.reps = 1
        a.model = a.model[:1]
    engines = ("inferd",) if a.inferd_only else ENGINES
    if a.also_isa:
        engines += ("inferd@" + a.also_isa,)
    if a.llama_bench:
        engines += ("llama-bench",)
    if a.ik_bench:
        engines += ("ik_llama.cpp",)
    report = {
        **benchlib.report_head("cpu_vs_llamacpp", a.threads, a.repo),
        "reps": a.reps,
        "smoke": a.smoke,
        "workloads": [x[0] for x in workloads(a.smoke, a.workloads)],
        "models": [],
    }
    bw = [read_bandwidth(a)] if a.membw else []
    for spec in a.model:
        name, path = spec.split("=", 1)
        per = {e: {} for e in engines}  # engine -> metric -> [per rep]
        weight_bytes = 0
        runs = []
        for rep in range(a.reps):
            order = engines if rep % 2 == 0 else tuple(reversed(engines))
            rss = {e: 0.0 for e in engines}
            for wname, conc, prompt, output in workloads(a.smoke, a.workloads):
                for e in order:
                    if e in BENCH_ENGINES and wname != "single":
                        continue
                    env = {"INFERD_CPU": e.split("@", 1)[1]} if "@" in e else None
                    doc, rss_mib, secs, load = spawn_measured(
                        command(e, a, path, conc, prompt, output), env)
                    m = (bench_metrics(doc, prompt, output) if e in BENCH_ENGINES
                         else metrics_of(wname, doc, prompt, output))
                    m["rss_%s_mib" % wname] = round(rss_mib, 1)
                    rss[e] = max(rss[e], rss_mib)
                    for k, v in m.items():
                        per[e].setdefault(k, []).append(v)
                    runs.append({"rep": rep, "workload": wname, "engine": e, "load_avg": load,
                                 "seconds": round(secs, 1), "metrics": m})
                    if e == "inferd":
                        report.setdefault("inferd_isa", doc.get("isa"))
                        weight_bytes = doc.get("weight_bytes", 0)
                    print("cpu_vs_llamacpp: %s rep %d %s %s: %s (load %s)" %
                          (name, rep, wname, e, m, load[0]), file=sys.stderr)
            for e in engines:
                per[e].setdefault("rss_peak_mib", []).append(round(rss[e], 1))
        summary = {}
        for k in per["inferd"]:
            have = [e for e in engines if per[e].get(k)]
            row = {e: statistics.median(per[e][k]) for e in have}
            for e in have:
                row[e + "_reps"] = per[e][k]
            if "llama.cpp" in have:
                row["ratio"] = benchlib.paired_ratio(per["inferd"][k], per["llama.cpp"][k])
            peers = [e for e in have if e in BENCH_ENGINES or e == "llama.cpp"]
            for e in peers:
                if e != "llama.cpp":
                    row["ratio_vs_" + e] = benchlib.paired_ratio(per["inferd"][k], per[e][k])
            if peers and k.endswith("tok_s"):
                best = max(peers, key=lambda e: row[e])
                row["best_peer"] = best
                row["ratio_vs_best_peer"] = benchlib.paired_ratio(per["inferd"][k], per[best][k])
            if a.also_isa:
                row["ratio_vs_" + a.also_isa] = benchlib.paired_ratio(
                    per["inferd"][k], per["inferd@" + a.also_isa][k])
            summary[k] = row
        report["models"].append({"name": name, "path": path,
                                 "file_mib": round(os.path.getsize(path) / 2**20, 1),
                                 "weight_bytes": weight_bytes,
                                 "summary": summary, "runs": runs})
    if bw:
        bw.append(read_bandwidth(a))
        report["read_gb_s"] = {"before": bw[0], "after": bw[1]}
        for m in report["models"]:
            decode_bandwidth(m, engines, (bw[0] + bw[1]) / 2)
    report["load_avg_end"] = benchlib.load_avg()
    benchlib.write_report(report, a.json)


if __name__ == "__main__":
    main()
