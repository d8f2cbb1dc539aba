"""Images through the real daemon against transformers (issue 28's end-to-end oracle), on the
tiny random-weight Gemma 3 vision model of tests/data/tiny-gemma3-vision (its tokenizer and
chat template, tools/make_tiny_gemma3_vision.py). The official `openai` package over the Unix
socket sends the chats of chat_refs.json — text only, one image, two images, a system prompt
with an image and a second turn — with the committed PNGs as data URLs (chat `image_url`
parts), streamed and not, and checks against refs2.safetensors (what Gemma3Processor with the
PIL image processor and apply_chat_template(add_generation_prompt=True), then greedy
model.generate, gave):

- usage.prompt_tokens = len(input_ids) (the 16 image tokens of each image and the "\\n\\n"
  around them counted) and the prompt_token_ids (vLLM's return_token_ids) are input_ids;
- the greedy tokens (token_ids) are transformers', usage.completion_tokens counts them and the
  content is their /detokenize;
- every step's top logprobs (ids from return_tokens_as_token_ids) are the top ids of
  log_softmax(transformers' logits of that step) and within TOL of them (the CPU's f32 path:
  float summation order only, ~1e-5; an image left out or in the wrong order moves the first
  step's logits by up to 4);
- the two images swapped, the prompt's ids are the same but the first step's logprobs are not
  transformers' (the images reach the model, in their order), and the one-image chat again
  with the other image does not reuse the first image's cached KV (the prefix cache keys image
  positions by the image's hash) while the same chat again gives the same answer;
- the one-image chat as a Responses request (input_image): usage.input_tokens and the text;
- pan-and-scan (mm_processor_kwargs) on a wide picture: transformers' Gemma3Processor's ids;
- image0 in other files with the same pixels (16-bit PNG, animated WebP, a PNG stored rotated
  with its EXIF orientation) gives transformers' logprobs, odd formats are pictures, hostile
  ones are 400s, and nothing is held afterwards (test_formats_and_hostile_images).
After every test no KV block may be held. The daemon runs with f32 KV (its f16 default moves
the logprobs by ~5e-4: too close to TOL).

CTest: test_daemon_vision (label unit: the venv's openai, numpy and, for the formats' test,
Pillow; no downloaded model; a daemon and its worker, so in IFD_TESTS_2CPU; a few seconds).

On the emulated CUDA backend (test_daemon_vision_emu: INFERD INFERD_WORKER INFERD_WORKER_EMU,
labels emu): the hd64/ variant, the one- and two-image chats, the swapped images, Responses and
the prefix-cache keys, with f16 K/V's tolerance (EMU_TOL).

Usage: test_daemon_vision.py INFERD [INFERD_WORKER INFERD_WORKER_EMU]
(run by the venv's python: $INFERD_PYTHON)
"""
import base64
import copy
import json
import io
import os
import struct
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_daemon_util import Daemon, openai_client, run_tests, skip  # noqa: E402

try:
    import numpy as np
    import openai
except ImportError as e:  # pragma: no cover
    skip("the openai/numpy packages are not installed (%s): run deploy/install-deps.sh" % e)

INFERD = sys.argv[1] if len(sys.argv) > 1 else "inferd"
TINY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                    "tiny-gemma3-vision")
TOL = 1e-3    # |logprob - transformers' log_softmax| of each top alternative
TOP = 5       # top_logprobs asked for
D = None
C = None
MODEL = None


def load_safetensors(path):
    """{name: array} of a safetensors file, with numpy alone."""
    dtypes = {"F32": np.float32, "I32": np.int32}
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        head = json.loads(f.read(n))
        data = f.read()
    return {k: np.frombuffer(data[t["data_offsets"][0]:t["data_offsets"][1]],
                             dtype=dtypes[t["dtype"]]).reshape(t["shape"])
            for k, t in head.items() if k != "__metadata__"}


REFS = load_safetensors(os.path.join(TINY, "refs2.safetensors"))
with open(os.path.join(TINY, "chat_refs.json"), encoding="utf-8") as _f:
    DOC = json.load(_f)
