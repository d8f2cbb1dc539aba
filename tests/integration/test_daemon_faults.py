"""inferd under faults and load (label slow, kept to about a minute): 50
clients that disconnect at random moments leave no KV block held; hundreds
of idle connections do not stop real requests; a worker SIGSTOPped in the
middle of 16 streams is killed after worker_timeout and replaced, and every
stream completes with the text of an undisturbed run (greedy and seeded).
Each is one of the hand probes of issue 17 turned into a regression test.

Usage: test_daemon_faults.py INFERD WORKER   (standard library only)
"""
import json
import os
import random
import resource
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_daemon_util import Daemon, require_model, run_tests  # noqa: E402
from test_daemon_crash import run_streams  # noqa: E402

INFERD = sys.argv[1] if len(sys.argv) > 1 else "inferd"


def raise_fd_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the daemon inherits it
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def test_random_disconnects_hold_no_blocks():
    d = Daemon(INFERD)
    rnd = random.Random(17)
    try:
        before = d.metrics()

        def client(i):
            try:
                one(i)
            except OSError:  # a timeout or a reset: the point is that we go away
                pass

        def one(i):
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(3)
            s.connect(d.sock)
            body = json.dumps({"prompt": "Story number %d:" % i, "max_tokens": 300,
                               "ignore_eos": True, "stream": i % 3 != 0,
                               "temperature": 0.7, "seed": i}).encode()
            req = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                   b"\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
            when = rnd.choice(["mid-request", "after-request", "after-bytes"])
            if when == "mid-request":  # gone before the request is complete
                s.sendall(req[:rnd.randrange(1, len(req))])
            else:
                s.sendall(req)
                if when == "after-bytes":  # gone after some of the answer
                    want, got = rnd.randrange(1, 2000), 0
                    while got < want:
                        b = s.recv(want - got)
                        if not b:
                            break
                        got += len(b)
                else:
                    time.sleep(rnd.random() * 0.3)
            s.close()

        for wave in range(5):  # 10 at a time
            ts = [threading.Thread(target=client, args=(wave * 10 + k,)) for k in range(10)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(60)
        m = d.wait_idle(timeout=30)
        assert m['inferd_kv_blocks{state="used"}'] == 0
        aborted = (m['inferd_request_success_total{finish_reason="abort"}'] -
                   before['inferd_request_success_total{finish_reason="abort"}'])
        assert aborted >= 10, aborted  # the ones that got as far as generating
        assert d.json("POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 2})["choices"]
    finally:
        assert d.stop() == 0


def test_idle_connections_do_not_starve():
    limit = raise_fd_limit()
    n = min(1000, limit - 200)
    if n < 100:
        print("     SKIPPED: only %d file descriptors" % limit)
        return
    d = Daemon(INFERD, ["--max-connections", str(n + 64), "--header-timeout", "60"])
    idle = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_UNIX)
            s.connect(d.sock)
            idle.append(s)
        t0 = time.time()
        while d.metrics()["inferd_connections_open"] < n:
            assert time.time() - t0 < 20, d.metrics()["inferd_connections_open"]
            time.sleep(0.05)
        t0 = time.time()
        for i in range(5):
            r = d.json("POST", "/v1/completions", {"prompt": "Hello %d" % i, "max_tokens": 3,
                                                   "temperature": 0, "ignore_eos": True})
            assert r["choices"][0]["finish_reason"] == "length", r
        assert time.time() - t0 < 30
        print("     %d idle connections, 5 requests served in %.2f s" % (n, time.time() - t0))
    finally:
        for s in idle:
            s.close()
        assert d.stop() == 0


def test_sigstop_worker_replaced_streams_identical():
    d = Daemon(INFERD, ["--threads", "1", "--restart-backoff", "0.2", "--worker-timeout", "8",
                        "--worker-ping-interval", "0.5"], workers=2)
    try:
        ref = run_streams(d)
        for s in ref:
            assert s.error is None and s.finish == "length" and s.done == 1, (s.error, s.finish)
        d.wait_idle()
        victim = d.worker_pids()[0]
        stopped = run_streams(d, kill=lambda: os.kill(victim, signal.SIGSTOP))
        for a, b in zip(ref, stopped):
            assert b.error is None, b.error
            assert b.done == 1 and b.finish == "length", (b.done, b.finish)
            assert b.text == a.text, "stream changed:\n%r\n%r" % (a.text, b.text)
        h = d.wait_ready(timeout=30)
        assert h["workers"][0]["pid"] != victim and h["workers"][0]["crashes"] == 1, h
        assert "stopped answering pings" in open(d.logpath, errors="replace").read()
        d.wait_idle()
    finally:
        try:
            os.kill(victim, signal.SIGCONT)
        except (OSError, UnboundLocalError):
            pass
        assert d.stop() == 0


def main():
    require_model()
    return run_tests(globals())


if __name__ == "__main__":
    sys.exit(main())
