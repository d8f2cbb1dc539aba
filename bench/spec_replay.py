#!/usr/bin/env python3
"""spec_replay.py -- replays the n-gram proposer and the speculation policy over the
greedy tokens of tests/integration/spec_prompts.py (docs/speculative.md, "Defaults"), so
that configurations can be compared exactly and without timing: greedy output does not
depend on speculation, so which proposals a configuration makes and which of them stand
is a function of the tokens alone. A Python model of worker/ngram.c, worker/spec.c
(ifd_spec_want / _propose / _adapt / _rate / _budget, the long-match probe) and the
engine's batch-1 loop; --check runs the daemon's own speculation on the same prompts
and fails unless its vllm:spec_decode_* counters equal the replay's for the daemon's
defaults (they did on 2026-12-07: keep the model in step with the C code).

One inferd (no speculation needed) gives each prompt's token ids: the chat completion's
token_ids (return_token_ids) and the prompt's, from /v1/completions over the ChatML text
SmolLM2's template renders (checked: its output must be the chat's). Per configuration
and prompt: verifications, proposed and accepted tokens, and the ratio predicted by the
cost model of the verification budget (a step of T rows costs knee + T; --cost-knee, 3.5
the CPU's) -- a prediction, not a measurement. --streams N replays N identical streams
as one sequence whose proposals the budget cuts to the N streams' average (an
approximation of the engine's per-sequence cut).

  bench/spec_replay.py --inferd build/daemon/inferd [--max-tokens 256] [--streams 1]
      [--config k=8,nmin=1,nmax=4,probe=3,knee=3.5,decay=0.98 ...] [--check]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import spec_decode as sd  # noqa: E402
from spec_prompts import PROMPTS  # noqa: E402

DEFAULTS = dict(k=8, nmin=1, nmax=4, probe=3, knee=3.5, decay=0.98)  # worker/spec.h
PRIOR, PRIOR_W = 0.75, 2.0


def ngram(h, nmin, nmax, k):
    """worker/ngram.c: the most recent earlier occurrence of the longest suffix."""
    if k <= 0 or len(h) < 2:
        return []
    nmin = max(nmin, 1)
    for n in range(min(nmax, 16, len(h) - 1), nmin - 1, -1):
        suf = h[len(h) - n:]
        for j in range(len(h) - n - 1, -1, -1):
            if h[j:j + n] == suf:
                return h[j + n:j + n + k]
    return []


class State:
    """ifd_spec_state_t"""

    def __init__(self, c):
        self.kmax = self.k = c["k"]
        self.wait = self.misses = 0
        self.hits = self.fails = 0.0
        self.c = c

    def want(self, lim):
        self.hits *= self.c["decay"]
        self.fails *= self.c["decay"]
        if self.k == 0:
            self.wait -= 1
            if self.wait > 0:
                return 0
            self.k = 1
        return min(self.k, lim) if lim > 0 else 0

    def propose(self, h, lim):
        c = self.c
        w = self.want(lim)
        if w > 0:
            return ngram(h, c["nmin"], c["nmax"], w)
        if self.k != 0 or lim <= 0 or not c["probe"]:
            return []
        lo = max(c["nmin"], c["probe"])
        d = ngram(h, lo, c["nmax"], 1) if lo <= c["nmax"] else []
        if d:
            self.wait, self.k = 0, 1
        return d

    def adapt(self, nd, acc):
        self.hits += acc
        self.fails += 1.0 if acc < nd else 0.0
        if acc == nd:
            self.k, self.misses = min(self.k + 2, self.kmax), 0
        elif acc > 0:
            self.k, self.misses = acc + 1, 0
        else:
            self.k //= 2
            if self.k == 0:
                self.misses += 1
                self.wait = 4 << min(self.misses, 4)

    def rate(self):
        n = self.hits + self.fails + PRIOR_W
        p = (self.hits + PRIOR_W * PRIOR) / n
        return p, min(1.0, p + math.sqrt(p * (1 - p) / n))


def budget(cands, base, knee):
    """ifd_spec_budget: cands [(n, p1, p)] -> kept per candidate."""
    if knee <= 0:
        return [max(n, 0) for n, _, _ in cands]
    keep, tok, cost = [0] * len(cands), float(base), knee + base
    while True:
        best, g_best = -1, 0.0
        for i, (n, p1, p) in enumerate(cands):
            if keep[i] < n:
                g = p1 * p ** keep[i]
                if g > g_best:
                    best, g_best = i, g
        if best < 0 or g_best * cost <= tok:
            return keep
        keep[best] += 1
        tok += g_best
        cost += 1


def replay(prompt, out, c, streams, cost_knee):
    """The engine's loop for one sequence (or `streams` identical ones): counters and
    the predicted decode ratio (the prefill and the first token excluded, as
    spec_decode.py's decode rate)."""
    h, gen, st = list(prompt) + [out[0]], 1, State(c)
    verif = prop = acc_t = 0
    cost = 0.0
    while gen < len(out):
        d = st.propose(h, len(out) - gen - 1)
        if d:
            p, p1 = st.rate()
            keep = budget([(len(d), p1, p)] * streams, streams, c["knee"])
            d = d[:sum(keep) // streams]
        acc = 0
        while acc < len(d) and out[gen + acc] == d[acc]:
            acc += 1
        h += out[gen:gen + acc + 1]
        gen += acc + 1
        if d:
            verif, prop, acc_t = verif + 1, prop + len(d), acc_t + acc
            st.adapt(len(d), acc)
        cost += cost_knee + streams * (1 + len(d))
    plain = (len(out) - 1) * (cost_knee + streams)
    return {"verifications": verif, "proposed": prop, "accepted": acc_t,
            "predicted_ratio": round(plain / cost, 3) if cost else None}


def post(sock, path, body):
    c = sd.UnixConn(sock)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = json.loads(r.read())
    c.close()
    if r.status != 200:
        sys.exit("spec_replay: HTTP %d: %s" % (r.status, str(data)[:300]))
    return data


def token_ids(sock, max_tokens):
    """Each prompt's (prompt ids, greedy output ids)."""
    ids = {}
    for name, (msgs, _) in PROMPTS.items():
        ch = post(sock, "/v1/chat/completions", {"messages": msgs, "max_tokens": max_tokens,
                                                 "temperature": 0, "return_token_ids": True,
                                                 "speculative": False})
        text = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
                "Hugging Face<|im_end|>\n<|im_start|>user\n" + msgs[0]["content"] +
                "<|im_end|>\n<|im_start|>assistant\n")
        co = post(sock, "/v1/completions", {"prompt": text, "max_tokens": max_tokens,
                                            "temperature": 0, "return_token_ids": True,
                                            "speculative": False})
        out = ch["choices"][0]["token_ids"]
        if co["choices"][0]["token_ids"] != out or \
                len(co["choices"][0]["prompt_token_ids"]) != ch["usage"]["prompt_tokens"]:
            sys.exit("spec_replay: the ChatML text is not the daemon's template for %s "
                     "(another model?)" % name)
        ids[name] = (co["choices"][0]["prompt_token_ids"], out)
    return ids


def parse_config(text):
    c = dict(DEFAULTS)
    for kv in filter(None, (text or "").split(",")):
        k, v = kv.split("=")
        if k not in c:
            sys.exit("spec_replay: unknown config key %s (%s)" % (k, ", ".join(c)))
        c[k] = float(v) if k in ("knee", "decay") else int(v)
    return c


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inferd", required=True)
    ap.add_argument("--model", default=os.path.expanduser(
        "~/.cache/inferd/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--streams", type=int, default=1)
    ap.add_argument("--cost-knee", type=float, default=3.5)
    ap.add_argument("--config", action="append", help="k=,nmin=,nmax=,probe=,knee=,decay= "
                    "(the rest: the defaults); repeat to compare")
    ap.add_argument("--check", action="store_true", help="the daemon's own counters must "
                    "equal the replay's for the defaults (batch 1)")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="spec-replay-")
    sock = os.path.join(tmp, "inferd.sock")
    log = open(os.path.join(tmp, "inferd.log"), "wb")
    proc = subprocess.Popen([a.inferd, "--model", a.model, "--socket", sock, "--workers", "1",
                             "--spec", "ngram", "--worker-ping-interval", "0.05"],
                            stdout=log, stderr=subprocess.STDOUT)
    report = {"bench": "spec_replay", "max_tokens": a.max_tokens, "streams": a.streams,
              "cost_knee": a.cost_knee, "note": "predictions from a cost model, not timings",
              "configs": []}
    try:
        sd.wait_ready(sock, proc)
        ids = token_ids(sock, a.max_tokens)
        for text in a.config or [""]:
            c = parse_config(text)
            report["configs"].append({"config": c, "prompts": {
                n: replay(p, o, c, a.streams, a.cost_knee) for n, (p, o) in ids.items()}})
        if a.check:
            c = dict(DEFAULTS)
            for name, (msgs, _) in PROMPTS.items():
                time.sleep(0.3)  # the worker's counters reach /metrics with its next ping
                before = sd.spec_counters(sock)
                sd.stream(sock, msgs, a.max_tokens, None)
                time.sleep(0.3)
                after = sd.spec_counters(sock)
                got = [after.get(k, 0) - before.get(k, 0)
                       for k in ("drafts", "draft_tokens", "accepted_tokens")]
                r = replay(*ids[name], c, 1, a.cost_knee)
                want = [r["verifications"], r["proposed"], r["accepted"]]
                if got != want:
                    report["error"] = "%s: the daemon counted %s, the replay %s" % (
                        name, got, want)
                report.setdefault("check", {})[name] = {"daemon": got, "replay": want}
    finally:
        proc.terminate()
        proc.wait(60)
        log.close()
    print(json.dumps(report))
    return 1 if "error" in report else 0


if __name__ == "__main__":
    sys.exit(main())