CHATS = DOC["chats"]
MAX_TOKENS = DOC["max_tokens"]


def data_url(name):
    """A committed file as a PNG data URL; a "data:" URL is taken as it is."""
    if name.startswith("data:"):
        return name
    with open(os.path.join(TINY, name), "rb") as f:
        return "data:image/png;base64," + base64.b64encode(f.read()).decode()


def bytes_url(mime, data):
    return "data:%s;base64,%s" % (mime, base64.b64encode(data).decode())


def png_chunk(tag, data):
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))


def openai_messages(msgs, images=None):
    """transformers' messages ({"type": "image", "image": FILE}) as an OpenAI request's:
    image_url parts with the file as a data URL (images: the files to use instead, in order)."""
    out, k = copy.deepcopy(msgs), 0
    for m in out:
        if not isinstance(m["content"], list):
            continue
        for i, p in enumerate(m["content"]):
            if p["type"] == "image":
                name = images[k] if images else p["image"]
                m["content"][i] = {"type": "image_url", "image_url": {"url": data_url(name)}}
                k += 1
    return out


def extra(obj, name):
    return (obj.model_extra or {}).get(name)


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max()
    return x - m - np.log(np.exp(x - m).sum())


def top_ids(entry):
    """{id: logprob} of one token's top_logprobs (tokens as "token_id:N")."""
    return {int(t.token.split(":", 1)[1]): t.logprob for t in entry.top_logprobs}


def step_error(entry, ref_logits):
    """Largest |logprob - ref| over the step's alternatives; asserts the ids are the ref's
    top ids (their order may differ only within TOL)."""
    got = top_ids(entry)
    ref = log_softmax(ref_logits)
    want = set(np.argsort(-ref)[:TOP].tolist())
    assert set(got) == want, "top ids %s, transformers' %s" % (sorted(got), sorted(want))
    return max(abs(lp - ref[i]) for i, lp in got.items())


def ask(name, images=None, stream=False):
    """The chat's request (non-streamed or streamed): (prompt ids, usage, token ids,
    logprob entries, finish reason, content)."""
    kw = dict(model=MODEL, messages=openai_messages(CHATS[name]["messages"], images),
              max_tokens=MAX_TOKENS, temperature=0, logprobs=True, top_logprobs=TOP,
              extra_body={"return_token_ids": True, "return_tokens_as_token_ids": True})
    if not stream:
        r = C.chat.completions.create(**kw)
        c = r.choices[0]
        return (extra(r, "prompt_token_ids"), r.usage, extra(c, "token_ids"),
                c.logprobs.content, c.finish_reason, c.message.content)
    prompt, usage, ids, entries, finish, text = None, None, [], [], None, ""
    for ch in C.chat.completions.create(stream=True, stream_options={"include_usage": True},
                                        **kw):
        if extra(ch, "prompt_token_ids") is not None:
            assert prompt is None, "prompt_token_ids came twice"
            prompt = extra(ch, "prompt_token_ids")
        if ch.usage:
            usage = ch.usage
        for c in ch.choices:
            ids += extra(c, "token_ids") or []
            text += c.delta.content or ""
            if c.logprobs and c.logprobs.content:
                entries += c.logprobs.content
            finish = c.finish_reason or finish
    return prompt, usage, ids, entries, finish, text


def detok(ids):
    return D.json("POST", "/detokenize", {"tokens": ids})["prompt"]


def check_chat(name, stream):
    prompt, usage, ids, entries, finish, text = ask(name, stream=stream)
    want_prompt = REFS[name + "_input_ids"].tolist()
    want_ids = REFS[name + "_gen_ids"].tolist()
    how = "%s%s" % (name, " (streamed)" if stream else "")
    assert usage.prompt_tokens == len(want_prompt), (how, usage.prompt_tokens, len(want_prompt))
    assert prompt == want_prompt, (how, prompt, want_prompt)
    assert ids == want_ids, (how, ids, want_ids)
    assert text == detok(want_ids), (how, text)
    assert usage.completion_tokens == len(want_ids), (how, usage)
    assert finish == ("length" if len(want_ids) == MAX_TOKENS else "stop"), (how, finish)
    assert len(entries) == len(want_ids), (how, len(entries))
    errs = [step_error(e, REFS[name + "_gen_logits"][k]) for k, e in enumerate(entries)]
    assert max(errs) <= TOL, (how, errs)
    print("  %s: %d prompt tokens, %d generated, logprobs within %.2g" % (
        how, len(want_prompt), len(ids), max(errs)))


