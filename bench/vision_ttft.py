#!/usr/bin/env python3
"""vision_ttft.py -- the time to first token of a chat request with one image (issue 28 item 8;
docs/benchmarks.md "One-image TTFT", docs/vision.md), inferd's daemon against llama.cpp's
llama-server with --mmproj, on the same two files:

  bench/vision_ttft.py [--rounds 3] [--threads 2] [--image-size 896] [--text GGUF]
                       [--mmproj GGUF] [--servers inferd,llama-server] [--json OUT] [--smoke]
                       [--no-warmup] [--timeout S]

Defaults: gemma-3-4b's vision tower with random weights and the 1-layer text model of width
2560 that tools/make_gemma3_4b_mmproj.py writes (~/.cache/inferd/shapes/
mmproj-gemma-3-4b-random-f16.gguf and gemma-3-4b-vision-text1.gguf; the same files
bench/vision_vs_mtmd.sh times the encode on). --smoke: the tiny Gemma 3 vision model's GGUF
pair (tests/data/tiny-gemma3-vision/gguf), 1 round, a 64² image: seconds.

Both servers run at the same time on loopback TCP (each idle while the other answers), with
the same thread count: inferd --model TEXT --mmproj MMPROJ --threads T; llama-server -m TEXT
--mmproj MMPROJ -t T -tb T -np 1 -c 2048 (its defaults otherwise: prompt cache on). After one
unmeasured question per server (another picture; --no-warmup leaves it out), each round
asks each server (the order alternating between rounds) two questions:

  cold  a new picture (an S x S PNG no server has seen: a seeded pattern, different every
        round and server) -- decode, resize, the tower's encode, the prefill of the prompt;
  warm  the same request again -- what each server's caches save (inferd: the image's
        embeddings by content hash and the prompt's KV blocks; llama-server: its slot's KV).

A question is one non-streamed POST /v1/chat/completions, temperature 0, max_tokens 1, one
user message [text, image_url data:image/png;base64]: its wall time from the request's first
byte to the whole response (one token: the prefill and one sample, i.e. the time to first
token as a client sees it, HTTP and base64 included). Every answer must be 200 with one
choice and usage.prompt_tokens > 256 (the image's tokens are counted). Reported: per server
and kind the per-round times, median and min, the prompt tokens, and inferd / llama-server
as the median of the per-round ratios; the load average before each round. One JSON line on
stdout (and in --json OUT); progress on stderr. Figures count only from a quiet machine.

A tool that is missing (the build's inferd / inferd-worker, llama-server, a model file) is
skipped LOUDLY: a "SKIPPED: ..." line on stderr and the report's "skipped" list; with
--require-all that is a failure (status 1). Exit status 0 otherwise, 1 on any failed request.
"""
import argparse
import base64
import json
import os
import shlex
import signal
import socket
import statistics
import struct
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zlib

sys.dont_write_bytecode = True  # keep bench/ clean
import benchlib  # noqa: E402  (bench/benchlib.py, next to this script)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOME = os.path.expanduser("~")
SHAPES = os.path.join(HOME, ".cache/inferd/shapes")
TINY = os.path.join(ROOT, "tests/data/tiny-gemma3-vision/gguf")
QUESTION = "What is in this picture?"


