"""The KV pools in (emulated) GPU memory across a GPU worker's death (labels emu, model).

`inferd --gpus 0` with inferd-worker-emu (the real worker, CUDA backend and kernels on the
CPU emulator of tests/gpu/emu, whose cuda_emu_vmm.cc shares device memory between processes
with the lifetimes a driver gives), serving a tiny random Gemma 3 whose sliding-window layer
keeps its K/V in a second pool (docs/models.md, "Gemma 3 local layers"). The worker makes
each pool's device segment (CUDA VMM with a POSIX-fd handle) and hands both fds to the router
with READY; the router holds them. Checked:

- test_gemma3_two_device_pools: both pools sized from the probe's bytes by kv_budget's rule
  and both in /metrics, local blocks released as the window moves, both fds held, and a
  SIGKILLed worker's successor imports both and answers the repeated prompt from the cache
  with the same text (test_daemon_gpu_emu does the same for a one-pool Llama);
- with the IPC fallback ($IFD_KVSEG_FORCE_IPC=1) the memory dies with the worker: the router
  drops both pools' caches on the device, the successor makes fresh segments, and the same
  request gives the same text with nothing cached (no stale block is ever served);
- with a driver that frees VMM memory when its creator dies although the fd is held
  ($IFD_EMU_VMM_FORGET=1, emulated), the successor's binds find both segments' seals broken,
  rebuild both pools and hand the router the new fds: same text, nothing cached;
- test_gemma3_host_and_disk_tiers: the host and disk tiers with both pools on the device
  (the copies hold the local twins) across a daemon restart: same text, the prefix from disk.

Usage: test_daemon_gpu_pool_emu.py INFERD INFERD_WORKER_EMU
"""
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_daemon_util import Daemon, require_model, run_tests, skip  # noqa: E402

if len(sys.argv) < 3:
    skip("usage: test_daemon_gpu_pool_emu.py INFERD INFERD_WORKER_EMU")