def test_text_chat():
    for stream in (False, True):
        check_chat("text", stream)
    D.wait_idle()


def test_image_chats():
    names = [n for n, c in CHATS.items() if c["images"] and n + "_gen_ids" in REFS]
    assert len(names) >= (2 if WORKER_EMU else 3), names
    for name in names:
        for stream in (False, True):
            check_chat(name, stream)
    D.wait_idle()


def test_image_order_matters():
    """The two images swapped: the same ids (an image's tokens do not depend on its
    pixels), another first step."""
    files = CHATS["two"]["images"]
    prompt, _, _, entries, _, _ = ask("two", images=files[::-1])
    assert prompt == REFS["two_input_ids"].tolist(), prompt
    ref = log_softmax(REFS["two_gen_logits"][0])
    d = max(abs(lp - ref[i]) for i, lp in top_ids(entries[0]).items())
    assert d > 20 * TOL, "swapped images give transformers' logprobs (%.3g)" % d
    print("  two, images swapped: first step %.3g from transformers'" % d)
    D.wait_idle()


def test_responses_input_image():
    """The one-image chat as a Responses request (input_image, input_text): the same prompt
    length and greedy text."""
    msg = CHATS["one"]["messages"][0]
    parts = [{"type": "input_image", "image_url": data_url(p["image"])} if p["type"] == "image"
             else {"type": "input_text", "text": p["text"]} for p in msg["content"]]
    r = C.responses.create(model=MODEL, input=[{"role": "user", "content": parts}],
                           max_output_tokens=MAX_TOKENS, temperature=0)
    assert r.usage.input_tokens == len(REFS["one_input_ids"]), r.usage
    assert r.output_text == detok(REFS["one_gen_ids"].tolist()), r.output_text
    D.wait_idle()


def cached(usage):
    return usage.prompt_tokens_details.cached_tokens


def test_prefix_cache_keys_images():
    """The one-image chat again (test_image_chats sent it): its prompt's full blocks come from
    the prefix cache and the answer is still transformers'. With the other image: the same
    ids, but nothing cached (the image begins in the first block) and not the first image's
    answer; sent again, its own blocks are cached and the answer is the same."""
    prompt, usage, _, entries, _, _ = ask("one")
    n = len(REFS["one_input_ids"])
    assert cached(usage) >= n // 16 * 16 - 16, usage  # the last full block may be recomputed
    assert max(step_error(e, REFS["one_gen_logits"][k]) for k, e in enumerate(entries)) <= TOL
    print("  one again: %d of %d prompt tokens cached" % (cached(usage), n))
    first = int(np.argmax(REFS["one_token_type_ids"]))
    assert first < 16, "the image should begin in the first block (%d)" % first
    other = [f for f in ("image0.png", "image1.png") if f not in CHATS["one"]["images"]]
    ref = log_softmax(REFS["one_gen_logits"][0])
    firsts = []
    for k in range(2):
        prompt, usage, _, entries, _, _ = ask("one", images=other)
        assert prompt == REFS["one_input_ids"].tolist(), prompt
        assert (cached(usage) == 0) if k == 0 else (cached(usage) >= 16), (k, usage)
        firsts.append(top_ids(entries[0]))
        d = max(abs(lp - ref[i]) for i, lp in firsts[-1].items())
        assert d > 20 * TOL, "the other image gave the first image's logprobs (%.3g)" % d
        print("  one with %s: %d cached, first step %.3g from the first image's" % (
            other[0], cached(usage), d))
    assert firsts[0].keys() == firsts[1].keys(), firsts
    assert max(abs(firsts[0][i] - firsts[1][i]) for i in firsts[0]) <= TOL, firsts
    D.wait_idle()


