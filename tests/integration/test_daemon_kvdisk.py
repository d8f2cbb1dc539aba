"""The KV cache's disk tier through the daemon (docs/kvpool.md, "Disk tier"; label model).

- test_restart_reads_prefix_from_disk: a prompt with a long shared prefix (about 2k tokens
  with the default model) is served by a daemon with --kv-cache-dir; the daemon stops; a new
  daemon on the same directory serves a second prompt sharing that prefix: its usage says the
  prefix was cached, /metrics counts disk hits, and its greedy tokens equal a cold run's (a
  daemon without the tier).
- test_faults_while_requests_run: rounds of a fresh daemon on a directory holding several
  prefixes' files, three requests at once while a thread truncates, corrupts, deletes and
  swaps block files and puts a file of another fingerprint under a block's name: every text
  equals the run without the tier (zero wrong tokens), the bad files are counted, the
  daemon exits cleanly.
- test_two_daemons_share_a_directory: two daemons of two workers each on one directory at
  once: the same texts, no bad file, and a third daemon reads the prefix back.
- test_gemma3_local_pool_across_restart: Gemma 3 270M (a local-layer pool: each file holds
  the local twin too), a prefix past its window across a restart: the same tokens as without
  the tier, the prefix cached (skipped without the model).

Usage: test_daemon_kvdisk.py INFERD WORKER   (standard library only)
"""
import os
import random
import shutil
import struct
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_daemon_util import SANITIZED, SCALE, Daemon, require_model, run_tests  # noqa: E402
import model_paths  # noqa: E402  (tests/model_paths.py, on the path test_daemon_util set)

INFERD = sys.argv[1] if len(sys.argv) > 1 else "inferd"
# The shared prefix's length in words (about 1.2 tokens each with SmolLM2); ~2k tokens keep the
# test within a few minutes on a loaded 2-core machine. INFERD_TEST_KVDISK_WORDS=3400 for 4k.
# The sanitized build (test.sh's ASan run) takes ~500 tokens: every path, in CI's time.
WORDS = int(os.environ.get("INFERD_TEST_KVDISK_WORDS") or (400 if SANITIZED else 1700))
GEMMA_WORDS = 600  # ~610 tokens: past Gemma 3's 512-token window, quick on a loaded machine
VOCAB = ("river stone lantern orchard copper meadow violet harbor canyon ember falcon glacier "
         "willow thunder saffron marble cedar quartz tundra beacon").split()


def prefix(seed, words=WORDS):
    rnd = random.Random(seed)
    return "Notes %d: " % seed + " ".join(rnd.choice(VOCAB) for _ in range(words)) + ".\n"


def complete(d, prompt, n=24):
    r = d.json("POST", "/v1/completions", {"prompt": prompt, "max_tokens": n, "temperature": 0,
                                            "ignore_eos": True})
    details = r["usage"].get("prompt_tokens_details") or {}
    return r["choices"][0]["text"], r["usage"]["prompt_tokens"], details.get("cached_tokens", 0)


def block_files(kvdir):
    return sorted(f for f in os.listdir(kvdir) if f.endswith(".kvb"))


def wait_writes(d, at_least, timeout=60):
    t0 = time.time()
    m = d.metrics()
    while time.time() - t0 < timeout * SCALE:
        m = d.metrics()
        if m.get("inferd_kv_disk_writes_total", 0) >= at_least:
            return m
        time.sleep(0.1)
    raise AssertionError("only %s block files written (wanted %d)" % (
        m.get("inferd_kv_disk_writes_total"), at_least))


def tier_args(kvdir):
    return ["--kv-cache-dir", kvdir, "--kv-cache-disk-bytes", "4G"]


