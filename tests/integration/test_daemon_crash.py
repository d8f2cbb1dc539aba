"""inferd when things go wrong (label model): a worker SIGKILLed in the middle
of 16 streams (every stream completes with the text of an undisturbed run,
greedy and seeded sampling alike, a quarter of them under a grammar that the
router sends again with the resumed request; prompt logprobs of a request killed while
its prompt was being scored come out whole and unchanged), a hung worker (killed by the liveness
check and replaced), a crash loop (shown by /health, answered 503), clients
that disconnect (their sequences are cancelled, others are untouched), a
client that stops reading (dropped at the output cap), and SIGTERM during
streaming (in-flight streams finish, exit 0, socket removed); an engine
step longer than worker_timeout (not killed: its CPU time moves) and a
request whose worker dies three times in a row before it makes progress
(failed with a 500 instead of being resumed for ever).

Usage: test_daemon_crash.py INFERD WORKER   (standard library only)
"""
import json
import os
import re
import signal
import socket
import stat
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_daemon_util import (SANITIZED, SCALE, Daemon, UnixHTTPConnection,  # noqa: E402
                              require_model, run_tests)

INFERD = sys.argv[1] if len(sys.argv) > 1 else "inferd"
WORKER = sys.argv[2] if len(sys.argv) > 2 else "inferd-worker"


class Stream(threading.Thread):
    """One streaming chat completion read chunk by chunk on its own connection; the
    keyword arguments are request body fields (sampling, guided_regex, response_format)."""

    def __init__(self, d, prompt, **kw):
        super().__init__(daemon=True)
        self.d = d
        self.body = {"messages": [{"role": "user", "content": prompt}], "stream": True,
                     "max_tokens": 32, "temperature": 0}
        self.body.update(kw)
        self.text = ""
        self.chunks = 0
        self.finish = None
        self.done = 0
        self.error = None
        self.status = None
        self.conn = None

    def run(self):
        try:
            self.conn = UnixHTTPConnection(self.d.sock, timeout=120)
            self.conn.request("POST", "/v1/chat/completions", body=json.dumps(self.body),
                              headers={"Content-Type": "application/json"})
            r = self.conn.getresponse()
            self.status = r.status
            while True:
                line = r.readline()
                if not line:
                    break
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    self.done += 1
                    continue
                o = json.loads(data)
                if "error" in o:
                    self.error = o["error"]
                    continue
                for c in o["choices"]:
                    self.text += c["delta"].get("content") or ""
                    if c["delta"].get("content"):
                        self.chunks += 1
                    if c["finish_reason"]:
                        self.finish = c["finish_reason"]
        except Exception as e:  # noqa: BLE001 (reported by the test)
            self.error = self.error or repr(e)
        finally:
            if self.conn:
                self.conn.close()


# 16 streams of 40 tokens; 8 of 24 in the sanitized build (the same paths, greedy
# and seeded, constrained and not, at a third of the cost).
PROMPTS = ["Tell me about planet number %d." % i for i in range(8 if SANITIZED else 16)]
STREAM_TOKENS = 24 if SANITIZED else 40
# Grammars no output can complete within STREAM_TOKENS (200 words; 60 array items take
# 60 tokens or more), so constrained streams also end with "length" and never see EOS.
WORDS_REGEX = r"([a-z]+ ){200}"
PLANETS_SCHEMA = {"type": "object",
                  "properties": {"planets": {"type": "array", "minItems": 60,
                                             "items": {"type": "string", "maxLength": 12}}},
                  "required": ["planets"], "additionalProperties": False}


def constraint_of(i):
    """Stream i's grammar fields: a regex on a greedy stream, a JSON Schema on a seeded one
    (2 and 7 of every 8)."""
    if i % 8 == 2:
        return {"guided_regex": WORDS_REGEX}
    if i % 8 == 7:
        return {"response_format": {"type": "json_schema",
                                    "json_schema": {"name": "planets", "schema": PLANETS_SCHEMA}}}
    return {}


def check_constrained(i, text):
    """The text a constrained stream got follows its grammar (so the grammar was applied)."""
    c = constraint_of(i)
    if "guided_regex" in c:
        assert re.fullmatch(r"([a-z]+ )*[a-z]*", text), (i, text)
    elif c:
        assert re.match(r'\{\s*"planets"\s*:\s*\[\s*"', text), (i, text)


