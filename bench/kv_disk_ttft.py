#!/usr/bin/env python3
"""kv_disk_ttft.py -- time to first token of a request whose prompt shares a long prefix
(issue 26 item 2; docs/kvpool.md, "Disk tier"), served, three ways per repetition:

  cold      a fresh daemon with an empty --kv-cache-dir: the whole prompt is prefilled;
  pool hit  the same daemon, a second prompt with the same prefix: the pool holds it;
  disk hit  the daemon stopped and started again on the same directory (the pool is
            empty), a third prompt with the same prefix: it comes from the disk tier.

Each is a streaming completion (greedy, 8 tokens); TTFT is from sending the request to
the first streamed token, measured by the client. Reported: each way's median TTFT over
repetitions, the ratios disk/cold and pool/cold, the prompt and cached tokens, and whether
the disk-hit text equals a cold run of the same prompt (it must: a difference fails the
run). Each repetition uses its own prefix (the page cache still holds the files just
written: drop caches between the write and the read for a cold-disk figure, --drop-caches,
root only).

With --llama-server PATH (llama.cpp's server, the same GGUF, one slot, f16 KV, the same
threads), the same three prompts of each repetition go to it as well: cold (a fresh
server), pool hit (the slot's prompt cache holds the prefix), and the restart path
llama.cpp offers, its slot files (--slot-save-path): the slot saved after the pool hit, the
server started again, the slot restored (POST /slots/0?action=restore) and the third
prompt sent; its figure is the restore call plus that request's TTFT ("restore_s"; the
restore alone is "restore_call_s"). Reported beside inferd's: llama.cpp's medians and
inferd's disk hit ÷ llama.cpp's restore.

Figures are for a quiet machine; --smoke runs one short repetition (the harness check, no
figures to keep).

  bench/kv_disk_ttft.py --inferd build/daemon/inferd [--model GGUF] [--words 3400]
                        [--reps 3] [--drop-caches] [--out report.json] [--smoke]
                        [--llama-server PATH]
"""
import argparse
import http.client
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.dont_write_bytecode = True  # keep bench/ and tests/ clean
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
import benchlib  # noqa: E402
import model_paths  # noqa: E402

VOCAB = ("river stone lantern orchard copper meadow violet harbor canyon ember falcon glacier "
         "willow thunder saffron marble cedar quartz tundra beacon").split()


class Conn(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=600)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(600)
        self.sock.connect(self.path)


