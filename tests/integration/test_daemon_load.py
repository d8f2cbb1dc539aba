"""inferd under worker kills, a small pool, overload and a soak (label slow):

- a worker SIGKILLed at random moments during 32 streams — while they are
  being prefilled, while they decode, and while it holds the KV pool's lock
  (stopped there by the $INFERD_TEST_POOL_LOCK_HOLD hook of common/kvpool/kvpool.c)
  — and every stream ends with the text of an undisturbed run, byte for
  byte (half greedy, half seeded), with no KV block left held;
- a pool too small for the streams: they queue and complete, same texts;
- 200 concurrent requests against a short queue: each accepted one
  completes with the undisturbed text, every other one gets 503 with
  Retry-After, none is lost or left without an answer;
- a soak: 256 concurrent streams for --seconds (default 40; CI) or
  --minutes, daemon and worker RSS and fd counts sampled every 10 s and
  required flat after the warm-up, fds back to their idle count after.

Usage: test_daemon_load.py INFERD WORKER [--minutes M | --seconds S] [TEST...]
(standard library only). The figures of a run are printed as `figure: ...`
lines (docs/reliability.md records them).
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
from test_daemon_util import Daemon, UnixHTTPConnection, require_model, run_tests  # noqa: E402
from test_daemon_crash import Stream  # noqa: E402

INFERD = sys.argv[1] if len(sys.argv) > 1 else "inferd"
PROMPTS = ["Tell me a short story about robot number %d and its garden." % i for i in range(32)]
MAX_TOKENS = 32
SOAK_SECONDS = 40.0
_ref = {}


def stream_kw(i):
    kw = {"max_tokens": MAX_TOKENS, "ignore_eos": True}
    if i % 2:  # seeded sampling for half of them
        kw.update(temperature=0.8, seed=1000 + i)
    return kw


def start_streams(d, n=32):
    ss = [Stream(d, PROMPTS[i], **stream_kw(i)) for i in range(n)]
    for s in ss:
        s.start()
    return ss


def join(ss, timeout=240):
    t0 = time.time()
    for s in ss:
        s.join(max(1, timeout - (time.time() - t0)))
        assert not s.is_alive(), "a stream did not finish in %d s" % timeout
    return ss


def wait_chunks(ss, k, timeout=120):
    t0 = time.time()
    while min(s.chunks for s in ss) < k:
        assert time.time() - t0 < timeout, "streams did not reach %d chunks" % k
        assert all(s.error is None for s in ss), [s.error for s in ss]
        time.sleep(0.005)


def reference():
    """The texts of an undisturbed run (one plain daemon, computed once)."""
    if not _ref:
        d = Daemon(INFERD, ["--threads", "1"], workers=2)
        try:
            ss = join(start_streams(d))
            for s in ss:
                assert s.error is None and s.finish == "length" and s.done == 1, (s.error,)
            _ref["texts"] = [s.text for s in ss]
            d.wait_idle()
        finally:
            assert d.stop() == 0
    return _ref["texts"]


def check_same(ss, what):
    ref = reference()
    for i, s in enumerate(ss):
        assert s.error is None, "%s: stream %d: %s" % (what, i, s.error)
        assert s.done == 1 and s.finish == "length", (what, i, s.done, s.finish)
        assert s.text == ref[i], "%s: stream %d changed:\n%r\n%r" % (what, i, ref[i], s.text)


def test_sigkill_at_random_moments_32_streams():
    ref = reference()
    assert len(ref) == 32
    hold = os.path.join(os.environ.get("TMPDIR", "/tmp"), "inferd-hold-%d" % os.getpid())
    d = Daemon(INFERD, ["--threads", "1", "--restart-backoff", "0.2"], workers=2,
               env={"INFERD_TEST_POOL_LOCK_HOLD": hold})
    rnd = random.Random(int(os.environ.get("INFERD_TEST_SEED", "17")))
    kills = 0
    # the pool-lock phase needs the test hook, compiled only with -DINFERD_TEST_HOOKS=ON
    hooks = os.environ.get("INFERD_TEST_HOOKS") == "1"
    if not hooks:
        print("     SKIPPED: the SIGKILL holding the pool lock (built without INFERD_TEST_HOOKS: "
              "test.sh turns it on)", flush=True)
    phases = ("prefill", "decode", "pool lock") if hooks else ("prefill", "decode")
    try:
        # INFERD_TEST_ROUNDS=N repeats the three (CI: 1)
        for phase in phases * int(os.environ.get("INFERD_TEST_ROUNDS", "1")):
            pids = d.worker_pids()
            ss = start_streams(d)
            if phase == "prefill":  # before any stream has its first token
                time.sleep(rnd.uniform(0.0, 0.15))
                first = sum(s.chunks > 0 for s in ss)
                victim = rnd.choice(pids)
                os.kill(victim, signal.SIGKILL)
                note = "%d of 32 streams had a token" % first
            elif phase == "decode":
                k = rnd.randrange(2, MAX_TOKENS - 8)
                wait_chunks(ss, k)
                victim = rnd.choice(pids)
                os.kill(victim, signal.SIGKILL)
                note = "after %d tokens" % k
            else:  # the next worker to take the pool lock stops inside it
                wait_chunks(ss, rnd.randrange(1, MAX_TOKENS - 16))
                open(hold, "w").close()
                t0 = time.time()
                while not os.path.exists(hold + ".pid"):
                    assert time.time() - t0 < 30, "no worker took the pool lock"
                    time.sleep(0.002)
                victim = int(open(hold + ".pid").read())
                assert victim in pids, (victim, pids)
                time.sleep(rnd.uniform(0.0, 0.2))  # the daemon and the other worker wait
                os.kill(victim, signal.SIGKILL)
                for suffix in (".pid", ".held"):
                    os.unlink(hold + suffix)
                note = "holding the pool lock"
            kills += 1
            join(ss)
            check_same(ss, "SIGKILL in %s (%s)" % (phase, note))
            h = d.wait_ready(timeout=60)
            assert victim not in [w["pid"] for w in h["workers"]], h
            m = d.wait_idle(timeout=30)
            print("     SIGKILL in %-9s (%s): 32 streams identical" % (phase, note), flush=True)
        assert m["inferd_worker_restarts_total"] == kills, m
        if hooks:
            assert "died holding the pool lock" in d.logtext() or "repair" in d.logtext()
    finally:
        assert d.stop() == 0
        for suffix in ("", ".pid", ".held", ".pid.tmp"):
            try:
                os.unlink(hold + suffix)
            except OSError:
                pass


def test_small_pool_queues_and_completes():
    # 32 blocks of 16 tokens (f16: 30 layers x 3 heads x 64 x 2 x 2 bytes a token): room
    # for about 5 of the 32 sequences (~70 tokens each) at a time
    block = 30 * 3 * 64 * 2 * 2 * 16
    d = Daemon(INFERD, ["--threads", "1", "--kv-budget", str(32 * block),
                        "--max-queue", "64"], workers=1)
    try:
        ss = join(start_streams(d), timeout=600)
        check_same(ss, "small pool")
        m = d.wait_idle()
        print("figure: small pool (32 blocks): 32 streams completed, %d preemptions" %
              m.get("inferd_preemptions_total", m.get("vllm:num_preemptions_total", -1)))
    finally:
        assert d.stop() == 0


def test_overload_200_concurrent():
    d = Daemon(INFERD, ["--threads", "1", "--max-seqs", "16", "--max-queue", "24"], workers=2)
    # four requests, greedy and seeded: each answer must equal its undisturbed one
    bodies = [{"prompt": "Overload prompt %d:" % i, "max_tokens": 12, "ignore_eos": True,
               "temperature": 0.8 if i % 2 else 0, "seed": 7 + i} for i in range(4)]
    try:
        ref = [d.json("POST", "/v1/completions", b)["choices"][0]["text"] for b in bodies]
        before = d.metrics()
        res = [None] * 200
        go = threading.Event()

        def one(i):
            go.wait()
            try:
                code, data = d.request("POST", "/v1/completions", bodies[i % 4], timeout=300)
                res[i] = (code, data, d.last_headers)
            except Exception as e:  # noqa: BLE001 (a lost request fails the test below)
                res[i] = (None, repr(e).encode(), {})
        ts = [threading.Thread(target=one, args=(i,)) for i in range(200)]
        for t in ts:
            t.start()
        t0 = time.time()
        go.set()
        for t in ts:
            t.join(300)
        took = time.time() - t0
        ok = refused = 0
        for i, (code, data, hdr) in enumerate(res):
            if code == 200:
                c = json.loads(data)["choices"][0]
                assert c["finish_reason"] == "length" and c["text"] == ref[i % 4], (i, c)
                ok += 1
            else:
                assert code == 503, (i, code, data[:300])
                assert hdr.get("Retry-After"), (i, hdr)
                refused += 1
        assert ok + refused == 200 and refused > 0 and ok >= 40, (ok, refused)
        m = d.wait_idle()
        assert m["inferd_queue_rejected_total"] - before["inferd_queue_rejected_total"] == refused
        print("figure: overload: 200 concurrent, %d completed identical, %d refused 503 + "
              "Retry-After, %.1f s" % (ok, refused, took), flush=True)
    finally:
        assert d.stop() == 0


def proc_sample(pid):
    """(private RSS, shared RSS, open fds) of a process. The KV pool is shared memory that
    grows in RSS as blocks are first touched, so leaks are looked for in the private part."""
    v = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, rest = line.partition(":")
            if k in ("RssAnon", "RssShmem"):
                v[k] = int(rest.split()[0]) * 1024
    return v["RssAnon"], v["RssShmem"], len(os.listdir("/proc/%d/fd" % pid))


def proc_fds(pid):
    """{fd: what it points to} of a process."""
    out = {}
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            out[int(fd)] = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            pass
    return out


def quiet_fds(d, pid, timeout=15):
    """The daemon's fds once it holds no client connection but the one this asks on: a
    keep-alive connection polls inferd_connections_open (counted until the daemon's close
    callback, after the fd is closed) until it is 1. Sampling right after a request instead
    races the daemon's close of that request's connection — the soak's 18-then-17 flake:
    the idle sample had caught wait_idle's /metrics connection not yet closed."""
    c = UnixHTTPConnection(d.sock)
    try:
        t0 = time.time()
        while True:
            c.request("GET", "/metrics")
            body = c.getresponse().read().decode()
            n = [float(line.split()[-1]) for line in body.splitlines()
                 if line.startswith("inferd_connections_open ")][0]
            if n == 1:
                return proc_fds(pid)
            assert time.time() - t0 < timeout, "%d client connections still open" % (n - 1)
            time.sleep(0.05)
    finally:
        c.close()


