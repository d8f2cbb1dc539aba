#!/usr/bin/env python3
"""spec_decode.py -- batch-1 decode speed with and without speculative decoding
(issue 27; docs/speculative.md), served: one inferd with `--spec ngram` on a
temporary Unix socket, each prompt of tests/integration/spec_prompts.py (input-
grounded: rewrite a ~400-token code file, extract an invoice's fields; open-ended
chat) sent as a streaming chat completion, greedy, with `"speculative": false`
and with the daemon's n-gram setting, the two in alternating order per
repetition; with --streams N, N such streams at once per side (the 8-way
figure: their summed decode tok/s). Reported per prompt: decode tok/s (tokens
after the first over the time from the first to the last), each side's median
over repetitions, the
paired ratio (speculative / plain), the acceptance (accepted / proposed tokens
from /metrics' vllm:spec_decode_* counters) and whether the texts were equal
(they must be: a difference fails the run).

--draft-model GGUF runs the daemon with `--spec draft --draft-model GGUF`
instead (the draft model proposer, CPU workers): the same sides and report,
with the draft named in it. A draft equal to the model (its own GGUF) accepts
every proposal and so times the draft path in real shapes with forced
acceptance: label such figures as that, not as a real draft's.

--llama-server PATH adds llama.cpp's server on the same GGUF, prompts and thread count, as
two servers started side by side: plain, and with its speculation of the same kind
(`--spec-type ngram-simple`, or `draft-simple -md GGUF` with --draft-model; draft length
--spec-tokens), one slot per stream. Per prompt its two rates, their paired ratio, its
acceptance where its timings report one (draft_n / draft_n_accepted), whether its two texts
are equal, and inferd's speculative rate over llama.cpp's ("spec_vs_llama").

Figures are for a quiet machine: on a loaded one the ratio is noise. --smoke
runs one short repetition (the harness check, no figures to keep).

  bench/spec_decode.py --inferd build/daemon/inferd [--model GGUF] [--reps 3]
                       [--max-tokens 256] [--spec-tokens 8] [--threads T]
                       [--streams N] [--draft-model GGUF] [--out report.json] [--smoke]
                       [--llama-server PATH]
"""
import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.dont_write_bytecode = True  # keep bench/ and tests/ clean
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import benchlib  # noqa: E402
from spec_prompts import PROMPTS  # noqa: E402


class UnixConn(http.client.HTTPConnection):
    def __init__(self, path, timeout=600):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


LLAMA_DRAFTS = {}  # llama-server's timings summed per server url: draft_n, draft_n_accepted


