#!/usr/bin/env python3
"""served_vs_llamaserver.py -- the measuring half of bench/served_vs_llamaserver.sh (run that).

For each model and repetition, each server is started fresh (the other one is
not running), serves every workload, and is stopped; the server order
alternates between repetitions (llama-server, inferd, inferd, llama-server,
...), so both see the same machine. Both listen on loopback TCP and are driven
by the same client, `infer bench serve --url`: streaming /v1/completions of
random token-id prompts (from the server's /tokenize: the same GGUF gives both
the same ids), each exactly --input-len tokens, generating exactly
--output-len tokens (greedy, ignore_eos), one unmeasured warm-up request.
The prompts of a (repetition, workload) come from one seed, the same for both
servers and different for every repetition and workload, so each server sees
every prompt once: no prefix-cache hit flatters either.

  llama-server  -m GGUF -t T -tb T -c CTX -np 16 -cb --host 127.0.0.1 --port P
                (its defaults otherwise: f16 KV, CTX split over the 16 slots,
                flash attention auto)
  inferd        --model GGUF --threads T --kv-budget (CTX tokens of f16 K and
                V) --listen 127.0.0.1:P (its defaults otherwise)

Reported per model and workload: output tokens/s, TTFT / TPOT / ITL mean and
p99, p99 ITL / mean ITL, per server the median over repetitions, and inferd /
llama-server as the median of the per-repetition ratios (paired: a load
change hits both sides of a ratio alike). For latencies a ratio below 1 means
inferd is faster. Every run must produce exactly requests x output-len tokens
(the usage the server reports): a server that stopped early fails the run.
The load average before every run is recorded with it.
"""
import argparse
import json
import os
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # keep bench/ clean
import benchlib  # noqa: E402  (bench/benchlib.py, next to this script)
import urllib.error
import urllib.request

SERVERS = ("llama-server", "inferd")
SLOTS = 16  # llama-server's --parallel: as many slots as the most streams
LATENCIES = ("ttft_ms", "tpot_ms", "itl_ms")
TARGETS = {  # issue 14's: (workload, metric, bound)
    "single_stream_ratio": ("streams1", "output_tok_s", ">=", 1.2),
    "streams16_ratio": ("streams16", "output_tok_s", ">=", 2.4),
    "streams16_itl_p99_over_mean": ("streams16", "itl_p99_over_mean", "<=", 2.0),
}


def die(msg):
    sys.exit("served_vs_llamaserver: " + msg)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def workloads(smoke):
    """(name, streams, requests, input_len, output_len)."""
    if smoke:
        return [("streams1", 1, 2, 32, 8), ("streams4", 4, 4, 32, 8)]
    return [("streams1", 1, 16, 128, 64), ("streams16", 16, 64, 128, 64)]


