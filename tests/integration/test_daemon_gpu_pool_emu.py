"""The KV pool in (emulated) GPU memory across a GPU worker's death (labels emu, model).

`inferd --gpus 0` with inferd-worker-emu (the real worker, CUDA backend and kernels on the
CPU emulator of tests/gpu/emu, whose cuda_emu_vmm.cc shares device memory between processes
with the lifetimes a driver gives). The worker makes the pool's device segment (CUDA VMM with
a POSIX-fd handle) and hands its fd to the router with READY; the router holds it.

(That a SIGKILLed worker's successor imports the fd the router kept and serves from the
cached prefix is test_daemon_gpu_emu's.) Checked, when the memory does not survive:

- with the IPC fallback ($IFD_KVSEG_FORCE_IPC=1) the memory dies with the worker: the router
  drops the device's cache, the successor makes a fresh segment, and the same request gives
  the same text with nothing cached (no stale block is ever served);
- with a driver that frees VMM memory when its creator dies although the fd is held
  ($IFD_EMU_VMM_FORGET=1, emulated), the successor's bind finds the segment's seal broken,
  rebuilds the pool and hands the router the new fd: same text, nothing cached.

Usage: test_daemon_gpu_pool_emu.py INFERD INFERD_WORKER_EMU
"""
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_daemon_util import Daemon, require_model, run_tests, skip  # noqa: E402

if len(sys.argv) < 3:
    skip("usage: test_daemon_gpu_pool_emu.py INFERD INFERD_WORKER_EMU")
INFERD, WORKER_EMU = sys.argv[1:3]
SRC = os.environ.get("INFERD_SOURCE_DIR",
                     os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SHAPE = os.path.join(SRC, "deploy", "shapes", "tiny-llama.json")
MODEL = "random-tiny-llama"
PROMPT = " ".join(["The quick brown fox jumps over the lazy dog."] * 6)
HOLDING = "holding the KV pool's device 0 segment (CUDA VMM fd)"
require_model()


def gpu_daemon(env=None):
    return Daemon(INFERD, env=env, args=["--gpus", "0", "--worker-binary", WORKER_EMU,
                                         "--random-weights", SHAPE, "--weights-seed", "5",
                                         "--gpu-memory-fraction", "0.2", "--max-seqs", "4",
                                         "--max-model-len", "512", "--max-batched-tokens",
                                         "64"])


def complete(d):
    """Greedy completion of PROMPT: (text, cached prompt tokens)."""
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 4, "temperature": 0}
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


def first_run(d):
    text, cached = complete(d)
    again, cached2 = complete(d)
    assert again == text and cached == 0 and cached2 >= 48, (text, again, cached, cached2)
    d.wait_idle()
    return text


def test_ipc_segment_dies_with_worker():
    d = gpu_daemon(env={"IFD_KVSEG_FORCE_IPC": "1"})
    try:
        text = first_run(d)
        assert HOLDING not in d.logtext(), d.logtext()  # no fd to hold
        kill_worker(d)
        log = d.logtext()
        assert "CUDA IPC memory, which died with the worker" in log, log
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
        assert "seal does not match" in log and log.count(HOLDING) == 2, log
        again, cached = complete(d)
        assert again == text and cached == 0, (again, text, cached)
        d.wait_idle()
    finally:
        assert d.stop() == 0, d.logtext()


if __name__ == "__main__":
    sys.exit(run_tests(globals(), sys.argv[3:]))