def run_streams(d, kill=None, after_chunks=3):
    ss = []
    for i, p in enumerate(PROMPTS):
        kw = {"max_tokens": STREAM_TOKENS, "ignore_eos": True}
        if i % 2:  # seeded sampling for half of them
            kw.update(temperature=0.8, seed=100 + i)
        kw.update(constraint_of(i))
        ss.append(Stream(d, p, **kw))
    for s in ss:
        s.start()
    if kill:
        t0 = time.time()
        while min(s.chunks for s in ss) < after_chunks:
            assert time.time() - t0 < 60, "streams did not start"
            assert all(s.error is None for s in ss), [s.error for s in ss]
            time.sleep(0.01)
        kill()
    for s in ss:
        s.join(180)
    return ss


def test_sigkill_worker_mid_stream():
    d = Daemon(INFERD, ["--threads", "1", "--restart-backoff", "0.2"], workers=2)
    try:
        ref = run_streams(d)
        for i, s in enumerate(ref):
            assert s.error is None and s.finish == "length" and s.done == 1, (s.error, s.finish)
            check_constrained(i, s.text)
        d.wait_idle()
        pids = d.worker_pids()
        victim = pids[0]
        killed = run_streams(d, kill=lambda: os.kill(victim, signal.SIGKILL))
        for i, (a, b) in enumerate(zip(ref, killed)):
            assert b.error is None, b.error
            assert b.done == 1 and b.finish == "length", (b.done, b.finish)
            assert b.text == a.text, "stream %d changed after the crash:\n%r\n%r" % (
                i, a.text, b.text)
        h = d.wait_ready()
        w0 = h["workers"][0]
        assert w0["crashes"] == 1 and w0["starts"] == 2 and w0["pid"] != victim, h
        m = d.wait_idle()
        assert m["inferd_worker_restarts_total"] == 1, m
        assert m["inferd_redispatched_sequences_total"] >= 1, m
        assert "killed by signal 9" in d.logtext()
    finally:
        assert d.stop() == 0


def test_sigkill_worker_mid_prompt_logprobs():
    """A worker killed while it scores a prompt (vLLM's prompt_logprobs, 64 rows a
    step): the resumed request computes them again and the router keeps each
    position once, so the answer equals an undisturbed run's. Not under the
    sanitizers: scoring is slow there (a minute), and the router code it checks
    runs sanitized in test_daemon_openai."""
    if os.environ.get("ASAN_OPTIONS") or os.environ.get("TSAN_OPTIONS"):
        print("     (skipped under the sanitizers)")
        return
    d = Daemon(INFERD, ["--restart-backoff", "0.2", "--log-level", "debug"])
    try:
        ids = [(i * 7919) % 20000 + 100 for i in range(130)]
        body = {"prompt": ids, "max_tokens": 2, "temperature": 0, "prompt_logprobs": 1}
        t0 = time.time()
        ref = d.json("POST", "/v1/completions", body)["choices"][0]["prompt_logprobs"]
        took = time.time() - t0
        print("     scoring %d prompt tokens: %.2f s" % (len(ids), took))
        victim = d.worker_pids()[0]
        out = {}
        th = threading.Thread(target=lambda: out.update(
            r=d.json("POST", "/v1/completions", body)), daemon=True)
        th.start()
        time.sleep(took * 0.4)  # into the three prefill steps (64 + 64 + 2 rows)
        os.kill(victim, signal.SIGKILL)
        th.join(120)
        got = out["r"]["choices"][0]["prompt_logprobs"]
        assert len(got) == len(ref) == len(ids) and got[0] is None
        for i, (a, b) in enumerate(zip(ref[1:], got[1:])):
            assert a.keys() == b.keys(), (i + 1, a, b)
            assert all(abs(a[t]["logprob"] - b[t]["logprob"]) < 1e-5 for t in a), (i + 1, a, b)
        log = d.logtext()
        assert "killed by signal 9" in log
        # (timing decides whether the kill fell between two chunks: say which case ran)
        print("     repeated prompt logprobs dropped after the restart: %s"
              % ("came again (resumed)" in log))
        d.wait_idle()
    finally:
        assert d.stop() == 0