def test_formats_and_hostile_images():
    """The one-image chat with its picture in other files that hold the same pixels — a 16-bit
    PNG (Pillow keeps the high byte), the first frame of an animated lossless WebP, a PNG stored
    rotated with the EXIF orientation that turns it upright (load_image's exif_transpose) —
    gives transformers' logprobs; a GIF sent as image/jpeg and a CMYK JPEG are pictures (200);
    a decompression bomb, a truncated file, bytes that are no image and corrupt pixel data are
    400s naming the part; afterwards no KV block is held and the chat is still answered as
    transformers does."""
    try:
        import numpy  # noqa: F401
        from PIL import Image
    except ImportError as e:
        print("  SKIPPED (Pillow is not in this Python: %s)" % e)
        return
    im = Image.open(os.path.join(TINY, "image0.png")).convert("RGB")
    w, h = im.size
    px = np.asarray(im).astype(">u2") * 257
    rows = b"".join(b"\0" + r.tobytes() for r in px)
    ihdr = png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0))
    png16 = (b"\x89PNG\r\n\x1a\n" + ihdr + png_chunk(b"IDAT", zlib.compress(rows))
             + png_chunk(b"IEND", b""))
    buf = io.BytesIO()
    im.save(buf, "WEBP", lossless=True, save_all=True, append_images=[im.rotate(90), im])
    webp_anim = buf.getvalue()
    exif = Image.Exif()
    exif[0x0112] = 6  # exif_transpose turns it by ROTATE_270: back to image0
    buf = io.BytesIO()
    im.transpose(Image.Transpose.ROTATE_90).save(buf, "PNG", exif=exif)
    png_exif = buf.getvalue()
    ref = REFS["one_gen_logits"][0]
    n = len(REFS["one_input_ids"])
    for what, url in (("16-bit PNG", bytes_url("image/png", png16)),
                      ("animated WebP", bytes_url("image/webp", webp_anim)),
                      ("rotated PNG + EXIF orientation 6", bytes_url("image/png", png_exif))):
        prompt, usage, _, entries, _, _ = ask("one", images=[url])
        assert prompt == REFS["one_input_ids"].tolist(), (what, prompt)
        err = step_error(entries[0], ref)
        assert err <= TOL, (what, err)
        print("  one with image0 as a %s: first step within %.2g" % (what, err))
    gif, cmyk = io.BytesIO(), io.BytesIO()
    im.save(gif, "GIF")
    im.convert("CMYK").save(cmyk, "JPEG", quality=90)
    for what, url in (("GIF as image/jpeg", bytes_url("image/jpeg", gif.getvalue())),
                      ("CMYK JPEG", bytes_url("image/jpeg", cmyk.getvalue()))):
        prompt, usage, _, entries, _, _ = ask("one", images=[url])
        assert usage.prompt_tokens == n and len(entries) == MAX_TOKENS, (what, usage)
    bomb = (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", 60000, 60000, 8, 2,
                                                                   0, 0, 0))
            + png_chunk(b"IDAT", zlib.compress(b"\0" * 64)) + png_chunk(b"IEND", b""))
    corrupt = bytearray(png16)
    at = corrupt.index(b"IDAT") + 4
    corrupt[at:at + 8] = b"\xff" * 8  # the zlib stream's header and first bytes
    for what, url, says in (("a bomb", bytes_url("image/png", bomb), "max_image_pixels"),
                            ("truncated", bytes_url("image/png", png16[:len(png16) // 2]),
                             "truncated"),
                            ("no image", bytes_url("image/png", b"GIF88 no image" * 9),
                             "not an image"),
                            ("corrupt", bytes_url("image/png", bytes(corrupt)), "png")):
        try:
            ask("one", images=[url])
            raise AssertionError("accepted: " + what)
        except openai.BadRequestError as e:
            assert e.param == "messages[0].content[0]" and says in e.message, (what, e.message)
            print("  %s: 400 %s" % (what, e.message[:90]))
    D.wait_idle()  # no KV block held
    prompt, _, ids, entries, _, _ = ask("one")
    assert ids == REFS["one_gen_ids"].tolist() and step_error(entries[0], ref) <= TOL
    D.wait_idle()


def test_pan_and_scan_ids():
    """mm_processor_kwargs {"do_pan_and_scan": true} on a wide picture (900×300: three crops):
    the prompt's ids are transformers' Gemma3Processor's (the PIL image processor, the tiny
    directory's processor and chat template) with do_pan_and_scan=True — the original image,
    the processor's wording and one placeholder per crop; usage counts them. Off by default:
    the same request without the kwarg has one image's tokens."""
    try:
        from PIL import Image
        from transformers import AutoProcessor
    except ImportError as e:
        print("  SKIPPED (Pillow/transformers are not in this Python: %s)" % e)
        return
    proc = AutoProcessor.from_pretrained(TINY)
    y, x = np.mgrid[0:300, 0:900]
    img = Image.fromarray(np.stack([x % 256, y % 256, (x + y) % 256], -1).astype(np.uint8))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    url = bytes_url("image/png", buf.getvalue())
    msgs = CHATS["one"]["messages"]
    text = proc.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    want = proc(text=text, images=[img], do_pan_and_scan=True,
                add_special_tokens=False)["input_ids"][0]
    want = [int(t) for t in want]
    kw = dict(model=MODEL, messages=openai_messages(msgs, [url]), max_tokens=1, temperature=0,
              extra_body={"return_token_ids": True})
    r = C.chat.completions.create(**dict(kw, extra_body=dict(
        kw["extra_body"], mm_processor_kwargs={"do_pan_and_scan": True})))
    got = extra(r, "prompt_token_ids")
    assert got == want, "pan-and-scan ids differ from Gemma3Processor's:\n%s\n%s" % (got, want)
    assert r.usage.prompt_tokens == len(want), r.usage
    n_img = sum(1 for t in want if t == DOC.get("image_token_id", 511))
    plain = C.chat.completions.create(**kw)
    assert plain.usage.prompt_tokens == len(REFS["one_input_ids"]), plain.usage
    print("  pan-and-scan: %d prompt ids = Gemma3Processor's (%d image tokens), %d without" % (
        len(want), n_img, plain.usage.prompt_tokens))
    D.wait_idle()


# On the CUDA backend (argv[3]: inferd-worker-emu, test_daemon_vision_emu): the tiny
# directory's hd64/ variant (a text head_dim the CUDA attention takes) with its references,
# f16 K/V (the CUDA backend has no f32 K/V: test_vision_cuda's prompt cases bound its logits by
# 1e-3 of the row max, observed 2.8e-4; ~1e-3 in logprob here), and the tests whose only
# references are its one- and two-image chats.
WORKER_EMU = sys.argv[3] if len(sys.argv) > 3 else None
EMU_TOL = 3e-3
EMU_TESTS = ["test_image_chats", "test_image_order_matters", "test_responses_input_image",
             "test_prefix_cache_keys_images"]


def main():
    global D, C, MODEL, REFS, TOL
    model_dir = os.path.join(TINY, "hd64") if WORKER_EMU else TINY
    os.environ["INFERD_TEST_MODEL"] = os.path.abspath(model_dir)
    args, names = ["--threads", "1", "--kv-dtype", "f32"], None
    if WORKER_EMU:  # exact mode: f32 weights, activations and GEMMs
        args = ["--threads", "1", "--gpus", "0", "--gpu-dtype", "f32", "--worker-binary",
                WORKER_EMU, "--gpu-memory-fraction", "0.2", "--max-seqs", "2",
                "--max-model-len", "256", "--max-batched-tokens", "64"]
        REFS = load_safetensors(os.path.join(model_dir, "refs.safetensors"))
        TOL = EMU_TOL
        names = EMU_TESTS
        print("on the emulated CUDA backend (exact mode, f16 K/V): %s" % WORKER_EMU)
    D = Daemon(INFERD, args=args)
    try:
        C = openai_client(D.sock, timeout=300)
        MODEL = C.models.list().data[0].id
        rc = run_tests(globals(), names)
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
