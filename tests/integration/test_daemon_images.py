"""Images sent to inferd serving a text model (label model; docs/vision.md): an OpenAI chat
`image_url` part and a Responses `input_image` part, sent by the official `openai` package
and by curl over the Unix socket, get a 400 that names the content part and says the model
takes no images — whatever the data URL holds (a real PNG, a GIF under a wrong MIME type,
garbage, an http URL), before anything is decoded; a malformed part is a 400 naming the
field; /tokenize takes no images; mm_processor_kwargs without images is accepted; a body
over max_body_bytes gets a 413; the daemon keeps serving text and holds no KV block
afterwards. (A vision model's path — decoded pictures on the ADD — needs a worker with a
vision tower: test_images and test_prompt_images test the router's side of it.)

Usage: test_daemon_images.py INFERD   (run by the venv's python: $INFERD_PYTHON)
"""
import base64
import json
import os
import struct
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_daemon_util import Daemon, openai_client, serve_and_run, skip  # noqa: E402

try:
    import openai
except ImportError as e:  # pragma: no cover
    skip("the openai package is not installed (%s): run deploy/install-deps.sh" % e)

INFERD = sys.argv[1] if len(sys.argv) > 1 else "inferd"
D = None
C = None
MODEL = "SmolLM2-135M-Instruct.Q4_1"


def chunk(tag, data):
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))