INFERD, WORKER_EMU = sys.argv[1:3]
SRC = os.environ.get("INFERD_SOURCE_DIR",
                     os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
# A tiny Gemma 3 in random weights: 2 layers, layer 0 local (window 16), layer 1 global, head_dim
# 64 (the CUDA kernels'): the local layer's K/V live in a second pool whose device segment is
# its own, so every case below covers both pools (one pool takes the same code path, the loop
# over the router's pools; test_daemon_gpu_emu serves a one-pool Llama)
SHAPE = os.path.join(SRC, "deploy", "shapes", "tiny-gemma3.json")
MODEL = "random-tiny-gemma3"
PROMPT = " ".join(["The quick brown fox jumps over the lazy dog."] * 6)
HOLDING = "holding the KV pool's device 0 segment (CUDA VMM fd)"
LOCAL_HOLDING = "holding the local layers' KV pool's device 0 segment (CUDA VMM fd)"
require_model()


def gpu_daemon(env=None, shape=SHAPE, extra=()):
    return Daemon(INFERD, env=env, args=["--gpus", "0", "--worker-binary", WORKER_EMU,
                                         "--random-weights", shape, "--weights-seed", "5",
                                         "--gpu-memory-fraction", "0.2", "--max-seqs", "4",
                                         "--max-model-len", "512", "--max-batched-tokens",
                                         "64"] + list(extra))


def complete(d, model=MODEL, max_tokens=4):
    """Greedy completion of PROMPT: (text, cached prompt tokens)."""
    body = {"model": model, "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0}
    r = d.json("POST", "/v1/completions", body)
    details = r["usage"].get("prompt_tokens_details") or {}
    return r["choices"][0]["text"], details.get("cached_tokens", 0)


def kill_worker(d):
    """SIGKILLs the worker and waits until its successor is ready."""
    old = d.worker_pids()[0]
    os.kill(old, signal.SIGKILL)
    t0 = time.time()
    while time.time() - t0 < 120:
        try:
            h = json.loads(d.request("GET", "/health")[1])
            pid = h["workers"][0]["pid"]
            if h["status"] == "ok" and pid and pid != old:
                d.wait_idle()
                return pid
        except (OSError, ValueError, KeyError, IndexError):
            pass
        time.sleep(0.2)
    raise AssertionError("no new worker after SIGKILL:\n" + d.logtext())


def first_run(d, model=MODEL):
    text, cached = complete(d, model)
    again, cached2 = complete(d, model)
    assert again == text and cached == 0 and cached2 >= 48, (text, again, cached, cached2)
    d.wait_idle()
    return text


def test_ipc_segment_dies_with_worker():
    d = gpu_daemon(env={"IFD_KVSEG_FORCE_IPC": "1"})
    try:
        text = first_run(d)
        log = d.logtext()
        assert HOLDING not in log and LOCAL_HOLDING not in log, log  # no fd to hold
        kill_worker(d)
        log = d.logtext()
        assert log.count("CUDA IPC memory, which died with the worker") == 2, log
        assert "the local layers' KV pool device 0 is CUDA IPC memory" in log, log
        again, cached = complete(d)
        assert again == text and cached == 0, (again, text, cached)
        d.wait_idle()
    finally:
        assert d.stop() == 0, d.logtext()


def test_forgetful_driver_rebuilds():
    d = gpu_daemon(env={"IFD_EMU_VMM_FORGET": "1"})
    try:
        text = first_run(d)
        kill_worker(d)
        log = d.logtext()
        # both segments' seals broken, both rebuilt, both new fds held
        assert log.count("seal does not match") == 2, log
        assert log.count(HOLDING) == 2 and log.count(LOCAL_HOLDING) == 2, log
        again, cached = complete(d)
        assert again == text and cached == 0, (again, text, cached)
        d.wait_idle()
    finally:
        assert d.stop() == 0, d.logtext()


def test_gemma3_two_device_pools():
    """A tiny Gemma 3 (one local layer, window 16; one global layer) through --gpus 0: the
    local layers' pool is a second CUDA VMM segment. The probe's bytes (blocks of every
    layer) are split as kv_budget is on CPU workers, so with one layer in each pool the two
    block counts add up to twice the probe's (or one more); blocks wholly before the window go back to the
    local pool while a request runs (the gauges, refreshed every 0.1 s here); the router
    holds both fds, and a SIGKILLed worker's successor imports both and answers the repeated
    prompt from the cache through both pools with the same text."""
    d = gpu_daemon(extra=["--worker-ping-interval", "0.1"])
    try:
        log = d.logtext()
        probe = re.search(r"GPU 0 \(.*\): .* (\d+) KV blocks fit in 20% of it", log)
        pools = re.search(r"KV pool (\d+) blocks of 16 tokens .* per GPU", log)
        local = re.search(r"sliding-window layers keep their K/V in a pool of their own: (\d+) "
                          r"blocks", log)
        assert probe and pools and local, log
        n_global, n_local = int(pools.group(1)), int(local.group(1))
        # the local pool: 1 worker x (4 sequences x (ceil(15 / 16) + 2) + 64 / 16) blocks;
        # both pools' blocks hold one layer, the probe's every layer (two): the usable bytes
        # give twice its blocks, or one more from what was left of its last block
        assert n_local == 16, log
        assert 0 <= n_global + n_local - 2 * int(probe.group(1)) <= 1, log
        met = d.metrics()
        assert met["inferd_kv_blocks_capacity"] == n_global, met
        assert met["inferd_kv_local_blocks_capacity"] == n_local, met
        log = d.logtext()
        assert log.count(HOLDING) == 1 and log.count(LOCAL_HOLDING) == 1, log
        # a prompt of 3 full blocks and then some: while it decodes, the local layer's blocks
        # before the window (2 once the prompt is in, 3 at the end) are back in the local pool
        res, seen = [], [0, 0]
        th = threading.Thread(target=lambda: res.append(complete(d, max_tokens=12)))
        th.start()
        while th.is_alive():
            m = d.metrics()
            if m["inferd_kv_local_released_blocks"] > seen[0]:
                seen = [m["inferd_kv_local_released_blocks"], m["inferd_kv_local_released_bytes"]]
            time.sleep(0.05)
        th.join()
        text, cached = res[0]
        # f16 K and V of 2 KV heads x 16 positions x 64 per block, one local layer
        assert seen[0] >= 2 and seen[1] == seen[0] * 2 * 2 * 16 * 64 * 2, (seen, d.logtext())
        assert cached == 0, cached
        again, cached2 = complete(d, max_tokens=12)
        assert again == text and cached2 >= 48, (text, again, cached2)
        d.wait_idle()
        kill_worker(d)
        log = d.logtext()
        assert log.count(HOLDING) == 2 and log.count(LOCAL_HOLDING) == 2, log
        assert "rebuilding" not in log and "seal does not match" not in log, log
        again, cached3 = complete(d, max_tokens=12)
        assert again == text and cached3 == cached2, (again, text, cached2, cached3)
        d.wait_idle()
    finally:
        assert d.stop() == 0, d.logtext()


def test_gemma3_host_and_disk_tiers():
    """--kv-cache-host-bytes and --kv-cache-dir on a GPU worker whose model has a local-layer
    pool (docs/kvpool.md, "Host tier"): no "tier off" warning, the published blocks copied
    with their local twins into the host tier and written to disk; a restarted daemon on the
    directory serves the prompt with its prefix (and the twins the window needs) read from
    disk, with the same text."""
    kvdir = tempfile.mkdtemp(prefix="inferd-kv-gemma-")
    extra = ["--kv-cache-host-bytes", "16M", "--kv-cache-dir", kvdir]
    try:
        d = gpu_daemon(extra=extra)
        try:
            text, cached = complete(d, max_tokens=8)
            m = d.metrics()
            log = d.logtext()
            assert "tier off" not in log, log
            assert cached == 0 and m["inferd_kv_host_writes_total"] >= 3, m
            assert m["inferd_kv_host_dropped_total"] == 0, m
            assert m["inferd_kv_disk_dropped_total"] == 0, m
        finally:
            assert d.stop() == 0, d.logtext()
        files = [f for f in os.listdir(kvdir) if f.endswith(".kvb")]
        assert len(files) >= 3, files
        d = gpu_daemon(extra=extra)
        try:
            again, cached = complete(d, max_tokens=8)
            m = d.metrics()
            assert again == text, (text, again)
            assert cached >= 48 and m["inferd_kv_disk_hit_blocks_total"] >= 3, (cached, m)
            assert m["inferd_kv_disk_bad_files_total"] == 0, m
        finally:
            assert d.stop() == 0, d.logtext()
    finally:
        shutil.rmtree(kvdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(run_tests(globals(), sys.argv[3:]))