def test_restart_reads_prefix_from_disk():
    tmp = tempfile.mkdtemp(prefix="inferd-kvdisk-")
    kvdir = os.path.join(tmp, "kv")
    shared = prefix(1)
    p1, p2 = shared + "Question one: what is listed first?", shared + "Summarize the notes:"
    try:
        cold = Daemon(INFERD)  # no tier: the reference tokens
        try:
            want, n_prompt, _ = complete(cold, p2)
        finally:
            assert cold.stop() == 0
        # about 1.1 tokens a word: 1,700 words ~1.8k tokens (400 when sanitized: ~430)
        assert n_prompt >= WORDS, "the shared prefix is only %d tokens" % n_prompt
        d = Daemon(INFERD, args=tier_args(kvdir))
        try:
            t0 = time.time()
            complete(d, p1)
            cold_s = time.time() - t0
            m = wait_writes(d, (n_prompt - 40) // 16)
            assert m["inferd_kv_disk_capacity_bytes"] == 4 << 30, m
        finally:
            assert d.stop() == 0
        files = block_files(kvdir)
        assert len(files) >= (n_prompt - 40) // 16, len(files)
        d = Daemon(INFERD, args=tier_args(kvdir))  # the restart
        try:
            t0 = time.time()
            got, _, cached = complete(d, p2)
            warm_s = time.time() - t0
            m = d.metrics()
        finally:
            assert d.stop() == 0
        assert got == want, "after the restart %r, cold %r" % (got, want)
        assert cached >= n_prompt - 64, "cached_tokens %d of %d" % (cached, n_prompt)
        assert m["inferd_kv_disk_hits_total"] >= cached - 16, m
        assert m["inferd_kv_disk_hit_blocks_total"] >= (n_prompt - 64) // 16, m
        assert m['vllm:external_prefix_cache_hits_total{model_name="%s"}' % model_name(m)] > 0
        assert m["inferd_kv_disk_bad_files_total"] == 0, m
        print("  prefix %d tokens: first request %.2fs, after the restart %.2fs "
              "(loaded machine: not a benchmark)" % (n_prompt, cold_s, warm_s))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def model_name(m):
    for k in m:
        if k.startswith("vllm:external_prefix_cache_hits_total{model_name=\""):
            return k.split('"')[1]
    raise AssertionError("no vllm:external_prefix_cache_hits_total in /metrics")


HEAD_FP = 16  # kvdisk.c's header: magic 8, version 4, block size 4, then the fingerprint


def damage_files(kvdir, rnd, stop, counts):
    """Until stop is set: one fault at a time on a random block file."""
    while not stop.is_set():
        files = block_files(kvdir)
        if len(files) < 2:
            time.sleep(0.01)
            continue
        f = os.path.join(kvdir, rnd.choice(files))
        kind = rnd.choice(["truncate", "corrupt", "delete", "swap", "foreign"])
        try:
            if kind == "truncate":
                os.truncate(f, rnd.randrange(0, os.path.getsize(f)))
            elif kind == "corrupt":
                with open(f, "r+b") as fh:
                    at = rnd.randrange(0, os.path.getsize(f))
                    fh.seek(at)
                    b = fh.read(1)
                    fh.seek(at)
                    fh.write(bytes([(b[0] if b else 0) ^ 0x40]))
            elif kind == "delete":
                os.unlink(f)
            elif kind == "swap":
                g = os.path.join(kvdir, rnd.choice(files))
                tmp = f + ".swap"
                os.rename(f, tmp)
                os.rename(g, f)
                os.rename(tmp, g)
            else:  # another fingerprint's file (a valid one, but for another model) in its place
                with open(f, "r+b") as fh:
                    fh.seek(HEAD_FP)
                    head = fh.read(8)
                    if len(head) < 8:  # truncated already
                        continue
                    (fp,) = struct.unpack("<Q", head)
                    fh.seek(HEAD_FP)
                    fh.write(struct.pack("<Q", fp ^ 0x5A5A))
            counts[kind] = counts.get(kind, 0) + 1
        except OSError:
            pass  # the file went away meanwhile (a reader deleted it)
        time.sleep(rnd.uniform(0.0, 0.05))


def test_faults_while_requests_run():
    tmp = tempfile.mkdtemp(prefix="inferd-kvdisk-")
    kvdir = os.path.join(tmp, "kv")
    words = WORDS // 2
    prompts = [prefix(10 + i, words) + "Item %d, continue:" % i for i in range(3)]
    try:
        cold = Daemon(INFERD)
        try:
            firsts = [complete(cold, p) for p in prompts]
            want = [f[0] for f in firsts]
        finally:
            assert cold.stop() == 0
        d = Daemon(INFERD, args=tier_args(kvdir))
        try:
            for p in prompts:
                complete(d, p)
            wait_writes(d, sum((f[1] - 40) // 16 for f in firsts))  # each prompt's full blocks
        finally:
            assert d.stop() == 0
        rnd = random.Random(7)
        counts, bad = {}, 0
        for rnd_i in range(3):
            d = Daemon(INFERD, args=tier_args(kvdir))
            stop = threading.Event()
            t = threading.Thread(target=damage_files, args=(kvdir, rnd, stop, counts))
            t.start()
            got = [None] * len(prompts)
            errs = []

            def one(i):
                try:
                    got[i] = complete(d, prompts[i])[0]
                except Exception as e:  # noqa: BLE001 (reported below)
                    errs.append(e)
            try:
                th = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
                for x in th:
                    x.start()
                for x in th:
                    x.join()
                m = d.metrics()
                bad += m["inferd_kv_disk_bad_files_total"]
            finally:
                stop.set()
                t.join()
                assert d.stop() == 0, "the daemon did not exit cleanly"
            assert not errs, errs
            for i in range(len(prompts)):
                assert got[i] == want[i], "round %d prompt %d: %r, without the tier %r" % (
                    rnd_i, i, got[i], want[i])
        print("  faults made: %s; bad files the tier found and deleted: %d" % (counts, bad))
        assert sum(counts.values()) > 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_two_daemons_share_a_directory():
    """Two daemons (two workers each) on one directory at once, each serving prompts that
    share a prefix: every text equals the run without the tier, no file is ever bad (the
    writers' renames of equal files, the collections' flock), and a third daemon reads the
    prefix back."""
    tmp = tempfile.mkdtemp(prefix="inferd-kvdisk-")
    kvdir = os.path.join(tmp, "kv")
    shared = prefix(20, WORDS // 3)
    prompts = [shared + "Part %d:" % i for i in range(4)]
    try:
        cold = Daemon(INFERD)
        try:
            firsts = [complete(cold, p) for p in prompts]
            want = [f[0] for f in firsts]
        finally:
            assert cold.stop() == 0
        # two workers each (one in the sanitized build: the four writers become two, the
        # directory still shared by two daemons at once)
        ds = [Daemon(INFERD, args=tier_args(kvdir), workers=1 if SANITIZED else 2)
              for _ in range(2)]
        got, errs = {}, []

        def one(k, i):
            try:
                got[i] = complete(ds[k], prompts[i])[0]
            except Exception as e:  # noqa: BLE001 (reported below)
                errs.append(e)
        try:
            th = [threading.Thread(target=one, args=(i % 2, i)) for i in range(4)]
            for x in th:
                x.start()
            for x in th:
                x.join()
            time.sleep(1)
            bad = sum(d.metrics()["inferd_kv_disk_bad_files_total"] for d in ds)
        finally:
            for d in ds:
                assert d.stop() == 0
        assert not errs, errs
        assert [got[i] for i in range(4)] == want, (got, want)
        assert bad == 0, bad
        d = Daemon(INFERD, args=tier_args(kvdir))
        try:
            text, n_prompt, cached = complete(d, shared + "Part 9:")
            m = d.metrics()
        finally:
            assert d.stop() == 0
        assert cached >= n_prompt - 40, (cached, n_prompt)
        assert m["inferd_kv_disk_bad_files_total"] == 0, m
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_gemma3_local_pool_across_restart():
    """Gemma 3 270M keeps its sliding-window layers (window 512) in a pool of their own: every
    block file holds the block's local twin too. A prefix longer than the window, served, the
    daemon restarted on the directory: the prefix comes back from disk (local twins with it)
    and the greedy tokens equal a daemon's without the tier."""
    gemma = model_paths.model_path("gemma3")
    if not os.path.isfile(gemma):
        print("  SKIPPED: Gemma 3 270M not at %s (deploy/fetch-model.sh gemma3)" % gemma)
        return
    tmp = tempfile.mkdtemp(prefix="inferd-kvdisk-gemma-")
    kvdir = os.path.join(tmp, "kv")
    shared = prefix(5, words=GEMMA_WORDS)
    p1, p2 = shared + "Question one: what is listed first?", shared + "Summarize the notes:"
    saved = os.environ.get("INFERD_TEST_MODEL")
    os.environ["INFERD_TEST_MODEL"] = gemma
    try:
        cold = Daemon(INFERD)
        try:
            want, n_prompt, _ = complete(cold, p2)
        finally:
            assert cold.stop() == 0
        assert n_prompt > 512 + 64, "the shared prefix is only %d tokens (window 512)" % n_prompt
        d = Daemon(INFERD, args=tier_args(kvdir))
        try:
            complete(d, p1)
            wait_writes(d, (n_prompt - 40) // 16)
            log = d.logtext(tail=1 << 20)
        finally:
            assert d.stop() == 0
        assert "kv disk tier off" not in log, log
        d = Daemon(INFERD, args=tier_args(kvdir))  # the restart
        try:
            got, _, cached = complete(d, p2)
            m = d.metrics()
        finally:
            assert d.stop() == 0
        assert got == want, "after the restart %r, cold %r" % (got, want)
        assert cached >= n_prompt - 64, "cached_tokens %d of %d" % (cached, n_prompt)
        assert m["inferd_kv_disk_hit_blocks_total"] >= (n_prompt - 64) // 16, m
        assert m["inferd_kv_disk_bad_files_total"] == 0, m
        print("  gemma 3: prefix %d tokens, %d cached after the restart" % (n_prompt, cached))
    finally:
        if saved is None:
            os.environ.pop("INFERD_TEST_MODEL", None)
        else:
            os.environ["INFERD_TEST_MODEL"] = saved
        shutil.rmtree(tmp, ignore_errors=True)


# CI's ASan run (SANITIZED) leaves these two to the normal build, for its time (~150 s
# sanitized): their code runs sanitized in test_kvdisk (truncated, flipped, foreign and
# deleted files; local twins) and test_engine (a truncated file mid-run; the local pool).
SANITIZED_SKIP = ("test_faults_while_requests_run", "test_gemma3_local_pool_across_restart")

if __name__ == "__main__":
    require_model()
    if SANITIZED:
        print("sanitized build: skipping %s (run in the normal build)" % ", ".join(SANITIZED_SKIP))
    sys.exit(run_tests({n: f for n, f in globals().items()
                        if not (SANITIZED and n in SANITIZED_SKIP)}))
