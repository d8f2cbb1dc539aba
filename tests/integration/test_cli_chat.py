#!/usr/bin/env python3
"""test_cli_chat.py INFER INFERD — the `infer chat` REPL on a pseudo-terminal against the
real daemon (started here on a temporary socket with the default model):

- /system; Ctrl-C in the middle of a long answer stops it at once ("[stopped]", the prompt is back),
  the daemon sees the disconnect: its "abort" count rises and every KV block the request
  held returns to the pool; Ctrl-D quits with status 0;
- a second session: two turns stream answers (the second sent with the first's history),
  /save writes the conversation, /reset.
Skips (77) without the model or when inferd cannot serve yet.
"""
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_cli_harness import Daemon, Pty, check, main, metrics  # noqa: E402

INFER, INFERD = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
ABORT = 'inferd_request_success_total{finish_reason="abort"}'


def t():
    tmp = tempfile.mkdtemp()
    try:
        with Daemon(INFERD) as d:
            save = os.path.join(tmp, "conv.json")
            p = Pty([INFER, "chat", "--socket", d.sock, "-n", "2000", "-t", "0", "--ignore-eos"],
                    env={"TERM": "xterm"})
            p.read_until(rb">>> ", 30)
            time.sleep(0.3)
            p.write(b"/system You answer in one short sentence.\r")
            p.read_until(rb"system message set.*?>>> ", 30)
            time.sleep(0.3)
            before = metrics(d.sock).get(ABORT, 0)
            # a long answer (2000 tokens, end of text ignored): stop it early
            p.write(b"Tell me a very long story about a lighthouse keeper.\r")
            p.read_until(rb"lighthouse keeper\.\r\n", 30)
            p.read_until(rb"\S+\s+\S+\s+\S+", 120)  # a few words of the answer arrived
            t0 = time.time()
            p.write(b"\x03")
            p.read_until(rb"\[stopped\].*?>>> ", 30)
            check(time.time() - t0 < 10, "Ctrl-C took too long to stop the answer")
            deadline = time.time() + 30
            m = metrics(d.sock)
            while m.get(ABORT, 0) <= before and time.time() < deadline:
                time.sleep(0.2)
                m = metrics(d.sock)
            check(m.get(ABORT, 0) == before + 1, f"the daemon did not count the abort: {m}")
            d.wait_idle()
            time.sleep(0.3)
            p.write(b"\x04")
            rc = p.wait(30)
            check(rc == 0, f"chat exit status {rc}")

            # a second session: ordinary turns, /save, /reset
            p = Pty([INFER, "chat", "--socket", d.sock, "-n", "40", "-t", "0"],
                    env={"TERM": "xterm"})
            p.read_until(rb">>> ", 30)
            time.sleep(0.3)
            p.write(b"Say hello.\r")
            p.read_until(rb"Say hello\.\r\n.+?>>> ", 120)
            time.sleep(0.3)
            p.write(b"What did I ask you?\r")
            p.read_until(rb"ask you\?\r\n.+?>>> ", 120)
            time.sleep(0.3)
            p.write(f"/save {save}\r".encode())
            p.read_until(rb"saved 4 messages.*?>>> ", 30)
            conv = json.load(open(save))
            roles = [x["role"] for x in conv["messages"]]
            check(roles == ["user", "assistant", "user", "assistant"], f"saved roles {roles}")
            check(all(x["content"].strip() for x in conv["messages"]), "empty saved message")
            time.sleep(0.3)
            p.write(b"/reset\r")
            p.read_until(rb"cleared.*?>>> ", 30)
            time.sleep(0.3)
            p.write(b"\x04")
            rc = p.wait(30)
            check(rc == 0, f"chat exit status {rc}")
            d.wait_idle()
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main(t)