def test_hung_worker_replaced():
    d = Daemon(INFERD, ["--worker-ping-interval", "0.2", "--worker-timeout", "3",
                        "--restart-backoff", "0.1"])
    try:
        pid = d.worker_pids()[0]
        ref = Stream(d, "Describe a river.", max_tokens=24, ignore_eos=True)
        ref.start()
        ref.join(60)
        s = Stream(d, "Describe a river.", max_tokens=24, ignore_eos=True)
        s.start()
        t0 = time.time()
        while s.chunks < 2:
            assert time.time() - t0 < 30 and s.error is None, s.error
            time.sleep(0.01)
        os.kill(pid, signal.SIGSTOP)  # alive but silent
        s.join(60)
        assert s.error is None and s.done == 1 and s.text == ref.text, (s.error, s.text, ref.text)
        assert "stopped answering pings" in d.logtext()
        h = d.wait_ready()
        assert h["workers"][0]["pid"] != pid
        d.wait_idle()
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        assert d.stop() == 0


# A prompt as token ids: its length is exact whatever the tokenizer.
LONG_PROMPT = [200 + (i * 7) % 4000 for i in range(1800)]


def test_long_step_not_killed():
    """One prefill step of 1800 tokens (400 in the sanitized build, as slow) on
    one thread takes seconds, far past a 0.3 s worker_timeout (600 tokens took
    only 0.64 s on a 2-core AVX-512 machine): the worker
    cannot answer a ping inside the step, but its CPU time moves, so it is not
    killed (killing it would only make its replacement redo the same step, and
    be killed in turn)."""
    prompt = LONG_PROMPT[:400] if SANITIZED else LONG_PROMPT
    d = Daemon(INFERD, ["--threads", "1", "--worker-ping-interval", "0.05",
                        "--worker-timeout", "0.3", "--max-batched-tokens", "2048",
                        "--prefill-cap", "off"])
    try:
        pid = d.worker_pids()[0]
        t0 = time.time()
        r = d.json("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 2,
                                               "temperature": 0, "ignore_eos": True})
        dt = time.time() - t0
        log = d.logtext()
        assert dt > 0.9, "the prefill (%.2f s) did not outlast the timeout: a longer prompt" % dt
        assert r["usage"]["completion_tokens"] == 2, r
        assert d.worker_pids()[0] == pid, "the busy worker was replaced:\n" + log
        assert "stopped answering pings" not in log, log
        assert "its CPU time moves" in log, log
        d.wait_idle()
    finally:
        assert d.stop() == 0


def test_poison_request_not_resumed_forever():
    """A request whose worker dies every time it runs it (here: SIGKILLed as
    soon as the request lands on it, before its first token) is resumed
    twice, then failed with a 500 naming why; the next request is served."""
    d = Daemon(INFERD, ["--threads", "1", "--max-batched-tokens", "1024",
                        "--prefill-cap", "off", "--restart-backoff", "0.05",
                        "--crash-loop-limit", "20"])
    try:
        res = {}
        body = {"prompt": LONG_PROMPT, "max_tokens": 4, "ignore_eos": True}
        th = threading.Thread(daemon=True, target=lambda: res.update(
            r=d.request("POST", "/v1/completions", body, timeout=180)))
        th.start()
        kills, last, t0 = 0, None, time.time()
        while th.is_alive() and kills < 6:
            assert time.time() - t0 < 120 * SCALE, "kills so far: %d\n%s" % (kills, d.logtext())
            w = json.loads(d.request("GET", "/health")[1])["workers"][0]
            if w["state"] == "ready" and w["running"] >= 1 and w["pid"] != last:
                os.kill(w["pid"], signal.SIGKILL)
                last = w["pid"]
                kills += 1
            time.sleep(0.01)
        th.join(60 * SCALE)
        code, data = res["r"]
        assert code == 500 and b"not retried" in data, (code, data, d.logtext())
        assert kills == 3, kills
        assert "without progress" in d.logtext()
        d.wait_ready()
        r = d.json("POST", "/v1/completions", {"prompt": "Hello", "max_tokens": 2})
        assert r["usage"]["completion_tokens"] == 2, r
        d.wait_idle()
    finally:
        assert d.stop() == 0