def png(w, h):
    """A real w × h RGB PNG (zlib + CRCs by hand: no Pillow needed here)."""
    rows = b"".join(b"\0" + bytes((x * 7 + y) % 256 for x in range(w * 3)) for y in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def data_url(mime, data):
    return "data:%s;base64,%s" % (mime, base64.b64encode(data).decode())


URLS = [
    data_url("image/png", png(64, 48)),
    data_url("image/jpeg", b"GIF89a" + bytes(40)),  # wrong type, GIF bytes
    data_url("image/png", b"not an image at all"),
    "data:image/png;base64,!!!!",
    "https://example.com/cat.png",
]


def expect_400(fn, param, code):
    try:
        fn()
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.param == param and e.code == code, e
        assert "does not accept images" in e.message, e.message
        return
    raise AssertionError("an image was accepted")


def test_chat_image_parts_400():
    for url in URLS:
        expect_400(lambda: C.chat.completions.create(
            model=MODEL, max_tokens=4, messages=[{"role": "user", "content": [
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image_url", "image_url": {"url": url}}]}]),
            "messages[0].content[1].type", "invalid_value")
    # streamed requests are refused the same way, before any chunk
    expect_400(lambda: list(C.chat.completions.create(
        model=MODEL, max_tokens=4, stream=True, messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": URLS[0]}}]}])),
        "messages[0].content[0].type", "invalid_value")
    D.wait_idle()


def test_responses_input_image_400():
    for url in URLS[:2]:
        expect_400(lambda: C.responses.create(model=MODEL, max_output_tokens=4, input=[
            {"role": "user", "content": [{"type": "input_text", "text": "Describe it."},
                                         {"type": "input_image", "image_url": url}]}]),
            "input[0].content[1].type", "unsupported_parameter")
    D.wait_idle()


def test_malformed_parts_and_kwargs():
    bad = [({"type": "image_url"}, "messages[0].content[0].image_url",
            "missing_required_parameter"),
           ({"type": "image_url", "image_url": "data:,"}, "messages[0].content[0].image_url",
            "invalid_type"),
           ({"type": "image_url", "image_url": {"url": 5}},
            "messages[0].content[0].image_url.url", "invalid_type"),
           ({"type": "input_audio"}, "messages[0].content[0].type", "invalid_value")]
    for part, param, code in bad:
        body = {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user",
                                                                "content": [part]}]}
        _, out = D.curl("-H", "Content-Type: application/json", "-d", json.dumps(body),
                        "http://localhost/v1/chat/completions", expect=400)
        err = json.loads(out)["error"]
        assert err["param"] == param and err["code"] == code, (part, err)
    # /tokenize renders messages but takes no images
    body = {"model": MODEL, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": URLS[0]}}]}]}
    _, out = D.curl("-H", "Content-Type: application/json", "-d", json.dumps(body),
                    "http://localhost/tokenize", expect=400)
    assert json.loads(out)["error"]["param"] == "messages[0].content[0].type", out
    # vLLM's mm_processor_kwargs: pan-and-scan is a no-op without images; other keys refused
    r = C.chat.completions.create(model=MODEL, max_tokens=2, temperature=0,
                                  messages=[{"role": "user", "content": "Hi"}],
                                  extra_body={"mm_processor_kwargs": {"do_pan_and_scan": True}})
    assert r.choices[0].finish_reason in ("stop", "length")
    try:
        C.chat.completions.create(model=MODEL, max_tokens=2,
                                  messages=[{"role": "user", "content": "Hi"}],
                                  extra_body={"mm_processor_kwargs": {"num_crops": 4}})
        raise AssertionError("an unknown mm_processor_kwargs key was accepted")
    except openai.BadRequestError as e:
        assert e.param == "mm_processor_kwargs.num_crops", e
    D.wait_idle()


def test_curl_image_and_huge_body():
    body = {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": URLS[0]}}]}]}
    code, out = D.curl("-H", "Content-Type: application/json", "-d", json.dumps(body),
                       "http://localhost/v1/chat/completions", expect=400)
    err = json.loads(out)["error"]
    assert err["param"] == "messages[0].content[0].type", err
    # a 6 MB image is over the default max_body_bytes (4M): 413 before any parsing
    big = os.path.join(D.dir, "big.json")
    body["messages"][0]["content"][0]["image_url"]["url"] = data_url("image/png",
                                                                     os.urandom(6 << 20))
    with open(big, "w") as f:
        json.dump(body, f)
    D.curl("-H", "Content-Type: application/json", "--data-binary", "@" + big,
           "http://localhost/v1/chat/completions", expect=413)
    # text still works and nothing is held
    r = C.chat.completions.create(model=MODEL, max_tokens=4, temperature=0,
                                  messages=[{"role": "user", "content": "Hi"}])
    assert r.choices[0].finish_reason in ("stop", "length")
    D.wait_idle()


def test_vision_router_path():
    """The router's image path end to end with a text model taken for a vision one (the
    daemon's test hook $INFERD_TEST_VISION: 16 tokens an image, 112² pictures, ids 1/2/3)
    and the built-in gemma template, which renders <start_of_image>: hostile images are
    400s naming the part and the reason, decided before any worker sees them; the limits
    are the flags'; a real PNG is decoded, expanded and sent on the ADD."""
    bomb = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 60000, 60000, 8, 2,
                                                                  0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))
    d = Daemon(INFERD, args=["--chat-template", "gemma", "--limit-images-per-prompt", "2",
                             "--max-image-bytes", "64K", "--max-body-bytes", "8M"],
               env={"INFERD_TEST_VISION": "16,1,2,3,112"})
    try:
        c = openai_client(d.sock)
        cases = [(data_url("image/png", b"not an image at all"), "not an image"),
                 ("data:image/png;base64,!!!!", "not a base64 data: URL"),
                 (data_url("image/png", png(64, 48)[:70]), "truncated"),
                 (data_url("image/png", bomb), "max_image_pixels"),
                 (data_url("image/png", os.urandom(100 << 10)), "max_image_bytes"),
                 ("https://example.com/cat.png", "not fetched")]
        for url, why in cases:
            try:
                c.chat.completions.create(model=MODEL, max_tokens=2, messages=[
                    {"role": "user", "content": [{"type": "text", "text": "What is it?"},
                                                 {"type": "image_url", "image_url": {"url": url}}]}])
                raise AssertionError("accepted: " + why)
            except openai.BadRequestError as e:
                assert e.param == "messages[0].content[1]" and why in e.message, (why, e)
        img = {"type": "image_url", "image_url": {"url": URLS[0]}}
        try:  # three images, limit 2: the third is named
            c.chat.completions.create(model=MODEL, max_tokens=2, messages=[
                {"role": "user", "content": [img, img, img]}])
            raise AssertionError("3 images accepted")
        except openai.BadRequestError as e:
            assert e.param == "messages[0].content[2]" and "At most 2" in e.message, e
        # a real PNG goes through: decoded, its placeholder expanded, the picture on the ADD.
        # A worker without a tower may refuse the pictures (the worker's half of issue 28):
        # then the ADD reached it, which is all the router owes; today's worker ignores them.
        try:
            r = c.chat.completions.create(model=MODEL, max_tokens=2, temperature=0, messages=[
                {"role": "user", "content": [{"type": "text", "text": "What is it?"}, img]}])
        except openai.APIStatusError as e:
            assert e.status_code >= 500 and "image" in str(e).lower(), e
            r = None
        plain = c.chat.completions.create(model=MODEL, max_tokens=2, temperature=0, messages=[
            {"role": "user", "content": "What is it?"}])
        # the image's 16 soft tokens and its <start_of_image>/<end_of_image> are counted
        assert r is None or r.usage.prompt_tokens >= plain.usage.prompt_tokens + 16 + 2, (
            r.usage, plain.usage)
        # Responses' input_image takes the same path; its errors name the input
        try:
            c.responses.create(model=MODEL, max_output_tokens=2, input=[
                {"role": "user", "content": [{"type": "input_text", "text": "Describe."},
                                             {"type": "input_image",
                                              "image_url": "data:image/png;base64,!!!!"}]}])
            raise AssertionError("bad base64 accepted")
        except openai.BadRequestError as e:
            assert e.param == "input[0].content[1]" and "base64" in e.message, e
        d.wait_idle()
    finally:
        code = d.stop()
    assert code == 0, code


if __name__ == "__main__":
    sys.exit(serve_and_run(globals(), INFERD))