def kv_bytes_per_token(inferd, gguf):
    """f16 K and V of every layer, from `inferd --inspect --json`."""
    r = subprocess.run([inferd, "--inspect", gguf, "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        die("inferd --inspect %s failed:\n%s" % (gguf, r.stderr[-2000:]))
    h = json.loads(r.stdout)["hparams"]
    return 2 * h["block_count"] * h["head_count_kv"] * h["head_dim"] * 2


class Server:
    """One server process in a process group of its own (so its workers go with it)."""

    def __init__(self, kind, a, gguf, kv_bytes, tmp):
        self.kind = kind
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.logpath = os.path.join(tmp, "%s-%d.log" % (kind, self.port))
        if kind == "llama-server":
            cmd = [a.llama_server, "-m", gguf, "-t", str(a.threads), "-tb", str(a.threads),
                   "-c", str(a.ctx), "-np", str(SLOTS), "-cb",
                   "--host", "127.0.0.1", "--port", str(self.port)]
        else:
            budget = -(-a.ctx * kv_bytes // (1 << 20))  # MiB, rounded up
            cmd = [a.inferd, "--model", gguf, "--threads", str(a.threads),
                   "--worker-binary", a.worker, "--kv-budget", "%dM" % budget,
                   "--socket", os.path.join(tmp, "inferd-%d.sock" % self.port),
                   "--listen", "127.0.0.1:%d" % self.port] + a.inferd_arg
        self.cmd = cmd
        self.log = open(self.logpath, "wb")
        self.proc = benchlib.spawn_group(cmd, self.log)
        LIVE.append(self)

    def logtail(self):
        return benchlib.log_tail(self.logpath)

    def wait_ready(self, timeout):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                die("%s exited with %s before it was ready: %s\n%s" %
                    (self.kind, self.proc.returncode, shlex.join(self.cmd), self.logtail()))
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200 and json.loads(r.read()).get("status") == "ok":
                        return time.time() - t0
            except (OSError, ValueError, urllib.error.URLError):
                pass
            time.sleep(0.1)
        die("%s not ready after %d s: %s\n%s" % (self.kind, timeout, shlex.join(self.cmd),
                                                 self.logtail()))

    def stop(self):
        if self in LIVE:
            LIVE.remove(self)
        benchlib.stop_group(self.proc)
        self.log.close()


LIVE = []


def kill_live(*_):
    for s in list(LIVE):
        s.stop()
    sys.exit(1)


def bench(a, server, wl, seed, tmp):
    name, streams, n, in_len, out_len = wl
    out = os.path.join(tmp, "%s-%s-%d.json" % (server.kind, name, seed))
    cmd = [a.infer, "bench", "serve", "--url", server.url, "-c", str(streams), "-N", str(n),
           "--input-len", str(in_len), "--output-len", str(out_len), "--ignore-eos",
           "--seed", str(seed), "--warmup", "1", "--no-progress", "--json", out]
    load = benchlib.load_avg()
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if r.returncode != 0:
        die("%s %s: %s failed (%d):\n%s\nserver log:\n%s" %
            (server.kind, name, shlex.join(cmd), r.returncode, r.stderr[-2000:],
             server.logtail()))
    with open(out) as f:
        doc = json.load(f)
    (run,) = doc["runs"]
    want = n * out_len
    if run["failed"] or run["completed"] != n or run["total_output_tokens"] != want or \
            run["total_input_tokens"] != n * in_len:
        die("%s %s: %d of %d requests completed, %d output tokens (want %d), %d input "
            "tokens (want %d): the servers must produce the same tokens\n%s" %
            (server.kind, name, run["completed"], n, run["total_output_tokens"], want,
             run["total_input_tokens"], n * in_len, r.stderr[-2000:]))
    chunks = sum(q["chunks"] for q in run["requests"])
    m = {
        "output_tok_s": round(run["output_throughput"], 3),
        "duration_s": round(run["duration_s"], 3),
        "tokens_per_chunk": round(want / chunks, 3) if chunks else None,
        "cached_tokens": run["total_cached_tokens"],
    }
    for k in LATENCIES:
        m[k.replace("_ms", "_mean_ms")] = round(run[k]["mean"], 2)
        m[k.replace("_ms", "_p99_ms")] = round(run[k]["p99"], 2)
    m["itl_p99_over_mean"] = round(run["itl_ms"]["p99"] / run["itl_ms"]["mean"], 3) \
        if run["itl_ms"]["mean"] > 0 else None
    return m, load


def summarize(runs, names):
    """{workload: {metric: {server: median, server_reps: [...], ratio}}}."""
    out = {}
    for wname in names:
        per = {}
        for srv in SERVERS:
            rs = sorted((x for x in runs if x["server"] == srv and x["workload"] == wname),
                        key=lambda x: x["rep"])
            per[srv] = rs
        metrics = list(per[SERVERS[0]][0]["metrics"]) if per[SERVERS[0]] else []
        w = {}
        for k in metrics:
            e = {}
            for srv in SERVERS:
                vals = [x["metrics"][k] for x in per[srv] if x["metrics"][k] is not None]
                e[srv + "_reps"] = vals
                e[srv] = round(statistics.median(vals), 3) if vals else None
            e["ratio"] = benchlib.paired_ratio([x["metrics"][k] for x in per["inferd"]],
                                               [x["metrics"][k] for x in per["llama-server"]])
            w[k] = e
        out[wname] = w
    return out


def targets(summary):
    t = {}
    for name, (wname, k, op, bound) in TARGETS.items():
        if wname not in summary:
            continue
        e = summary[wname][k]
        v = e["ratio"] if k == "output_tok_s" else e["inferd"]
        ok = v is not None and (v >= bound if op == ">=" else v <= bound)
        t[name] = {"value": v, "target": "%s %s%s" % ({">=": "≥", "<=": "≤"}[op], bound,
                                                      "×" if k == "output_tok_s" else ""),
                   "met": ok}
    return t


def markdown(report):
    """The table of docs/benchmarks.md's "Served" section, from the summaries."""
    marks = {}
    for m in report["models"]:
        for name, (wname, k, _, _) in TARGETS.items():
            if name in m["targets"]:
                marks[(m["model"], wname, k)] = m["targets"][name]
    lines = ["| | llama-server | inferd | inferd ÷ llama-server | target |",
             "| --- | --- | --- | --- | --- |"]
    for m in report["models"]:
        for w in report["workloads"]:
            s = m["summary"][w["name"]]
            what = "%s, %d stream%s" % (m["model"], w["streams"], "" if w["streams"] == 1 else "s")

            def mark(k, v):
                t = marks.get((m["model"], w["name"], k))
                return "" if not t else "%s %s" % (t["target"], "✓" if t["met"] else "✗")

            tput = s["output_tok_s"]
            lines.append("| %s, output tok/s | %.1f | %.1f | **%.2f×** | %s |" %
                         (what, tput["llama-server"], tput["inferd"], tput["ratio"],
                          mark("output_tok_s", tput["ratio"])))
            for k, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL")):
                mean, p99 = s[k + "_mean_ms"], s[k + "_p99_ms"]
                lines.append("| %s, %s mean / p99 (ms) | %.1f / %.1f | %.1f / %.1f | %.2f× / %.2f× | |" %
                             (what, label, mean["llama-server"], p99["llama-server"],
                              mean["inferd"], p99["inferd"], mean["ratio"], p99["ratio"]))
            r = s["itl_p99_over_mean"]
            lines.append("| %s, ITL p99 ÷ mean | %.2f | %.2f | | %s |" %
                         (what, r["llama-server"], r["inferd"],
                          mark("itl_p99_over_mean", r["inferd"])))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--inferd", required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--infer", required=True)
    ap.add_argument("--model", action="append", required=True, help="NAME=PATH")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--repo", default=".")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--inferd-arg", action="append", default=[],
                    help="one more argument for inferd (repeatable; e.g. --chat-template=llama3 "
                         "for a GGUF without a template, as bench/make_shape_gguf.py writes)")
    a = ap.parse_args()
    if a.threads < 1 or a.reps < 1 or a.ctx < SLOTS * 64:
        die("--threads and --reps must be >= 1, --ctx >= %d" % (SLOTS * 64))
    if a.smoke:
        a.reps = 1
    wls = workloads(a.smoke)
    per_slot = a.ctx // SLOTS
    need = max(i + o for _, _, _, i, o in wls)
    if per_slot < need:
        die("--ctx %d gives each of llama-server's %d slots %d tokens, fewer than the %d a "
            "request needs" % (a.ctx, SLOTS, per_slot, need))
    signal.signal(signal.SIGTERM, kill_live)
    signal.signal(signal.SIGINT, kill_live)
    report = {
        **benchlib.report_head("served_vs_llamaserver", a.threads, a.repo),
        "llama_server": a.llama_server,
        "reps": a.reps,
        "smoke": a.smoke,
        "ctx_tokens": a.ctx,
        "llama_server_slots": SLOTS,
        "workloads": [{"name": w[0], "streams": w[1], "requests": w[2], "input_len": w[3],
                       "output_len": w[4]} for w in wls],
        "models": [],
    }
    t_start = time.time()
    with tempfile.TemporaryDirectory(prefix="served-vs-llamaserver-") as tmp:
        try:
            for spec in a.model:
                mname, _, gguf = spec.partition("=")
                kvb = kv_bytes_per_token(a.inferd, gguf)
                runs = []
                for rep in range(a.reps):
                    order = SERVERS if rep % 2 == 0 else SERVERS[::-1]
                    for kind in order:
                        srv = Server(kind, a, gguf, kvb, tmp)
                        ready_s = srv.wait_ready(300)
                        for wi, wl in enumerate(wls):
                            seed = 1000 * rep + wi + 1  # the same for both servers
                            m, load = bench(a, srv, wl, seed, tmp)
                            runs.append({"server": kind, "workload": wl[0], "rep": rep,
                                         "seed": seed, "load_avg": load,
                                         "ready_s": round(ready_s, 2), "metrics": m})
                            print("served_vs_llamaserver: %s rep %d %s %s: %.1f tok/s, ITL "
                                  "mean %.1f p99 %.1f ms (load %s)" %
                                  (mname, rep, kind, wl[0], m["output_tok_s"], m["itl_mean_ms"],
                                   m["itl_p99_ms"], load), file=sys.stderr)
                        srv.stop()
                summary = summarize(runs, [w[0] for w in wls])
                report["models"].append({
                    "model": mname, "path": gguf,
                    "file_mib": round(os.path.getsize(gguf) / 2**20, 1),
                    "kv_bytes_per_token": kvb,
                    "summary": summary, "targets": targets(summary), "runs": runs})
        finally:
            for s in list(LIVE):
                s.stop()
    report["load_avg_end"] = benchlib.load_avg()
    report["wall_s"] = round(time.time() - t_start, 1)
    print(markdown(report), file=sys.stderr)
    benchlib.write_report(report, a.json)


if __name__ == "__main__":
    main()
