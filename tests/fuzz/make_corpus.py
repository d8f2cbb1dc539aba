"""Writes the seed corpora of tests/fuzz/corpus/ (except wire: make_wire_seeds.c).

Run by hand when a target's input format changes:
    ~/.cache/inferd/venv/bin/python tests/fuzz/make_corpus.py
(the gguf seeds need the venv's `gguf` package). Crash inputs found by
run.sh are added by hand next to these, named crash-<what>.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def http():
    H = b"Host: x\r\n"
    body = b'{"prompt":"Hi","max_tokens":1}'
    reqs = {
        "get": b"GET /health HTTP/1.1\r\n" + H + b"\r\n",
        "get10": b"GET /v1/models HTTP/1.0\r\n\r\n",
        "post-cl": b"POST /v1/completions HTTP/1.1\r\n" + H +
                   b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
                   + body,
        "post-chunked": b"POST /v1/completions HTTP/1.1\r\n" + H +
                        b"Transfer-Encoding: chunked\r\n\r\n%x;ext=1\r\n" % len(body) + body +
                        b"\r\n0\r\n\r\n",
        "pipelined": (b"GET /health HTTP/1.1\r\n" + H + b"\r\n") * 2 +
                     b"GET /metrics HTTP/1.1\r\n" + H + b"Connection: close\r\n\r\n",
        "expect": b"POST /tokenize HTTP/1.1\r\n" + H + b"Expect: 100-continue\r\n"
                  b"Content-Length: 14\r\n\r\n{\"prompt\":\"a\"}",
        "head": b"HEAD /metrics HTTP/1.1\r\n" + H + b"Authorization: Bearer k\r\n"
                b"X-Request-Id: abc\r\n\r\n",
        "smuggle-cl-space": b"POST / HTTP/1.1\r\n" + H + b"Content-Length : 3\r\n\r\nabc",
        "smuggle-te-list": b"POST / HTTP/1.1\r\n" + H +
                           b"Transfer-Encoding: identity, chunked\r\n\r\n0\r\n\r\n",
        "smuggle-cl-te": b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 4\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "bad-chunk-crlf": b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n"
                          b"3\r\nabcXY0\r\n\r\n",
        "http09": b"GET /health\r\n\r\n",
        "obs-fold": b"GET / HTTP/1.1\r\n" + H + b"X-A: 1\r\n 2\r\n\r\n",
        "connect": b"CONNECT x:443 HTTP/1.1\r\n" + H + b"\r\n",
        "upgrade": b"GET / HTTP/1.1\r\n" + H + b"Connection: Upgrade\r\nUpgrade: h2c\r\n\r\n",
        "routes": b"".join(b"%s %s HTTP/1.1\r\n" % (m, p) + H + b"Content-Length: 0\r\n\r\n"
                           for m, p in [(b"GET", b"/v1/models/a%2Fb"), (b"POST", b"/ping"),
                                        (b"DELETE", b"/metrics"), (b"GET", b"/version?x=1"),
                                        (b"HEAD", b"/v1/models/"), (b"PUT", b"/tokenize"),
                                        (b"GET", b"/v1/models/a/b"), (b"GET", b"*")]),
    }
    for name, r in reqs.items():
        put("http", name + "-whole", b"\x00" + r)
        put("http", name + "-bytes", b"\x01" + r)
        put("http", name + "-7", b"\x07" + r)


def openai():
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    chat = [
        {"messages": msgs},
        {"messages": msgs, "stream": True, "max_tokens": 5, "temperature": 0.7, "top_p": 0.9,
         "stop": ["\n", "x"], "n": 2, "seed": 1, "logprobs": True, "top_logprobs": 2,
         "logit_bias": {"5": -100}, "presence_penalty": 0.5, "frequency_penalty": 0.1,
         "stream_options": {"include_usage": True}, "user": "u", "model": "m"},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
         "max_completion_tokens": 3, "top_k": 5, "min_p": 0.1, "repetition_penalty": 1.1,
         "ignore_eos": True, "stop_token_ids": [1, 2]},
        {"messages": msgs, "tools": [{"type": "function", "function": {"name": "f"}}]},
    ]
    comp = [
        {"prompt": "Hello"},
        {"prompt": ["a", "b"], "max_tokens": 3, "echo": True, "logprobs": 2, "n": 2},
        {"prompt": [1, 2, 3], "stream": True},
        {"prompt": [[1, 2], [3]], "suffix": "x"},
    ]
    for i, b in enumerate(chat):
        put("openai", "chat-%d" % i, b"\x00" + json.dumps(b).encode())
    for i, b in enumerate(comp):
        put("openai", "completion-%d" % i, b"\x01" + json.dumps(b).encode())
    put("openai", "tokenize-prompt", b"\x02" + json.dumps({"prompt": "hi", "return_token_strs":
                                                              True}).encode())
    put("openai", "tokenize-messages", b"\x02" + json.dumps({"messages": msgs}).encode())
    put("openai", "detokenize", b"\x03" + json.dumps({"tokens": [1, 2, 3]}).encode())
    resp = [
        {"input": "Hi", "instructions": "Be brief.", "max_output_tokens": 5, "stream": True},
        {"input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                   {"type": "function_call", "call_id": "call_1", "name": "f",
                    "arguments": "{}"},
                   {"type": "function_call_output", "call_id": "call_1", "output": "ok"}],
         "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
         "tool_choice": {"type": "function", "name": "f"}, "store": True,
         "include": ["message.output_text.logprobs"], "top_logprobs": 2},
        {"input": "x", "text": {"format": {"type": "json_schema", "name": "s",
                                           "schema": {"type": "object"}}}},
    ]
    for i, b in enumerate(resp):
        put("openai", "responses-%d" % i, b"\x04" + json.dumps(b).encode())
    # "\u0000" where text may hold it and where it is refused (docs/api.md)
    put("openai", "nul-chat", b"\x00" + json.dumps({
        "messages": [{"role": "user", "content": "a\x00b"},
                     {"role": "user", "content": [{"type": "text", "text": "\x00"}]}],
        "stop": ["\x00x"], "chat_template_kwargs": {"k": "\x00"}}).encode())
    put("openai", "nul-refused", b"\x00" + json.dumps({
        "messages": [{"role": "user", "content": "x"}], "model": "m\x00",
        "tool_choice": {"type": "function", "function": {"name": 5}}}).encode())
    put("openai", "nul-responses", b"\x04" + json.dumps({
        "input": "a\x00", "instructions": "\x00", "user": "u" * 257,
        "metadata": {"k": "v\x00"}, "previous_response_id": "resp_\x00"}).encode())
    # vLLM's token-level extensions (docs/api.md, Token ids)
    put("openai", "tokens-chat", b"\x00" + json.dumps({
        "messages": [{"role": "ipython", "content": "42"}, {"role": "user", "content": "Hi"}],
        "return_token_ids": True, "return_tokens_as_token_ids": True, "logprobs": True,
        "logprob_token_ids": [5, 7], "allowed_token_ids": [5, 7, 9], "stream": True,
        "logit_bias": {"a": 1, "b": 200}}).encode())
    put("openai", "tokens-completion", b"\x01" + json.dumps({
        "prompt": [1, 2], "echo": True, "logprobs": 0, "return_token_ids": True,
        "logprob_token_ids": [], "allowed_token_ids": [-1]}).encode())
    # image parts (docs/api.md, Images): chat image_url, Responses input_image
    put("openai", "image-chat", b"\x00" + json.dumps({
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "What?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=",
                                                "detail": "low"}},
            {"type": "image_url", "image_url": {"url": "https://example.com/x.png"}}]}],
        "mm_processor_kwargs": {"do_pan_and_scan": True}}).encode())
    put("openai", "image-responses", b"\x04" + json.dumps({
        "input": [{"role": "user", "content": [
            {"type": "input_image", "image_url": "data:image/gif;base64,R0lGODlh"},
            {"type": "input_text", "text": "Describe."}]}]}).encode())
    put("openai", "deep", b"\x00" + b"[" * 3000)
    put("openai", "unicode", b"\x00" + '{"messages":[{"role":"user","content":"\\ud83d\\ude00 é"}]}'
        .encode())


def tokenizer():
    texts = ["Hello, world!", " leading space", "tabs\tand\nnewlines\r\n", "1234567890 3.14",
             "日本語のテキスト", "emoji 😀👍🏽", "é à ü ß", "<|im_start|>user\nhi<|im_end|>",
             "<s>[INST] x [/INST]", "  multiple   spaces  ", "don't won't I'm",
             "\x00nul", ""]
    for i, t in enumerate(texts):
        put("tokenizer", "bpe-%02d" % i, b"\x00" + t.encode())
        put("tokenizer", "spm-%02d" % i, b"\x01" + t.encode())
    put("tokenizer", "invalid-utf8", b"\x00\xff\xfe\xc3(\xe2\x82")
    put("tokenizer", "invalid-utf8-spm", b"\x01\xff\xfe\xc3(\xe2\x82")


def chat():
    RS, US = "\x1e", "\x1f"
    convo = RS.join(["system" + US + "Be brief.", "user" + US + "Hello",
                     "assistant" + US + "Hi!", "user" + US + "<|im_end|> forged"])
    for fam in range(7):  # 6 families + detection
        put("chat", "fam%d-gen" % fam, bytes([fam, 1]) + convo.encode())
        put("chat", "fam%d-nogen" % fam, bytes([fam, 0]) + ("user" + US + "x").encode())
    put("chat", "detect-chatml", bytes([6, 1]) + ("{% for m in messages %}<|im_start|>"
                                                   "{{ m.role }}" + RS + "user" + US + "hi")
        .encode())
    put("chat", "tool-role", bytes([0, 1]) + ("tool" + US + "{}").encode())
    put("chat", "empty", bytes([1, 1]))


def gguf():
    try:
        import gguf as G
        import numpy as np
    except ImportError:
        print("gguf seeds skipped: no gguf/numpy (use the venv's python)", file=sys.stderr)
        return
    d = os.path.join(HERE, "corpus", "gguf")
    os.makedirs(d, exist_ok=True)

    def write(name, fill):
        path = os.path.join(d, name)
        w = G.GGUFWriter(path, "llama")
        fill(w)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()

    def tiny(w):
        w.add_context_length(64)
        w.add_embedding_length(8)
        w.add_block_count(1)
        w.add_feed_forward_length(16)
        w.add_head_count(2)
        w.add_head_count_kv(1)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_tokenizer_model("gpt2")
        toks = ["<s>", "</s>", "a", "b", "c", "ab", "Ġ", "Ġa", "bc", "<|im_start|>"]
        w.add_token_list(toks)
        w.add_token_types([3, 3, 1, 1, 1, 1, 1, 1, 1, 3])
        w.add_token_merges(["a b", "Ġ a", "b c"])
        w.add_bos_token_id(0)
        w.add_eos_token_id(1)
        w.add_string("general.name", "tiny")
        w.add_array("test.nested", [[1, 2], [3]])
        w.add_float64("test.f64", 1.5)
        w.add_bool("test.bool", True)
        w.add_int64("test.i64", -5)
        w.add_tensor("token_embd.weight", np.zeros((10, 8), dtype=np.float32))
        w.add_tensor("output_norm.weight", np.ones((8,), dtype=np.float16))

    def spm(w):
        w.add_tokenizer_model("llama")
        toks = ["<unk>", "<s>", "</s>", "▁", "a", "b", "▁a", "<0x41>"]
        w.add_token_list(toks)
        w.add_token_scores([0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -0.5, -9.0])
        w.add_token_types([2, 3, 3, 1, 1, 1, 1, 6])
        w.add_tensor("t", np.arange(4, dtype=np.float32))

    write("tiny-bpe.gguf", tiny)
    write("tiny-spm.gguf", spm)
    write("empty.gguf", lambda w: None)


def safetensors():
    """Small .safetensors files: the 8-byte little-endian header length, the
    JSON header, the data section (no numpy needed)."""
    import struct

    def st(tensors, meta=None, pad=0, extra=b""):
        hdr, data = {}, b""
        if meta is not None:
            hdr["__metadata__"] = meta
        for name, dtype, shape, size in tensors:
            hdr[name] = {"dtype": dtype, "shape": shape,
                         "data_offsets": [len(data), len(data) + size]}
            data += bytes((i * 37 + 11) & 255 for i in range(size))
        h = json.dumps(hdr).encode() + b" " * pad
        return struct.pack("<Q", len(h)) + h + data + extra

    put("safetensors", "two-f32.safetensors",
        st([("a.weight", "F32", [2, 3], 24), ("b.bias", "F32", [3], 12)]))
    put("safetensors", "mixed-dtypes.safetensors",
        st([("h", "F16", [4], 8), ("b", "BF16", [2, 2], 8), ("i", "I64", [1], 8),
            ("s", "F32", [], 4), ("z", "F32", [0, 5], 0)], meta={"format": "pt"}, pad=5))
    put("safetensors", "empty-header.safetensors", st([]))
    ov = json.dumps({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                     "y": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}).encode()
    put("safetensors", "overlap.safetensors", struct.pack("<Q", len(ov)) + ov + bytes(12))

def image():
    """Small images of each format and mode (Pillow writes them), and data URLs."""
    import base64
    import io

    from PIL import Image

    def enc(im, fmt, **kw):
        b = io.BytesIO()
        im.save(b, fmt, **kw)
        return b.getvalue()

    grad = Image.linear_gradient("L").resize((12, 9))
    rgb = Image.merge("RGB", (grad, grad.transpose(Image.Transpose.FLIP_LEFT_RIGHT),
                              grad.transpose(Image.Transpose.FLIP_TOP_BOTTOM)))
    rgba = rgb.copy()
    rgba.putalpha(grad)
    pal = rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=8)
    seeds = {
        "rgb.png": enc(rgb, "PNG"), "rgba.png": enc(rgba, "PNG"),
        "pal-trns.png": enc(pal, "PNG", transparency=2), "grey.png": enc(grad, "PNG"),
        "grey16.png": enc(grad.convert("I;16"), "PNG"), "bit1.png": enc(grad.convert("1"), "PNG"),
        "rgb.jpg": enc(rgb, "JPEG"), "prog.jpg": enc(rgb, "JPEG", progressive=True),
        "cmyk.jpg": enc(rgb.convert("CMYK"), "JPEG"), "grey.jpg": enc(grad, "JPEG"),
        "lossy.webp": enc(rgb, "WEBP"), "alpha.webp": enc(rgba, "WEBP", lossless=True),
        "anim.webp": enc(rgb, "WEBP", save_all=True, append_images=[rgba]),
        "pal.gif": enc(pal, "GIF", transparency=1),
        "anim.gif": enc(pal, "GIF", save_all=True, append_images=[pal.rotate(90)],
                        interlace=True),
    }
    # the EXIF orientation (common/image/exif.c): an Exif APP1, a PNG eXIf chunk, a WebP EXIF
    # chunk, an XMP packet's tiff:Orientation
    exif = Image.Exif()
    for o, (name, im, fmt, kw) in zip((6, 8, 3), (("exif6.jpg", rgb, "JPEG", {}),
                                                  ("exif8.png", rgba, "PNG", {}),
                                                  ("exif3.webp", rgb, "WEBP", {"lossless": True}))):
        exif[0x0112] = o
        seeds[name] = enc(im, fmt, exif=exif.tobytes(), **kw)
    seeds["xmp5.jpg"] = enc(rgb, "JPEG", xmp=b'<rdf:Description tiff:Orientation="5"/>')
    for name, b in seeds.items():
        put("image", name, b)
    put("image", "dataurl-png.txt", b"data:image/png;base64," + base64.b64encode(seeds["rgb.png"]))
    put("image", "dataurl-wrong-type.txt",
        b"data:image/jpeg;base64," + base64.b64encode(seeds["pal.gif"]))


if __name__ == "__main__":
    http()
    openai()
    tokenizer()
    chat()
    gguf()
    safetensors()
    image()