def stream(sock, messages, max_tokens, spec):
    """One greedy streaming chat completion from inferd (sock: its Unix socket) or a
    llama-server (sock: its http:// URL): (text, tokens, decode tok/s)."""
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    if spec is not None:
        body["speculative"] = spec
    if sock.startswith("http://"):
        c = http.client.HTTPConnection(sock[7:], timeout=600)
    else:
        c = UnixConn(sock)
    c.request("POST", "/v1/chat/completions", json.dumps(body),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        sys.exit("spec_decode: HTTP %d: %s" % (r.status, r.read()[:300]))
    text, n, t_first, t_last = "", None, None, None
    for line in r:
        line = line.strip()
        if not line.startswith(b"data:") or line == b"data: [DONE]":
            continue
        o = json.loads(line[5:])
        if o.get("usage"):
            n = o["usage"]["completion_tokens"]
        if sock.startswith("http://") and o.get("timings"):
            acc = LLAMA_DRAFTS.setdefault(sock, {"draft_n": 0, "draft_n_accepted": 0})
            for k in acc:
                acc[k] += o["timings"].get(k, 0)
        for ch in o.get("choices", []):
            if ch["delta"].get("content"):
                t_last = time.monotonic()
                t_first = t_first or t_last
                text += ch["delta"]["content"]
    c.close()
    rate = (n - 1) / (t_last - t_first) if n and n > 1 and t_last > t_first else None
    return text, n, rate


def streams(sock, messages, max_tokens, spec, n):
    """n concurrent streams of stream(): (their texts, summed decode tok/s)."""
    if n == 1:
        text, _, rate = stream(sock, messages, max_tokens, spec)
        return [text], rate
    out = [None] * n

    def one(i):
        out[i] = stream(sock, messages, max_tokens, spec)
    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    rates = [o[2] for o in out]
    return [o[0] for o in out], sum(rates) if all(rates) else None


def spec_counters(sock):
    c = UnixConn(sock)
    c.request("GET", "/metrics")
    out = {}
    for line in c.getresponse().read().decode().splitlines():
        for k in ("drafts", "draft_tokens", "accepted_tokens"):
            if line.startswith("vllm:spec_decode_num_%s_total{" % k):
                out[k] = float(line.rsplit(" ", 1)[1])
    c.close()
    return out


def wait_ready(sock, proc, timeout=300):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            sys.exit("spec_decode: inferd exited with %d" % proc.returncode)
        try:
            c = UnixConn(sock, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit("spec_decode: inferd not ready")


def llama_server(a, spec, tmp):
    """A llama-server on a free localhost port, plain or speculating like the daemon:
    (process, url, log file)."""
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        port = so.getsockname()[1]
    cmd = [a.llama_server, "-m", a.model, "-np", str(a.streams), "-c", str(4096 * a.streams),
           "--host", "127.0.0.1", "--port", str(port), "--no-webui"]
    if a.threads:
        cmd += ["-t", str(a.threads), "-tb", str(a.threads)]
    if spec:
        cmd += ["--spec-draft-n-max", str(a.spec_tokens)]
        cmd += ["--spec-type", "draft-simple", "-md", a.draft_model] if a.draft_model else \
            ["--spec-type", "ngram-simple"]
    url = "http://127.0.0.1:%d" % port

    def healthy():
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                return r.status == 200
        except OSError:
            return False
    log, proc = benchlib.start_and_wait(
        cmd, os.path.join(tmp, "llama-server-%s.log" % ("spec" if spec else "plain")), healthy)
    return proc, url, log


def llama_side(a, msgs, urls):
    """llama.cpp's plain and speculative rates for one prompt, as inferd's are taken."""
    rates = {"plain": [], "spec": []}
    same = True
    before = {u: dict(LLAMA_DRAFTS.get(u, {})) for u in urls.values()}
    for side in ("plain", "spec"):
        stream(urls[side], msgs, 8, None)  # warm-up
    for rep in range(a.reps):
        order = ("plain", "spec") if rep % 2 == 0 else ("spec", "plain")
        texts = {}
        for side in order:
            texts[side], rate = streams(urls[side], msgs, a.max_tokens, None, a.streams)
            rates[side].append(rate)
        same = same and len(set(texts["plain"] + texts["spec"])) == 1
    u = urls["spec"]
    d = {k: LLAMA_DRAFTS.get(u, {}).get(k, 0) - before[u].get(k, 0)
         for k in ("draft_n", "draft_n_accepted")}
    med = {s: round(statistics.median([r for r in v if r]), 2) if any(v) else None
           for s, v in rates.items()}
    return {"llama_plain_tok_s": med["plain"], "llama_spec_tok_s": med["spec"],
            "llama_ratio": benchlib.paired_ratio(rates["spec"], rates["plain"]),
            "llama_acceptance": round(d["draft_n_accepted"] / d["draft_n"], 3)
            if d["draft_n"] else None,
            "llama_same_text": same, "_spec_rates": rates["spec"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inferd", required=True)
    ap.add_argument("--model", default=os.path.expanduser(
        "~/.cache/inferd/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--spec-tokens", type=int, default=8)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--streams", type=int, default=1, help="concurrent streams per side")
    ap.add_argument("--out")
    ap.add_argument("--smoke", action="store_true", help="1 repetition of 32 tokens")
    ap.add_argument("--draft-model", help="the draft model proposer (--spec draft) with this "
                    "GGUF instead of n-gram")
    ap.add_argument("--llama-server", help="llama.cpp's llama-server: its plain and "
                    "speculative rates beside inferd's")
    a = ap.parse_args()
    if a.smoke:
        a.reps, a.max_tokens = 1, 32
    tmp = tempfile.mkdtemp(prefix="spec-bench-")
    sock = os.path.join(tmp, "inferd.sock")
    args = [a.inferd, "--model", a.model, "--socket", sock, "--workers", "1",
            "--spec-tokens", str(a.spec_tokens), "--worker-ping-interval", "0.1"]
    args += ["--spec", "draft", "--draft-model", a.draft_model] if a.draft_model else \
        ["--spec", "ngram"]
    if a.threads:
        args += ["--threads", str(a.threads)]
    log = open(os.path.join(tmp, "inferd.log"), "wb")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    report = benchlib.report_head("spec_decode", a.threads or None, os.path.join(HERE, ".."))
    report.update(model=os.path.basename(a.model), max_tokens=a.max_tokens, streams=a.streams,
                  spec_tokens=a.spec_tokens, reps=a.reps, load_before=benchlib.load_avg(),
                  method="draft" if a.draft_model else "ngram",
                  draft_model=os.path.basename(a.draft_model) if a.draft_model else None,
                  forced_acceptance=bool(a.draft_model) and
                  os.path.realpath(a.draft_model) == os.path.realpath(a.model),
                  note="figures only from a quiet machine", prompts={})
    llamas = {}
    try:
        wait_ready(sock, proc)
        if a.llama_server:
            for side in ("plain", "spec"):
                llamas[side] = llama_server(a, side == "spec", tmp)
        for name, (msgs, kind) in PROMPTS.items():
            stream(sock, msgs, 8, False)  # warm-up (page cache, prefix cache alike for both)
            rates = {"plain": [], "spec": []}
            same = True
            before = spec_counters(sock)
            for rep in range(a.reps):
                order = ("plain", "spec") if rep % 2 == 0 else ("spec", "plain")
                texts = {}
                for side in order:
                    texts[side], rate = streams(sock, msgs, a.max_tokens,
                                                False if side == "plain" else None, a.streams)
                    rates[side].append(rate)
                same = same and len(set(texts["plain"] + texts["spec"])) == 1
            time.sleep(0.3)  # the worker's counters reach /metrics with its next ping
            after = spec_counters(sock)
            d = {k: after.get(k, 0) - before.get(k, 0) for k in after}
            med = {s: round(statistics.median([r for r in v if r]), 2) if any(v) else None
                   for s, v in rates.items()}
            report["prompts"][name] = {
                "kind": kind, "plain_tok_s": med["plain"], "spec_tok_s": med["spec"],
                "ratio": benchlib.paired_ratio(rates["spec"], rates["plain"]),
                "acceptance": round(d["accepted_tokens"] / d["draft_tokens"], 3)
                if d.get("draft_tokens") else None,
                "verifications": d.get("drafts"), "same_text": same}
            if not same:
                report["error"] = "the texts differ for %s" % name
            if llamas:
                row = llama_side(a, msgs, {k: v[1] for k, v in llamas.items()})
                spec_rates = row.pop("_spec_rates")
                row["spec_vs_llama"] = benchlib.paired_ratio(rates["spec"], spec_rates)
                report["prompts"][name].update(row)
    finally:
        proc.terminate()
        proc.wait(60)
        log.close()
        for p, _, lg in llamas.values():
            benchlib.stop_group(p)
            lg.close()
    report["load_after"] = benchlib.load_avg()
    benchlib.write_report(report, a.out)
    return 1 if "error" in report else 0


if __name__ == "__main__":
    sys.exit(main())
