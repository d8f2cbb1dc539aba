#!/usr/bin/env python3
"""test_cli_daemon.py INFER INFERD — `infer` prompting and the operations commands against
the real daemon (`inferd --model M --socket S --workers 1`, started here on a temporary
socket with the default model):

- `infer "PROMPT"` streams a non-empty answer; `infer -` reads stdin; --raw completes plain
  text; --json prints the whole chat.completion object; --no-stream gives the same greedy
  text as streaming; a seed makes sampling repeat; -n caps the tokens (finish "length");
- errors: an unknown model is HTTP 404 with the daemon's message (exit 4); a prompt over the
  context is 400 (exit 4); a socket nobody listens on is exit 3;
- `infer models` lists the model; `infer status` (text and --json) shows the worker ready,
  KV blocks and tokens; afterwards the daemon holds no KV blocks for sequences.
Skips (77) without the model or when inferd cannot serve yet.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_cli_harness import Daemon, check, main, run  # noqa: E402

INFER, INFERD = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])


def t():
    with Daemon(INFERD) as d:
        S = ["--socket", d.sock]
        rc, out, err = run([INFER] + S + ["-n", "24", "-t", "0", "What is the capital of France?"])
        check(rc == 0, f"prompt rc {rc}: {err}")
        check(len(out.strip()) > 0 and out.endswith("\n"), f"empty answer {out!r}")
        greedy = out

        rc, out, err = run([INFER, "prompt", "--no-stream", "-n", "24", "-t", "0",
                            "What is the capital of France?"], env={"INFERD_SOCKET": d.sock})
        check(rc == 0 and out == greedy, f"--no-stream differs: {out!r} vs {greedy!r}")

        rc, out, err = run([INFER] + S + ["-n", "24", "-t", "0", "-"],
                           input=b"What is the capital of France?")
        check(rc == 0 and out == greedy, f"stdin differs: {out!r}")

        rc, out, err = run([INFER] + S + ["--json", "-n", "8", "Say hi."])
        check(rc == 0, f"--json rc {rc}: {err}")
        o = json.loads(out)
        check(o["object"] == "chat.completion" and o["usage"]["completion_tokens"] <= 8
              and o["choices"][0]["message"]["role"] == "assistant", f"--json: {o}")

        rc, out, err = run([INFER] + S + ["--raw", "-n", "6", "-t", "0", "--stats",
                                          "The capital of France is"])
        check(rc == 0 and out.strip(), f"--raw: {rc} {out!r} {err}")
        check("generated" in err and "prompt tokens" in err, f"--stats: {err}")

        args = ["-n", "16", "-t", "0.9", "--seed", "1234", "Tell me a word."]
        a = run([INFER] + S + args)
        b = run([INFER] + S + args)
        check(a[0] == 0 and a[1] == b[1], f"seeded runs differ: {a[1]!r} vs {b[1]!r}")

        rc, out, err = run([INFER] + S + ["--ignore-eos", "-n", "5", "--json", "Hi"])
        o = json.loads(out)
        check(o["usage"]["completion_tokens"] == 5 and o["choices"][0]["finish_reason"] == "length",
              f"-n/--ignore-eos: {o}")

        rc, out, err = run([INFER] + S + ["-m", "no-such-model", "hi"])
        check(rc == 4 and "HTTP 404" in err, f"unknown model: {rc} {err}")
        rc, out, err = run([INFER] + S + ["-n", "100000000", "hi"])
        check(rc == 4 and "HTTP 400" in err, f"too long: {rc} {err}")

        rc, out, err = run([INFER, "models"] + S)
        check(rc == 0 and "SmolLM2" in out and " llama " in out and " gguf " in out,
              f"models: {rc} {out} {err}")
        rc, out, err = run([INFER, "models", "--json"] + S)
        check(json.loads(out)["data"][0]["id"], "models --json")

        rc, out, err = run([INFER, "status", "--interval", "0.3"] + S)
        check(rc == 0, f"status rc {rc}: {err}")
        for want in ("WORKER", "ready", "KV blocks", "prefix cache", "tokens", "requests"):
            check(want in out, f"status lacks {want!r}:\n{out}")
        rc, out, err = run([INFER, "status", "--json", "--interval", "0"] + S)
        o = json.loads(out)
        check(o["kv_blocks"]["total"] and o["tokens"]["out"] > 0, f"status --json: {o}")
        d.wait_idle()
    missing = os.path.join(os.path.dirname(INFER), "no-such.sock")
    rc, out, err = run([INFER, "--socket", missing, "hi"])
    check(rc == 3 and "inferd --model" in err, f"no daemon: {rc} {err}")


if __name__ == "__main__":
    main(t)