def die(msg):
    for s in list(LIVE):
        s.stop()
    sys.exit("vision_ttft: " + msg)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def png(size, seed):
    """An RGB PNG of size x size: smooth gradients plus seeded noise (so it compresses like a
    photo more than like static), different for every seed."""
    x = (seed * 2654435761 + 12345) & 0xFFFFFFFF
    rows = bytearray()
    for y in range(size):
        rows.append(0)  # filter: none
        line = bytearray(3 * size)
        for i in range(size):
            x ^= (x << 13) & 0xFFFFFFFF
            x ^= x >> 17
            x ^= (x << 5) & 0xFFFFFFFF
            n = x & 15
            line[3 * i] = (i * 255 // size + seed * 37 + n) & 255
            line[3 * i + 1] = (y * 255 // size + seed * 11 + n) & 255
            line[3 * i + 2] = ((i + y) * 127 // size + seed * 53 + n) & 255
        rows += line

    def chunk(tag, data):
        c = struct.pack(">I", len(data)) + tag + data
        return c + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
            + chunk(b"IDAT", zlib.compress(bytes(rows), 6)) + chunk(b"IEND", b""))


class Server:
    """One server process in a process group of its own (so inferd's workers go with it)."""

    def __init__(self, kind, a, tmp):
        self.kind = kind
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.logpath = os.path.join(tmp, "%s-%d.log" % (kind, self.port))
        if kind == "llama-server":
            cmd = [a.llama_server, "-m", a.text, "--mmproj", a.mmproj, "-t", str(a.threads),
                   "-tb", str(a.threads), "-np", "1", "-c", "2048",
                   "--host", "127.0.0.1", "--port", str(self.port)]
        else:
            cmd = [a.inferd, "--model", a.text, "--mmproj", a.mmproj, "--threads", str(a.threads),
                   "--worker-binary", a.worker,
                   "--socket", os.path.join(tmp, "inferd-vision-ttft-%d.sock" % self.port),
                   "--listen", "127.0.0.1:%d" % self.port]
        self.cmd = cmd
        self.log = open(self.logpath, "wb")
        self.proc = benchlib.spawn_group(cmd, self.log)
        LIVE.append(self)
        self.model = None

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
                        with urllib.request.urlopen(self.url + "/v1/models", timeout=5) as m:
                            self.model = json.loads(m.read())["data"][0]["id"]
                        return time.time() - t0
            except (OSError, ValueError, KeyError, IndexError, urllib.error.URLError):
                pass
            time.sleep(0.2)
        die("%s not ready after %d s: %s\n%s" % (self.kind, timeout, shlex.join(self.cmd),
                                                 self.logtail()))

    def ask(self, data_url, timeout):
        """(seconds, prompt_tokens) of one max_tokens=1 chat request with the image."""
        body = json.dumps({
            "model": self.model, "temperature": 0, "max_tokens": 1, "stream": False,
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": QUESTION},
                {"type": "image_url", "image_url": {"url": data_url}}]}]}).encode()
        req = urllib.request.Request(self.url + "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        t0 = time.perf_counter()
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                resp = json.loads(r.read())
        except urllib.error.HTTPError as e:
            die("%s answered %d: %s\n%s" % (self.kind, e.code, e.read()[:500], self.logtail()))
        except (OSError, ValueError) as e:
            die("%s: request failed: %s\n%s" % (self.kind, e, self.logtail()))
        dt = time.perf_counter() - t0
        if len(resp.get("choices", [])) != 1:
            die("%s: not one choice: %s" % (self.kind, json.dumps(resp)[:500]))
        pt = resp.get("usage", {}).get("prompt_tokens", 0)
        if pt <= 256 and not SMOKE[0]:
            die("%s: usage.prompt_tokens %s does not count the image's 256 tokens"
                % (self.kind, pt))
        if pt <= 0:
            die("%s: no usage.prompt_tokens: %s" % (self.kind, json.dumps(resp)[:500]))
        return dt, pt

    def stop(self):
        if self in LIVE:
            LIVE.remove(self)
        benchlib.stop_group(self.proc)
        self.log.close()


LIVE = []
SMOKE = [False]


def first_existing(*paths):
    for p in paths:
        if p and os.path.exists(p):
            return p
    return paths[0] if paths else None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--image-size", type=int, default=896)
    p.add_argument("--text", default=None)
    p.add_argument("--mmproj", default=None)
    p.add_argument("--servers", default="inferd,llama-server")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--llama-server", default=None)
    p.add_argument("--timeout", type=float, default=900, help="seconds per request")
    p.add_argument("--json", default=None)
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--no-warmup", action="store_true",
                   help="no unmeasured first request (it costs a whole cold encode)")
    p.add_argument("--require-all", action="store_true")
    a = p.parse_args()
    SMOKE[0] = a.smoke
    if a.smoke:
        a.rounds = 1
        a.image_size = 64 if a.image_size == 896 else a.image_size
        a.text = a.text or os.path.join(TINY, "tiny-gemma3-text-f32.gguf")
        a.mmproj = a.mmproj or os.path.join(TINY, "mmproj-tiny-gemma3-f32.gguf")
    a.text = a.text or os.path.join(SHAPES, "gemma-3-4b-vision-text1.gguf")
    a.mmproj = a.mmproj or os.path.join(SHAPES, "mmproj-gemma-3-4b-random-f16.gguf")
    a.inferd = os.path.join(a.build, "daemon/inferd")
    a.worker = os.path.join(a.build, "worker/inferd-worker")
    a.llama_server = a.llama_server or os.environ.get("LLAMA_SERVER") or first_existing(
        os.path.join(HOME, ".cache/inferd/llamacpp-tools/bin/llama-server"),
        os.path.join(HOME, ".cache/inferd/llamacpp-server/bin/llama-server"))
    if a.rounds < 1 or a.threads < 1 or a.image_size < 14:
        die("--rounds ≥ 1, --threads ≥ 1, --image-size ≥ 14")

    skipped = []

    def skip(what):
        print("SKIPPED: " + what, file=sys.stderr)
        skipped.append(what)

    for f in (a.text, a.mmproj):
        if not os.path.isfile(f):
            skip("%s missing (tools/make_gemma3_4b_mmproj.py makes the 4B-shaped pair)" % f)
    servers = []
    for kind in [s for s in a.servers.split(",") if s]:
        if kind == "inferd":
            miss = [f for f in (a.inferd, a.worker) if not os.access(f, os.X_OK)]
            if miss:
                skip("inferd: %s not built (cmake --build build --target inferd inferd-worker)"
                     % ", ".join(miss))
                continue
        elif kind == "llama-server":
            if not (a.llama_server and os.access(a.llama_server, os.X_OK)):
                skip("llama-server: not found (--llama-server, $LLAMA_SERVER, "
                     "~/.cache/inferd/llamacpp-tools/bin)")
                continue
        else:
            die("--servers: inferd and/or llama-server, not %r" % kind)
        servers.append(kind)
    if any("missing" in s for s in skipped):
        servers = []
    if a.require_all and skipped:
        die("--require-all: %d skipped" % len(skipped))

    report = benchlib.report_head("vision_ttft", a.threads, ROOT)
    report.update({"text": a.text, "mmproj": a.mmproj, "image_size": a.image_size,
                   "rounds": a.rounds, "question": QUESTION, "max_tokens": 1,
                   "warmup": not a.no_warmup,
                   "skipped": skipped, "servers": {}})
    if not servers:
        benchlib.write_report(report, a.json)
        return 0
    signal.signal(signal.SIGTERM, lambda *_: die("terminated"))
    with tempfile.TemporaryDirectory(prefix="inferd-vision-ttft-") as tmp:
        live = {k: Server(k, a, tmp) for k in servers}
        try:
            for k, s in live.items():
                ready = s.wait_ready(600)
                print("%s ready in %.1f s (model %s)" % (k, ready, s.model), file=sys.stderr)
                if not a.no_warmup:
                    s.ask("data:image/png;base64," +
                          base64.b64encode(png(a.image_size, 999)).decode(), a.timeout)
            res = {k: {"cold_s": [], "warm_s": [], "prompt_tokens": None} for k in servers}
            loads = []
            for r in range(a.rounds):
                loads.append(benchlib.load_avg())
                order = servers if r % 2 == 0 else servers[::-1]
                for i, k in enumerate(order):
                    url = "data:image/png;base64," + base64.b64encode(
                        png(a.image_size, 1 + 2 * r + i + (0 if k == "inferd" else 100))).decode()
                    cold, pt = live[k].ask(url, a.timeout)
                    warm, pt2 = live[k].ask(url, a.timeout)
                    if pt2 != pt:
                        die("%s: prompt_tokens %d then %d for the same request" % (k, pt, pt2))
                    res[k]["cold_s"].append(round(cold, 4))
                    res[k]["warm_s"].append(round(warm, 4))
                    res[k]["prompt_tokens"] = pt
                    print("round %d: %s cold %.3f s, warm %.3f s (%d prompt tokens)" %
                          (r + 1, k, cold, warm, pt), file=sys.stderr)
        finally:
            for s in list(live.values()):
                s.stop()
    for k in servers:
        for kind in ("cold_s", "warm_s"):
            v = res[k][kind]
            res[k][kind] = {"per_round": v, "median": round(statistics.median(v), 4),
                            "min": min(v)}
    report["servers"] = res
    report["load_avg_per_round"] = loads
    if "inferd" in res and "llama-server" in res:
        for kind in ("cold_s", "warm_s"):
            report["inferd_over_llamaserver_" + kind[:-2]] = benchlib.paired_ratio(
                res["inferd"][kind]["per_round"], res["llama-server"][kind]["per_round"])
    benchlib.write_report(report, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
