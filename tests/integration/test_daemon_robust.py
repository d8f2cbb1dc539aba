"""inferd against the failures of issue 17 and the vLLM metric names (label
model): each test is the regression test of one failure found by hand —
--listen port checks and the bound port logged, aborted streams counted in
the token metrics, strict HTTP/1.1 framing (docs/api.md), an API key of
spaces refused, --model DIR explained, a SIGSTOPped worker shown as
degraded, a crash loop retried, SO_PEERCRED in the access log — plus the
vLLM-compatible /metrics names, HEAD /metrics, /version and /ping.

Usage: test_daemon_robust.py INFERD WORKER   (standard library only)
"""
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_daemon_util import (SANITIZED, SCALE, Daemon, UnixHTTPConnection,  # noqa: E402
                              model_path, require_model, run_tests)

INFERD = sys.argv[1] if len(sys.argv) > 1 else "inferd"
WORKER = sys.argv[2] if len(sys.argv) > 2 else "inferd-worker"
D = None


def full_log(d):
    with open(d.logpath, "rb") as f:
        return f.read().decode("utf-8", "replace")


def start_fails(args, timeout=60):
    """Runs inferd with args that must make it refuse to start: (rc, output)."""
    d = tempfile.mkdtemp()
    cmd = [INFERD, "--model", model_path(), "--socket", os.path.join(d, "s.sock"),
           "--kv-budget", "64M"] + list(args)
    env = dict(os.environ)
    env.pop("NOTIFY_SOCKET", None)
    env.pop("LISTEN_FDS", None)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    return out.returncode, out.stdout + out.stderr


# ---- start-up checks -------------------------------------------------------------------------

def test_listen_port_checked_and_logged():
    for bad in ("127.0.0.1:99999", "127.0.0.1:65536", "127.0.0.1:-1", "127.0.0.1:80x",
                "127.0.0.1:0000080"):
        rc, out = start_fails(["--listen", bad])
        assert rc != 0 and "0 to 65535" in out, (bad, rc, out[-500:])
    # port 0: the kernel picks one, the log names it, clients reach it there
    d = Daemon(INFERD, ["--listen", "127.0.0.1:0"])
    try:
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", full_log(d))
        assert m and int(m.group(1)) != 0, d.logtext()
        port = int(m.group(1))
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        resp = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            resp += b
        s.close()
        assert resp.startswith(b"HTTP/1.1 200"), resp[:200]
    finally:
        assert d.stop() == 0


def test_blank_api_key_refused():
    rc, out = start_fails(["--api-key", "   "])
    assert rc != 0 and "API key" in out, out[-500:]
    keyfile = os.path.join(tempfile.mkdtemp(), "key")
    with open(keyfile, "w") as f:
        f.write("  \t \n")
    rc, out = start_fails(["--api-key-file", keyfile])
    assert rc != 0 and "API key" in out, out[-500:]
    rc, out = start_fails(["--api-key", "abc def"])
    assert rc != 0 and "space" in out, out[-500:]


def test_model_directory_explained():
    d = tempfile.mkdtemp()
    rc, out = start_fails(["--model", d])
    assert rc != 0, out
    assert "directory" in out and "mmap" not in out and "No such device" not in out, out[-500:]


# ---- counting ------------------------------------------------------------------------------