class Daemon:
    def __init__(self, inferd, model, kvdir, workdir, threads):
        self.sock = os.path.join(workdir, "inferd.sock")
        cmd = [inferd, "--model", model, "--socket", self.sock, "--kv-budget", "512M"]
        if kvdir:
            cmd += ["--kv-cache-dir", kvdir, "--kv-cache-disk-bytes", "8G"]
        if threads:
            cmd += ["--threads", str(threads)]
        self.log, self.proc = benchlib.start_and_wait(
            cmd, os.path.join(workdir, "inferd.log"), self.healthy)

    def healthy(self):
        try:
            c = Conn(self.sock)
            c.request("GET", "/health")
            return json.loads(c.getresponse().read()).get("status") == "ok"
        except (OSError, ValueError, http.client.HTTPException):
            return False

    def ttft(self, prompt, n=8):
        """(seconds to the first token, text, prompt tokens, cached tokens)."""
        body = json.dumps({"prompt": prompt, "max_tokens": n, "temperature": 0,
                           "ignore_eos": True, "stream": True,
                           "stream_options": {"include_usage": True}})
        c = Conn(self.sock)
        t0 = time.time()
        c.request("POST", "/v1/completions", body=body,
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        first, text, usage = None, "", {}
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            for ch in ev.get("choices") or []:
                if ch.get("text"):
                    if first is None:
                        first = time.time() - t0
                    text += ch["text"]
            if ev.get("usage"):
                usage = ev["usage"]
        details = usage.get("prompt_tokens_details") or {}
        return first, text, usage.get("prompt_tokens", 0), details.get("cached_tokens", 0)

    def stop(self):
        benchlib.stop_group(self.proc)
        self.log.close()


class LlamaServer:
    """llama.cpp's llama-server on a TCP port of localhost: one slot, f16 KV, slot files in
    slotdir."""

    def __init__(self, exe, model, slotdir, workdir, threads, ctx):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = "http://127.0.0.1:%d" % self.port
        cmd = [exe, "-m", model, "-c", str(ctx), "-np", "1", "--slot-save-path", slotdir,
               "--host", "127.0.0.1", "--port", str(self.port), "--no-webui"]
        if threads:
            cmd += ["-t", str(threads), "-tb", str(threads)]
        self.log, self.proc = benchlib.start_and_wait(
            cmd, os.path.join(workdir, "llama-server.log"), self.healthy)

    def healthy(self):
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                return r.status == 200
        except OSError:
            return False

    def ttft(self, prompt, n=8):
        """(seconds to the first token, text, prompt tokens computed) of a streamed greedy
        completion (the last from llama-server's timings: the prompt minus what its cache
        held)."""
        body = {"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True,
                "stream": True, "timings_per_token": True}
        req = urllib.request.Request(self.url + "/v1/completions",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        t0 = time.time()
        first, text, computed = None, "", None
        with urllib.request.urlopen(req, timeout=600) as r:
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                ev = json.loads(line[6:])
                if "timings" in ev:
                    computed = ev["timings"].get("prompt_n", computed)
                for ch in ev.get("choices") or []:
                    if ch.get("text"):
                        if first is None:
                            first = time.time() - t0
                        text += ch["text"]
        return first, text, computed

    def slot(self, action, filename):
        """(seconds, llama-server's answer) of a slot save or restore."""
        t0 = time.time()
        req = urllib.request.Request("%s/slots/0?action=%s" % (self.url, action),
                                     data=json.dumps({"filename": filename}).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            ans = json.loads(r.read())
        return time.time() - t0, ans

    def stop(self):
        benchlib.stop_group(self.proc)
        self.log.close()


def llama_rep(a, rep, tmp, prompts):
    """llama.cpp's side of one repetition: cold, pool hit, slot restore after a restart."""
    p_cold, p_pool, p_disk = prompts
    slotdir = os.path.join(tmp, "slots%d" % rep)
    os.makedirs(slotdir, exist_ok=True)
    srv = LlamaServer(a.llama_server, a.model, slotdir, tmp, a.threads, a.ctx)
    try:
        cold, _, _ = srv.ttft(p_cold)
        pool, _, pool_computed = srv.ttft(p_pool)
        _, saved = srv.slot("save", "rep%d.bin" % rep)
    finally:
        srv.stop()
    srv = LlamaServer(a.llama_server, a.model, slotdir, tmp, a.threads, a.ctx)
    try:
        call, restored = srv.slot("restore", "rep%d.bin" % rep)
        first, _, restore_computed = srv.ttft(p_disk)
    finally:
        srv.stop()
    if restored.get("n_restored", 0) != saved.get("n_saved", -1) or not saved.get("n_saved"):
        raise SystemExit("rep %d: llama-server saved %r, restored %r" % (rep, saved, restored))
    return {"llama_cold_s": cold, "llama_pool_s": pool, "llama_restore_call_s": call,
            "llama_restore_s": call + first, "llama_restored_tokens": restored["n_restored"],
            "llama_pool_computed_tokens": pool_computed,
            "llama_restore_computed_tokens": restore_computed}


def prefix(seed, words):
    rnd = random.Random(seed)
    return "Notes %d: " % seed + " ".join(rnd.choice(VOCAB) for _ in range(words)) + ".\n"


def one_rep(a, rep, tmp):
    kvdir = os.path.join(tmp, "kv%d" % rep)
    shared = prefix(1000 + rep, a.words)
    p_cold, p_pool, p_disk = (shared + q for q in ("First question:", "Second question:",
                                                     "Third question:"))
    ref = Daemon(a.inferd, a.model, None, tmp, a.threads)  # the disk-hit prompt, cold
    try:
        _, want, _, _ = ref.ttft(p_disk)
    finally:
        ref.stop()
    d = Daemon(a.inferd, a.model, kvdir, tmp, a.threads)
    try:
        cold, _, n_prompt, _ = d.ttft(p_cold)
        pool, _, _, pool_cached = d.ttft(p_pool)
        time.sleep(1.0)  # the tier's thread writes the last blocks
    finally:
        d.stop()
    if a.drop_caches:
        subprocess.run(["sync"], check=False)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    d = Daemon(a.inferd, a.model, kvdir, tmp, a.threads)
    try:
        disk, got, _, disk_cached = d.ttft(p_disk)
    finally:
        d.stop()
    if got != want:
        raise SystemExit("rep %d: the disk hit's text %r differs from a cold run's %r" % (
            rep, got, want))
    r = {"cold_s": cold, "pool_s": pool, "disk_s": disk, "prompt_tokens": n_prompt,
         "pool_cached_tokens": pool_cached, "disk_cached_tokens": disk_cached}
    if a.llama_server:
        r.update(llama_rep(a, rep, tmp, (p_cold, p_pool, p_disk)))
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--inferd", required=True)
    ap.add_argument("--model", default=model_paths.model_path())
    ap.add_argument("--words", type=int, default=3400, help="prefix words (~1.2 tokens each)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--drop-caches", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--llama-server", help="llama.cpp's llama-server: compare its slot restore")
    ap.add_argument("--ctx", type=int, default=8192, help="llama-server's context (-c)")
    a = ap.parse_args()
    if a.smoke:
        a.words, a.reps = 200, 1
    tmp = tempfile.mkdtemp(prefix="kv-disk-ttft-")
    try:
        reps = [one_rep(a, r, tmp) for r in range(a.reps)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    keys = ["cold_s", "pool_s", "disk_s"]
    if a.llama_server:
        keys += ["llama_cold_s", "llama_pool_s", "llama_restore_call_s", "llama_restore_s"]
    med = {k: statistics.median(r[k] for r in reps) for k in keys}
    report = benchlib.report_head("kv_disk_ttft", a.threads, os.path.join(HERE, ".."))
    report.update({"load_avg": benchlib.load_avg(), "smoke": a.smoke, "words": a.words,
                   "drop_caches": a.drop_caches, "reps": reps,
                   "median_ttft_s": med,
                   "disk_over_cold": med["disk_s"] / med["cold_s"] if med["cold_s"] else None,
                   "pool_over_cold": med["pool_s"] / med["cold_s"] if med["cold_s"] else None,
                   "texts_equal": True})
    if a.llama_server:
        report["disk_over_llama_restore"] = med["disk_s"] / med["llama_restore_s"]
        report["cold_over_llama_cold"] = med["cold_s"] / med["llama_cold_s"]
    benchlib.write_report(report, a.out)


if __name__ == "__main__":
    main()
