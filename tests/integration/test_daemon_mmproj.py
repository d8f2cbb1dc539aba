"""A GGUF text model with llama.cpp's mmproj beside it (`inferd --model TEXT.gguf --mmproj
MMPROJ.gguf`, issue 28 item 2) through the real daemon against transformers, on the tiny
Gemma 3 converted by llama.cpp's own convert_hf_to_gguf.py (tests/data/tiny-gemma3-vision/gguf,
tools/make_tiny_gemma3_gguf.py). For each chat of chat_refs.json, sent with the committed
PNGs as data URLs (plain HTTP over the Unix socket):

- prompt_token_ids (return_token_ids) are transformers' input_ids: the GGUF's tokenizer and
  chat template, and the image placeholders expanded with the special ids the worker found in
  the GGUF's vocabulary (an mmproj holds none);
- the first greedy token is the argmax of transformers' last-prompt-position logits, and its
  top logprobs are the top ids of their log_softmax within TOL (refs_gguf.safetensors: the
  model the GGUF pair describes, the mmproj's F16 input projection included), so the router's
  decode and resize, the mmproj's image mean/std, the tower and the text GGUF all agree with
  transformers' processor and model.
After it no KV block may be held. f32 KV (the f16 default moves logprobs by ~5e-4).

Usage: test_daemon_mmproj.py INFERD   (run by the venv's python: $INFERD_PYTHON)
"""
import base64
import copy
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_daemon_util import Daemon, run_tests, skip  # noqa: E402

try:
    import numpy as np
except ImportError as e:  # pragma: no cover
    skip("numpy is not installed (%s): run deploy/install-deps.sh" % e)

INFERD = sys.argv[1] if len(sys.argv) > 1 else "inferd"
TINY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                    "tiny-gemma3-vision")
GGUF = os.path.join(TINY, "gguf")
TOL = 1e-4
TOP = 5
D = None

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "oracle"))
from test_tiny_vision_worker import load_safetensors  # noqa: E402

REFS = load_safetensors(os.path.join(GGUF, "refs_gguf.safetensors"))
with open(os.path.join(TINY, "chat_refs.json"), encoding="utf-8") as _f:
    CHATS = json.load(_f)["chats"]


def data_url(name):
    with open(os.path.join(TINY, name), "rb") as f:
        return "data:image/png;base64," + base64.b64encode(f.read()).decode()


def messages(msgs):
    out = copy.deepcopy(msgs)
    for m in out:
        if isinstance(m["content"], list):
            for i, p in enumerate(m["content"]):
                if p["type"] == "image":
                    m["content"][i] = {"type": "image_url",
                                       "image_url": {"url": data_url(p["image"])}}
    return out


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max()
    return x - m - np.log(np.exp(x - m).sum())


def check_chat(name):
    body = {"model": "tiny-gemma3-text-f32", "messages": messages(CHATS[name]["messages"]), "max_tokens": 1,
            "temperature": 0, "logprobs": True, "top_logprobs": TOP, "return_token_ids": True,
            "return_tokens_as_token_ids": True}
    code, data = D.request("POST", "/v1/chat/completions", body)
    r = json.loads(data)
    assert code == 200, (name, code, r)
    want = REFS[name + "_input_ids"].tolist()
    assert r["prompt_token_ids"] == want, (name, r["prompt_token_ids"], want)
    assert r["usage"]["prompt_tokens"] == len(want), (name, r["usage"])
    ref = log_softmax(REFS[name + "_logits"][-1])
    c = r["choices"][0]
    assert c["token_ids"] == [int(np.argmax(ref))], (name, c["token_ids"], int(np.argmax(ref)))
    (entry,) = c["logprobs"]["content"]
    got = {int(t["token"].split(":", 1)[1]): t["logprob"] for t in entry["top_logprobs"]}
    assert set(got) == set(np.argsort(-ref)[:TOP].tolist()), (name, sorted(got))
    err = max(abs(lp - ref[i]) for i, lp in got.items())
    assert err <= TOL, (name, err)
    print("  %s: %d prompt tokens (%d images), first token and top-%d logprobs within %.2g"
          % (name, len(want), len(CHATS[name]["images"]), TOP, err))


def test_chats():
    names = list(CHATS)
    assert sum(1 for n in names if CHATS[n]["images"]) >= 3, names
    for name in names:
        check_chat(name)
    D.wait_idle()


def main():
    global D
    os.environ["INFERD_TEST_MODEL"] = os.path.join(GGUF, "tiny-gemma3-text-f32.gguf")
    D = Daemon(INFERD, args=["--threads", "1", "--kv-dtype", "f32", "--mmproj",
                             os.path.join(GGUF, "mmproj-tiny-gemma3-f32.gguf")])
    try:
        rc = run_tests(globals())
    finally:
        code = D.stop()
    if code != 0:
        print("inferd exited with %d" % code)
        rc = 1
    if rc:
        print("---- daemon log ----\n" + D.logtext())
    return rc


if __name__ == "__main__":
    sys.exit(main())