def test_aborted_stream_counts_tokens():
    before = D.metrics()
    c = UnixHTTPConnection(D.sock, timeout=60)
    body = {"prompt": "Count from one to one hundred:", "max_tokens": 200, "stream": True,
            "temperature": 0, "ignore_eos": True}
    c.request("POST", "/v1/completions", body=json.dumps(body),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200
    chunks = 0
    while chunks < 20:
        line = r.readline()
        assert line, "the stream ended early"
        if line.startswith(b"data:") and b'"text"' in line:
            chunks += 1
    c.sock.shutdown(socket.SHUT_RDWR)
    c.close()
    m = D.wait_idle()
    gen = m["inferd_generation_tokens_total"] - before["inferd_generation_tokens_total"]
    prompt = m["inferd_prompt_tokens_total"] - before["inferd_prompt_tokens_total"]
    assert 20 <= gen < 200, (gen, chunks)
    assert prompt > 3, prompt
    assert m['inferd_request_success_total{finish_reason="abort"}'] > \
        before['inferd_request_success_total{finish_reason="abort"}']
    key = 'vllm:generation_tokens_total{model_name="%s"}' % D.model
    assert m[key] == m["inferd_generation_tokens_total"], m[key]


# ---- strict HTTP/1.1 framing ---------------------------------------------------------------

H = b"Host: x\r\n"
FRAMING = [
    (b"POST /v1/completions HTTP/1.1\r\n" + H + b"Content-Length : 33\r\n\r\n"
     b'{"prompt":"x","max_tokens":1}    ', 400),
    (b"POST /v1/completions HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n"
     b'1d\r\n{"prompt":"x","max_tokens":1}XX0\r\n\r\n', 400),
    (b"POST /v1/completions HTTP/1.1\r\n" + H + b"Transfer-Encoding: identity, chunked\r\n\r\n"
     b'1d\r\n{"prompt":"x","max_tokens":1}\r\n0\r\n\r\n', 501),
    (b"GET /health HTTP/9.9\r\n" + H + b"\r\n", 505),
    (b"GET /health\r\n\r\n", 400),
    (b"POST /v1/completions HTTP/1.1\r\n" + H + b"Content-Length: 5\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    (b"POST /v1/completions HTTP/1.1\r\n" + H + b"Content-Length: 2\r\nContent-Length: 2\r\n"
     b"\r\n{}", 400),
    (b"GET /health HTTP/1.1\r\n" + H + b"X-A: 1\r\n folded\r\n\r\n", 400),
    (b"GET /health HTTP/1.1\r\n\r\n", 400),
    (b"GET /health HTTP/1.1\n" + H + b"\n", 400),
    (b"GET /health HTTP/1.1\r\n" + H + b"X-A: \x01\r\n\r\n", 400),
]


def test_strict_framing():
    for req, status in FRAMING:
        resp = D.raw(req, timeout=10)
        assert resp.startswith(b"HTTP/1.1 %d " % status), (req, resp[:300])
        assert b"Connection: close" in resp, resp[:300]
        body = resp.partition(b"\r\n\r\n")[2]
        assert json.loads(body)["error"]["message"], body
    # the accepted forms still work: chunked, pipelined, HTTP/1.0, a HEAD
    body = b'{"prompt":"Hi","max_tokens":1}'
    chunked = (b"POST /v1/completions HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n"
               + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")
    resp = D.raw(chunked + b"GET /health HTTP/1.1\r\n" + H + b"Connection: close\r\n\r\n",
                 timeout=30)
    assert resp.count(b"HTTP/1.1 200 OK") == 2, resp[:1000]
    # nothing is upgraded: CONNECT and Upgrade: requests are framed like any
    # other, their body read, the next request found where it starts (fuzz_http)
    resp = D.raw(b"CONNECT x:443 HTTP/1.1\r\n" + H + b"Content-Length: 2\r\n\r\n{}"
                 b"GET /x HTTP/1.1\r\n" + H + b"Connection: Upgrade\r\nUpgrade: websocket\r\n"
                 b"Content-Length: 3\r\n\r\nabc"
                 b"GET /health HTTP/1.1\r\n" + H + b"Connection: close\r\n\r\n", timeout=30)
    assert re.findall(rb"HTTP/1\.1 (\d{3}) ", resp) == [b"404", b"404", b"200"], resp[:1500]
    D.wait_idle()


# ---- liveness and restarts ---------------------------------------------------------------------

def test_sigstop_worker_is_degraded():
    d = Daemon(INFERD, ["--worker-ping-interval", "0.2", "--worker-timeout", "60"])
    try:
        pid = d.worker_pids()[0]
        os.kill(pid, signal.SIGSTOP)
        try:
            t0 = time.time()
            h = None
            while time.time() - t0 < 5:
                code, data = d.request("GET", "/health")
                h = json.loads(data)
                if h["status"] == "degraded":
                    break
                time.sleep(0.05)
            assert h["status"] == "degraded" and code == 503, h
            assert h["workers"][0]["state"] == "unresponsive", h
            assert time.time() - t0 < 2, "took %.1f s" % (time.time() - t0)
        finally:
            os.kill(pid, signal.SIGCONT)
        d.wait_ready(timeout=10)
        assert d.worker_pids()[0] == pid  # not replaced: it answered again
    finally:
        assert d.stop() == 0


def test_unresponsive_worker_gets_no_new_requests():
    """Of two workers, one SIGSTOPped (missed pings: degraded) gets no new
    request while the other answers; requests finish on the healthy one."""
    d = Daemon(INFERD, ["--worker-ping-interval", "0.2", "--worker-timeout", "60",
                        "--threads", "1"], workers=2)
    try:
        pid = d.worker_pids()[0]
        os.kill(pid, signal.SIGSTOP)
        try:
            t0 = time.time()
            while True:
                h = json.loads(d.request("GET", "/health")[1])
                if h["workers"][0]["state"] == "unresponsive":
                    break
                assert time.time() - t0 < 5, h
                time.sleep(0.05)
            res = []

            def one(i):
                res.append(d.request("POST", "/v1/completions",
                                     {"prompt": "Number %d is" % i, "max_tokens": 4},
                                     timeout=30))
            ts = [threading.Thread(target=one, args=(i,)) for i in range(6)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(40)
            # one routed to the stopped worker would hang until SIGCONT (timeout: OSError)
            assert len(res) == 6 and all(c == 200 for c, _ in res), res
            h = json.loads(d.request("GET", "/health")[1])
            assert h["workers"][0]["state"] == "unresponsive", h  # still stopped
        finally:
            os.kill(pid, signal.SIGCONT)
        d.wait_ready(timeout=10)
        assert d.worker_pids()[0] == pid
        d.wait_idle()
    finally:
        assert d.stop() == 0


def test_crash_loop_retried():
    tmp = tempfile.mkdtemp()
    flag = os.path.join(tmp, "broken")
    wrapper = os.path.join(tmp, "flaky-worker")
    with open(wrapper, "w") as f:
        f.write('#!/bin/sh\nif [ -e "%s" ]; then exit 3; fi\nexec "%s" "$@"\n'
                % (flag, os.path.abspath(WORKER)))
    os.chmod(wrapper, stat.S_IRWXU)
    d = Daemon(INFERD, ["--worker-binary", wrapper, "--crash-loop-limit", "2",
                        "--restart-backoff", "0.05", "--crash-loop-backoff", "0.5",
                        "--crash-loop-backoff-max", "1"], tmpdir=tmp)
    try:
        open(flag, "w").close()
        os.kill(d.worker_pids()[0], signal.SIGKILL)
        h = d.wait_ready(status="unavailable", timeout=30)
        w = h["workers"][0]
        assert w["state"] == "failed" and w["crash_loop"] and w["crash_loops"] >= 1, h
        if w["crash_loops"] == 1:
            assert w["retry_in_s"] == 0.5, w
        # still broken: it is retried and loops again; the delay doubles, then
        # stays at the cap (0.5, 1, 1: base and cap apart, so both are seen)
        t0 = time.time()
        delays = []
        while time.time() - t0 < 30 * SCALE:
            delays = [float(x) for x in
                      re.findall(r"crash loop \d+, trying again in ([0-9.]+) s", full_log(d))]
            if len(delays) >= 3:
                break
            time.sleep(0.1)
        assert delays[:3] == [0.5, 1.0, 1.0], delays
        h = json.loads(d.request("GET", "/health")[1])
        assert h["workers"][0]["crash_loops"] >= 3, h
        if h["workers"][0]["state"] == "failed":
            assert h["workers"][0]["retry_in_s"] == 1.0, h
        os.unlink(flag)  # repaired: the next retry serves again
        d.wait_ready(timeout=30)
        code, data = d.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1})
        assert code == 200, data
        assert "trying again in" in full_log(d)
    finally:
        assert d.stop() == 0


# ---- vLLM metric names and endpoints -----------------------------------------------------

def test_vllm_metrics_and_endpoints():
    code, data = D.request("POST", "/v1/completions", {"prompt": "Hello", "max_tokens": 3})
    assert code == 200
    m = D.metrics()
    lab = '{model_name="%s"}' % D.model
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting",
                 "vllm:kv_cache_usage_perc", "vllm:prompt_tokens_total",
                 "vllm:generation_tokens_total", "vllm:time_to_first_token_seconds_count",
                 "vllm:time_per_output_token_seconds_count",
                 "vllm:e2e_request_latency_seconds_count"):
        assert name + lab in m, name
    assert m["vllm:prompt_tokens_total" + lab] == m["inferd_prompt_tokens_total"]
    assert m["vllm:e2e_request_latency_seconds_count" + lab] >= 1
    assert m['vllm:request_success_total{model_name="%s",finished_reason="length"}'
             % D.model] >= 1
    text = D.request("GET", "/metrics")[1].decode()
    assert re.search(r'vllm:cache_config_info\{model_name="[^"]+",block_size="\d+",'
                     r'cache_dtype="\w+",num_gpu_blocks="\d+",enable_prefix_caching="\w+"\} 1',
                     text), text[-2000:]
    assert "inferd_connections_open " in text and "\ninferd_connections " not in text
    assert "# TYPE inferd_kv_blocks_total" not in text
    # HEAD /metrics: the headers of GET, no body
    c = UnixHTTPConnection(D.sock, timeout=10)
    c.request("HEAD", "/metrics")
    r = c.getresponse()
    assert r.status == 200 and int(r.getheader("Content-Length")) > 1000
    assert r.read() == b""
    c.close()
    resp = D.raw(b"HEAD /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert resp.startswith(b"HTTP/1.1 200") and resp.endswith(b"\r\n\r\n"), resp
    v = D.json("GET", "/version")
    assert re.match(r"\d+\.\d+\.\d+", v["version"]), v
    assert D.json("GET", "/ping")["status"] == "ok"
    assert D.json("POST", "/ping", body={})["status"] == "ok"
    code, _ = D.request("DELETE", "/metrics")
    assert code == 405 and "HEAD" in D.last_headers.get("Allow", ""), D.last_headers
    D.wait_idle()


def test_peercred_logged():
    D.request("GET", "/v1/models?probe=1")
    want = "http: GET /v1/models 200 (uid %d pid %d)" % (os.getuid(), os.getpid())
    t0 = time.time()
    while want not in full_log(D) and time.time() - t0 < 5:
        time.sleep(0.05)
    assert want in full_log(D), full_log(D)[-1500:]
    assert "probe=1" not in full_log(D)  # the query string is not logged
    assert "http: GET /health 200" not in full_log(D)  # probes: at debug level


# ---- large responses: bounded, built off the loop, memory given back (issue 31) -----------

def rss_anon_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024.0
    raise AssertionError("no RssAnon in /proc/%d/status" % pid)


class Canary:
    """A stream beside the large request: the largest gap between its chunks."""

    def __init__(self, d):
        self.c = UnixHTTPConnection(d.sock, timeout=120)
        body = {"prompt": "Count from one to one thousand:", "max_tokens": 4000,
                "stream": True, "temperature": 0, "ignore_eos": True}
        self.c.request("POST", "/v1/completions", body=json.dumps(body),
                       headers={"Content-Type": "application/json"})
        self.r = self.c.getresponse()
        assert self.r.status == 200
        self.gaps, self.chunks, self.stop = [], 0, threading.Event()
        self.t = threading.Thread(target=self.run)
        self.t.start()

    def run(self):
        last = None
        while not self.stop.is_set():
            line = self.r.readline()
            if not line or b"[DONE]" in line:
                break
            if line.startswith(b"data:"):
                now = time.time()
                if last is not None:
                    self.gaps.append(now - last)
                last = now
                self.chunks += 1

    def wait_started(self, k=3, timeout=60):
        t0 = time.time()
        while self.chunks < k:
            assert time.time() - t0 < timeout * SCALE, "the canary stream does not start"
            time.sleep(0.02)

    def close(self):
        self.stop.set()
        try:
            self.c.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.t.join(30)
        self.c.close()
        return max(self.gaps) if self.gaps else 0.0


def test_large_response_bounded_and_memory_returned():
    """Issue 31 rows 7 and 12 at a size CI affords: a long prompt's vLLM prompt_logprobs
    for n choices are computed once, kept once and written once per prompt; every choice
    carries the same rows; a canary stream keeps its pace while the response is built
    (off the loop); the router's private memory returns near its idle level afterwards;
    an answer over max_response_bytes (reloadable) is a 400 — up front from the request,
    or once its logprobs outgrow the limit while it is generated."""
    tmp = tempfile.mkdtemp()
    conf = os.path.join(tmp, "inferd.json")
    with open(conf, "w") as f:
        json.dump({}, f)
    d = Daemon(INFERD, ["--config", conf, "--kv-budget", "512M"])
    try:
        n_prompt, n, top = (400, 4, 5) if SANITIZED else (1500, 8, 5)
        text = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                 "docs", "reliability.md")).read()
        ids = d.json("POST", "/tokenize", {"prompt": text})["tokens"]
        while len(ids) < n_prompt:
            ids += ids
        ids = ids[:n_prompt]
        d.json("POST", "/v1/completions", {"prompt": "Hello", "max_tokens": 2})
        time.sleep(0.5)
        idle = rss_anon_mib(d.proc.pid)
        canary = Canary(d)
        try:
            canary.wait_started()
            body = {"prompt": ids, "n": n, "max_tokens": 1, "prompt_logprobs": top}
            code, data = d.request("POST", "/v1/completions", body, timeout=600)
            assert code == 200, data[:500]
            time.sleep(0.5)  # the canary's chunks after the response went out
        finally:
            gap = canary.close()
        size = len(data)
        r = json.loads(data)
        del data
        assert len(r["choices"]) == n
        first = r["choices"][0]["prompt_logprobs"]
        assert len(first) == n_prompt and first[0] is None
        assert all(1 <= len(row) <= top + 1 for row in first[1:]), first[1]
        assert all(str(ids[k]) in first[k] for k in range(1, n_prompt))
        assert all(c["prompt_logprobs"] == first for c in r["choices"]), \
            "the choices' prompt_logprobs differ"
        del r, first
        assert gap < 2.0 * SCALE, "the canary stream stalled %.2f s" % gap
        after = None
        if not SANITIZED:  # ASan's allocator keeps freed memory (quarantine): not glibc's
            t0 = time.time()
            while True:
                after = rss_anon_mib(d.proc.pid)
                if after <= idle + 6.0 or time.time() - t0 > 5.0 * SCALE:
                    break
                time.sleep(0.1)
            assert after <= idle + 6.0, \
                "router private RSS %.1f MiB after a %.1f MB response, %.1f MiB idle" % (
                    after, size / 1e6, idle)
        print("     response %.1f MB; router RssAnon idle %.1f MiB, after %s MiB; canary's "
              "largest gap %.2f s" % (size / 1e6, idle, after and "%.1f" % after, gap))
        # max_response_bytes, reloaded: refused up front (n copies of the prompt's rows)
        with open(conf, "w") as f:
            json.dump({"max_response_bytes": "8M"}, f)
        d.proc.send_signal(signal.SIGHUP)
        t0 = time.time()
        while "'max_response_bytes' changed" not in full_log(d):
            assert time.time() - t0 < 10 * SCALE, "no reload logged:\n" + d.logtext()
            time.sleep(0.05)
        big = {"prompt": ids, "n": 32, "max_tokens": 1, "prompt_logprobs": 20}
        code, data = d.request("POST", "/v1/completions", big)
        err = json.loads(data)["error"]
        assert code == 400 and err["code"] == "response_too_large", (code, data[:300])
        assert err["param"] == "prompt_logprobs" and "max_response_bytes" in err["message"]
        # a stream is not bounded by it; a non-streamed answer that outgrows it ends with
        # a 400 (here at its smallest, 64 KiB: about 85 tokens of 20 alternatives)
        with open(conf, "w") as f:
            json.dump({"max_response_bytes": "64K"}, f)
        d.proc.send_signal(signal.SIGHUP)
        t0 = time.time()
        while full_log(d).count("'max_response_bytes' changed") < 2:
            assert time.time() - t0 < 10 * SCALE, "no reload logged"
            time.sleep(0.05)
        chat = {"messages": [{"role": "user", "content": "Tell me a long story."}],
                "max_tokens": 200, "logprobs": True, "top_logprobs": 20, "ignore_eos": True,
                "temperature": 0}
        code, data = d.request("POST", "/v1/chat/completions", chat)
        err = json.loads(data)["error"]
        assert code == 400 and err["code"] == "response_too_large", (code, data[:300])
        assert err["param"] == "max_tokens", err
        chat["stream"] = True
        code, data = d.request("POST", "/v1/chat/completions", chat)
        assert code == 200 and data.rstrip().endswith(b"data: [DONE]"), data[-300:]
        assert b'"finish_reason":"length"' in data, data[-500:]
        d.wait_idle()
    finally:
        assert d.stop() == 0


def main():
    global D
    require_model()
    D = Daemon(INFERD)
    D.model = D.json("GET", "/v1/models")["data"][0]["id"]
    try:
        rc = run_tests(globals(), sys.argv[3:] or None)
    finally:
        assert D.stop() == 0
    return rc


if __name__ == "__main__":
    sys.exit(main())