def test_client_disconnect_cancels():
    d = Daemon(INFERD)
    try:
        keep = Stream(d, "Write a long story.", max_tokens=48, ignore_eos=True)
        gone = Stream(d, "Write another long story.", max_tokens=5000, ignore_eos=True)
        keep.start()
        gone.start()
        t0 = time.time()
        while gone.chunks < 3:
            assert time.time() - t0 < 30
            time.sleep(0.01)
        gone.conn.sock.shutdown(socket.SHUT_RDWR)  # the client goes away
        keep.join(60)
        assert keep.error is None and keep.finish == "length" and keep.done == 1
        d.wait_idle(timeout=10)
        # non-streaming: cancelled too
        s = socket.socket(socket.AF_UNIX)
        s.connect(d.sock)
        body = json.dumps({"prompt": "Go on and on", "max_tokens": 5000, "ignore_eos": True})
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                  % (len(body), body.encode()))
        t0 = time.time()
        while d.metrics()["inferd_sequences_running"] < 1:
            assert time.time() - t0 < 10
            time.sleep(0.01)
        s.close()
        m = d.wait_idle(timeout=10)
        assert m['inferd_request_success_total{finish_reason="abort"}'] == 2, m
        assert m["inferd_generation_tokens_total"] < 1000
    finally:
        assert d.stop() == 0


def test_slow_reader_dropped():
    d = Daemon(INFERD, ["--output-buffer-bytes", "65536"])
    try:
        s = socket.socket(socket.AF_UNIX)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(d.sock)
        body = json.dumps({"prompt": "Go on", "max_tokens": 4000, "ignore_eos": True,
                           "stream": True, "logprobs": 20})
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                  % (len(body), body.encode()))
        t0 = time.time()  # never read: the daemon must give up on us, not buffer forever
        while "not reading" not in d.logtext():
            assert time.time() - t0 < 120, "a client that does not read was never dropped"
            time.sleep(0.1)
        m = d.wait_idle(timeout=10)
        assert m["inferd_generation_tokens_total"] < 4000
        s.close()
    finally:
        assert d.stop() == 0


def test_crash_loop_in_health():
    tmp = tempfile.mkdtemp()
    mark = os.path.join(tmp, "started-once")
    wrapper = os.path.join(tmp, "flaky-worker")
    with open(wrapper, "w") as f:
        f.write('#!/bin/sh\nif [ ! -e "%s" ]; then touch "%s"; exec "%s" "$@"; fi\nexit 3\n'
                % (mark, mark, os.path.abspath(WORKER)))
    os.chmod(wrapper, stat.S_IRWXU)
    d = Daemon(INFERD, ["--worker-binary", wrapper, "--crash-loop-limit", "3",
                        "--restart-backoff", "0.05"], tmpdir=tmp)
    try:
        os.kill(d.worker_pids()[0], signal.SIGKILL)
        h = d.wait_ready(status="unavailable", timeout=30)
        w = h["workers"][0]
        assert w["state"] == "failed" and w["crash_loop"] is True and w["crashes"] == 3, h
        code, data = d.request("GET", "/health")
        assert code == 503
        code, data = d.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2})
        assert code == 503 and b"crash" in data, data
        assert "crash loop" in d.logtext()
    finally:
        assert d.stop() == 0
    # never ready at all: the daemon gives up with an error
    d = Daemon(INFERD, ["--worker-binary", "/bin/false", "--crash-loop-limit", "2",
                        "--restart-backoff", "0.05"], wait=False)
    assert d.proc.wait(30) == 1, d.logtext()
    assert "no worker could be started" in d.logtext()


def test_sigterm_drains_streams():
    # the grace outlasts the streams' 40 tokens on any machine (the default 30 s did not in
    # CI's ASan run on a loaded machine: the streams were cut, as a grace's end should)
    d = Daemon(INFERD, ["--shutdown-grace", str(int(60 * SCALE))])
    ss = [Stream(d, "Count from one to fifty.", max_tokens=40, ignore_eos=True)
          for _ in range(4)]
    for s in ss:
        s.start()
    t0 = time.time()
    while min(s.chunks for s in ss) < 2:
        assert time.time() - t0 < 30
        time.sleep(0.01)
    d.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    refused = False
    try:
        c = socket.socket(socket.AF_UNIX)
        c.connect(d.sock)
        c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        refused = c.recv(100) == b""
    except OSError:
        refused = True
    assert refused, "new connections must be refused while draining"
    for s in ss:
        s.join(60 * SCALE)
        assert s.error is None and s.done == 1 and s.finish == "length", (s.error, s.finish)
    assert d.proc.wait(30 * SCALE) == 0
    assert not os.path.exists(d.sock)
    log = d.logtext()
    assert "draining" in log and "stopped" in log, log


def main():
    require_model()
    return run_tests(globals(), sys.argv[3:] or None)


if __name__ == "__main__":
    sys.exit(main())