def soak_stream(d, body, stop):
    """One streaming completion on a raw socket: 'ok', 'stopped' (we hung up because the
    soak ended) or an error text."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(1.0)
    try:
        s.connect(d.sock)
        b = json.dumps(body).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  b"\r\nContent-Length: %d\r\n\r\n" % len(b) + b)
        buf, idle = b"", 0.0
        while b"data: [DONE]" not in buf:
            if stop.is_set():
                return "stopped"
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                idle += 1.0
                if idle > 600:
                    return "no byte for 600 s"
                continue
            if not chunk:
                return "closed early: %r" % buf[-200:]
            idle = 0.0
            buf += chunk
        if not buf.startswith(b"HTTP/1.1 200"):
            return "status: %r" % buf[:100]
        if b'"finish_reason":"length"' not in buf:
            return "no finish_reason length: %r" % buf[-300:]
        return "ok"
    except OSError as e:
        return repr(e)
    finally:
        s.close()


def test_soak_256_streams():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1024 <= hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    d = Daemon(INFERD, ["--threads", "1", "--max-queue", "512"], workers=2)
    stop = threading.Event()
    done = [0]
    errors = []
    lock = threading.Lock()

    def client(i):
        rnd = random.Random(i)
        n = 0
        while not stop.is_set():
            body = {"prompt": "Soak %d-%d:" % (i, n), "max_tokens": rnd.randrange(2, 12),
                    "ignore_eos": True, "stream": True, "temperature": 0.7, "seed": i * 1000 + n}
            r = soak_stream(d, body, stop)
            n += 1
            with lock:
                if r == "ok":
                    done[0] += 1
                elif r != "stopped":
                    errors.append((i, n, r))
    try:
        d.wait_idle()
        # The workers' step buffers are sized for max_seqs sequences and max_batched_tokens
        # tokens, and their pages are touched as steps first reach those shapes; under the
        # soak's churn the widest steps are rare. A burst of max_seqs (64) requests per
        # worker, arriving at once, fills every worker's batch before the first sample.
        warm = [threading.Thread(target=soak_stream, daemon=True, args=(d, {
            "prompt": "Warm-up %d:" % i, "max_tokens": 16, "ignore_eos": True, "stream": True,
            "temperature": 0.7, "seed": i}, stop)) for i in range(64 * len(d.worker_pids()))]
        for t in warm:
            t.start()
        for t in warm:
            t.join(120)
        d.wait_idle()
        wpids = d.worker_pids()
        pids = [d.proc.pid] + wpids
        idle = [proc_sample(p) for p in pids]
        idle_fds = quiet_fds(d, pids[0])
        ts = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(256)]
        for t in ts:
            t.start()
        samples = []
        t0 = time.time()
        while time.time() - t0 < SOAK_SECONDS - 0.5:
            time.sleep(min(10, max(0.1, SOAK_SECONDS - (time.time() - t0))))
            m = d.metrics()
            samples.append((time.time() - t0, [proc_sample(p) for p in pids], done[0],
                            m["inferd_sequences_running"] + m["inferd_queue_depth"]))
            t, ps, n, live = samples[-1]
            print("     t=%4.0fs  private/shared rss MiB %s  fds %s  streams done %d  in flight %d"
                  % (t, ["%.1f/%.1f" % (a / 2**20, b / 2**20) for a, b, _ in ps],
                     [f for _, _, f in ps], n, live), flush=True)
        stop.set()  # the clients hang up mid-stream: their sequences are cancelled
        for t in ts:
            t.join(60)
        assert not errors, errors[:5]
        assert done[0] > 0
        assert d.worker_pids() == wpids, "a worker was restarted"
        d.wait_idle(timeout=120)
        after_fds = quiet_fds(d, pids[0])
        after = [proc_sample(p) for p in pids]
        # Flat after the warm-up burst: the peak private RSS of the later half of the samples
        # at most max(4 MiB, 5 %) above the earlier half's (a leak keeps raising it; the
        # allocator's ups and downs under 256 streams, and step shapes the burst did not
        # reach touching the last pages of their buffers, stay below); a worker's fds
        # constant (it holds no client fd); the daemon's back to their idle count after.
        steady = samples if len(samples) > 3 else samples[-2:]
        half = len(steady) // 2
        for k, pid in enumerate(pids):
            rss = [x[1][k][0] for x in steady]
            early, late = max(rss[:half]), max(rss[half:])
            assert late - early <= max(4 << 20, 0.05 * early), (
                "process %d: private rss grows" % pid, rss)
            if k > 0:
                fds = [x[1][k][2] for x in steady] + [after[k][2]]
                assert max(fds) == min(fds) == idle[k][2], ("worker fds", fds, idle[k][2])
        # The daemon's fds, each sampled with no client connection but the asking one: as many
        # pointing at the same kinds of thing (socket and pipe inodes, and the asking
        # connection's fd number, may differ).
        def kinds(fds):
            return sorted(v.split(":[")[0] if v.startswith(("socket:[", "pipe:[")) else v
                          for v in fds.values())
        assert kinds(after_fds) == kinds(idle_fds), (
            "daemon fds after the soak", sorted(set(idle_fds.items()) ^ set(after_fds.items())))
        mib = 2.0 ** 20
        print("figure: soak %.0f s, 256 concurrent streams, %d streams done (%.1f/s); private "
              "rss MiB after warm-up daemon %.1f..%.1f, workers %s; daemon fds idle %d, "
              "during %d..%d, after %d; worker fds %s" % (
                  SOAK_SECONDS, done[0], done[0] / SOAK_SECONDS,
                  min(x[1][0][0] for x in steady) / mib, max(x[1][0][0] for x in steady) / mib,
                  ["%.1f..%.1f" % (min(x[1][k][0] for x in steady) / mib,
                                   max(x[1][k][0] for x in steady) / mib)
                   for k in range(1, len(pids))],
                  idle[0][2], min(x[1][0][2] for x in steady), max(x[1][0][2] for x in steady),
                  after[0][2], [a[2] for a in after[1:]]), flush=True)
    finally:
        stop.set()
        assert d.stop() == 0


def main():
    global SOAK_SECONDS
    args = sys.argv[3:]
    names = []
    while args:
        a = args.pop(0)
        if a == "--minutes":
            SOAK_SECONDS = 60.0 * float(args.pop(0))
        elif a == "--seconds":
            SOAK_SECONDS = float(args.pop(0))
        else:
            names.append(a)
    require_model()
    return run_tests(globals(), names or None)


if __name__ == "__main__":
    sys.exit(main())
