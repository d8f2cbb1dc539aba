#!/usr/bin/env python3
"""inferd against llama.cpp's own multimodal runtime (libmtmd, llama-mtmd-cli's library) on the
same GGUF files: the tiny Gemma 3 text GGUF + mmproj GGUF that llama.cpp's convert_hf_to_gguf.py
made (tests/data/tiny-gemma3-vision/gguf, tools/make_tiny_gemma3_gguf.py). Issue 28, docs/vision.md
"llama.cpp's runtime on the same files". Not a CI test (CI has no llama.cpp build):

    bench/build_mtmd_probe.sh            # mtmd_probe + llama-mtmd-cli against llama.cpp's libs
    ~/.cache/inferd/venv/bin/python tools/mtmd_check.py [--build build] [--probe P] [--json OUT]

What it measures, for each test image (image0.png 97×61 RGB, image1.png 40×90 RGBA, and a square
opaque one, image0's left 61×61, made on the fly):

  * embeddings, same pixels: inferd's resized 112² picture (bench_vision --image --dump-pixels,
    transformers' Gemma3ImageProcessor exactly) given to llama.cpp as raw RGB (mtmd_probe --rgb:
    at the tower's size llama.cpp copies it), llama.cpp's embeddings against inferd's
    (--dump-features), with clip's flash attention on (auto, llama.cpp's default) and off;
  * embeddings, each engine's own preprocessing: mtmd_probe --image FILE (stb_image, then clip's
    resize for Gemma 3) against inferd's; and the explanation checked: a Python emulation of
    llama.cpp's Gemma 3 preprocessing (alpha dropped, not composited on white; aspect kept by a
    bilinear resize to ceil(side × min scale), padded black, centred — clip.cpp's PAD_CEIL default;
    transformers stretches to 112² and composites alpha on white) fed through --rgb must give
    llama.cpp's --image embeddings, and the two pictures' pixel differences are reported;
  * the four chats of chat_refs.json (the prompt as transformers' processor expands it: the
    marker replaced by "\\n\\n<__media__>\\n\\n", mtmd adding <start_of_image>/<end_of_image>):
    llama.cpp's prompt ids against transformers' (refs_gguf), llama.cpp's logits at every prompt
    position against transformers' on the model the GGUF pair describes (refs_gguf; inferd's are
    within 1e-5 of them: test_tiny_gemma3_gguf), and 8 greedy tokens of llama.cpp (inferd's
    pixels; and llama.cpp's own preprocessing) against inferd's through the daemon
    (--kv-dtype f32, temperature 0).

Prints a summary and writes JSON (--json). Exits 1 only when a tool fails, never on a difference:
the differences are the result (docs/vision.md records them).
"""
import argparse
import base64
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
TINY = os.path.join(ROOT, "tests", "data", "tiny-gemma3-vision")
GGUF = os.path.join(TINY, "gguf")
TEXT = os.path.join(GGUF, "tiny-gemma3-text-f32.gguf")
MMPROJ = os.path.join(GGUF, "mmproj-tiny-gemma3-f32.gguf")
IMAGES = ("image0.png", "image1.png")
SIZE = 112
N_PREDICT = 8

sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "tests", "oracle"))


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (r.returncode, " ".join(cmd), r.stderr[-3000:]))
    return r.stdout


def probe(args, tmp, extra):
    out = run([args.probe, "--model", TEXT, "--mmproj", MMPROJ, "--threads", "1"] + extra)
    return json.loads(out.strip().splitlines()[-1])


def f32(path, cols):
    return np.fromfile(path, dtype=np.float32).reshape(-1, cols)


def rel(a, b):
    """max |a - b| over max |b|."""
    return float(np.abs(a - b).max() / np.abs(b).max())


def llamacpp_picture(path):
    """llama.cpp's Gemma 3 preprocessing (mtmd-helper's stb_image load with 3 channels, then
    img_tool::resize with RESIZE_ALGO_BILINEAR and PAD_CEIL into SIZE², black padding) emulated
    with Pillow (clip's resize_pillow ports Pillow's resampling)."""
    im = Image.open(path)
    im.load()
    rgb = im.convert("RGB")  # RGBA → RGB drops alpha, as stb_image's 4 → 3 conversion does
    w, h = rgb.size
    scale = min(np.float32(SIZE) / np.float32(w), np.float32(SIZE) / np.float32(h))
    nw = min(int(np.ceil(np.float32(w) * scale)), SIZE)
    nh = min(int(np.ceil(np.float32(h) * scale)), SIZE)
    small = rgb.resize((nw, nh), Image.BILINEAR)
    canvas = Image.new("RGB", (SIZE, SIZE), (0, 0, 0))
    canvas.paste(small, ((SIZE - nw) // 2, (SIZE - nh) // 2))
    return np.asarray(canvas, dtype=np.uint8), (nw, nh)


def explain(px_file, want, dump):
    """llama.cpp's same-pixel embeddings reproduced with transformers' tiny tower (f16-rounded
    projection, as in the mmproj) and ggml's CPU roundings emulated one after another: the patch
    embedding in f16 (ggml_conv_2d makes its im2col F16 for an F32 kernel, and mul_mat then
    rounds the kernel to F16 too: pixels and conv weights rounded), gelu as ggml's table,
    f16(gelu_tanh(f16(x))) for |x| < 10 (GGML_GELU_FP16), and the projection's input rounded to
    f16 (mul_mat converts src1 to the F16 weight's vec_dot type). Max relative difference to
    llama.cpp's embeddings for each; None without torch (run this script with the torch venv)."""
    try:
        import torch
        import torch.nn.functional as F
        from transformers import Gemma3ForConditionalGeneration
    except ImportError:
        return None
    m = Gemma3ForConditionalGeneration.from_pretrained(TINY, dtype=torch.float32).eval()
    w = m.model.multi_modal_projector.mm_input_projection_weight
    with torch.no_grad():
        w.copy_(w.to(torch.float16).to(torch.float32))
    h = lambda x: x.to(torch.float16).to(torch.float32)  # noqa: E731

    class GeluTable(torch.nn.Module):
        def forward(self, x):
            y = h(F.gelu(h(x), approximate="tanh"))
            return torch.where(x <= -10, torch.zeros_like(x), torch.where(x >= 10, x, y))

    class Gelu(torch.nn.Module):
        def forward(self, x):
            return F.gelu(x, approximate="tanh")
    pic = np.fromfile(px_file, dtype=np.uint8).reshape(SIZE, SIZE, 3)
    pv = torch.from_numpy(((pic.astype(np.float32) / 255.0 - 0.5) / 0.5).transpose(2, 0, 1).copy())[None]
    out = {}
    conv = m.model.vision_tower.embeddings.patch_embedding
    conv_w = conv.weight.detach().clone()
    for name, c16, gelu, proj in (("exact", False, False, False),
                                  ("f16_patch_embedding", True, False, False),
                                  ("f16_patch_embedding_gelu_table", True, True, False),
                                  ("all_three", True, True, True)):
        hooks = []
        with torch.no_grad():
            conv.weight.copy_(h(conv_w) if c16 else conv_w)
        for layer in m.model.vision_tower.encoder.layers:
            layer.mlp.activation_fn = GeluTable() if gelu else Gelu()
        if proj:
            hooks.append(m.model.multi_modal_projector.mm_soft_emb_norm.register_forward_hook(
                lambda mod, i, o: h(o)))
        with torch.no_grad():
            t = m.model.vision_tower(pixel_values=h(pv) if c16 else pv).last_hidden_state
            f = m.model.multi_modal_projector(t)[0].numpy()
        for k in hooks:
            k.remove()
        out[name] = rel(want, f)
    # two stages in isolation, from clip's own tensors (mtmd_probe under MTMD_PROBE_DUMP):
    # the patch embedding against torch's conv on f16-rounded pixels and weights, and ggml's
    # gelu output against the f16 table applied to ggml's own gelu input
    ld = lambda n: np.fromfile(os.path.join(dump, n + ".f32"), dtype=np.float32)  # noqa: E731
    with torch.no_grad():
        conv.weight.copy_(h(conv_w))
        pe = conv(h(pv)).flatten(2).transpose(1, 2).reshape(-1).numpy()
        conv.weight.copy_(conv_w)
    out["stage_patch_embedding_f16_vs_llamacpp"] = rel(ld("patch_bias"), pe)
    up = torch.from_numpy(ld("ffn_up_b-0"))
    out["stage_gelu_table_on_llamacpp_input_vs_llamacpp"] = rel(
        ld("ffn_gelu-0"), GeluTable()(up).numpy())
    return out


def mtmd_prompt(chat):
    p = chat["prompt"]
    assert p.startswith("<bos>")  # mtmd_tokenize adds BOS itself (add_special)
    return p[len("<bos>"):].replace("<start_of_image>", "\n\n<__media__>\n\n")


def inferd_greedy(inferd, chats):
    from test_daemon_util import Daemon  # noqa: E402
    os.environ["INFERD_TEST_MODEL"] = TEXT
    d = Daemon(inferd, args=["--threads", "1", "--kv-dtype", "f32", "--mmproj", MMPROJ])
    out = {}
    try:
        for name, chat in chats.items():
            msgs = copy.deepcopy(chat["messages"])
            for m in msgs:
                if isinstance(m["content"], list):
                    for i, part in enumerate(m["content"]):
                        if part["type"] == "image":
                            with open(os.path.join(TINY, part["image"]), "rb") as f:
                                url = "data:image/png;base64," + base64.b64encode(f.read()).decode()
                            m["content"][i] = {"type": "image_url", "image_url": {"url": url}}
            body = {"model": "tiny-gemma3-text-f32", "messages": msgs, "max_tokens": N_PREDICT, "temperature": 0,
                    "return_token_ids": True}
            code, data = d.request("POST", "/v1/chat/completions", body)
            r = json.loads(data)
            if code != 200:
                sys.exit("inferd: %s: %d %s" % (name, code, r))
            out[name] = {"prompt_ids": r["prompt_token_ids"],
                         "generated_ids": r["choices"][0]["token_ids"],
                         "finish_reason": r["choices"][0]["finish_reason"]}
    finally:
        d.stop()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--probe", default=os.path.expanduser(
        "~/.cache/inferd/llamacpp-mtmd/bin/mtmd_probe"))
    ap.add_argument("--json")
    ap.add_argument("--keep", action="store_true", help="keep the temporary files (pictures, "
                    "embeddings, logits, clip's tensors) and print where")
    args = ap.parse_args()
    bench = os.path.join(args.build, "bench", "bench_vision")
    inferd = os.path.join(args.build, "daemon", "inferd")
    for p in (args.probe, bench, inferd):
        if not os.access(p, os.X_OK):
            sys.exit("missing %s (bench/build_mtmd_probe.sh; cmake --build %s --target "
                     "bench_vision inferd inferd-worker)" % (p, args.build))
    from safetensors.numpy import load_file
    refs = load_file(os.path.join(GGUF, "refs_gguf.safetensors"))
    with open(os.path.join(TINY, "chat_refs.json"), encoding="utf-8") as f:
        chats = json.load(f)["chats"]
    res = {"images": {}, "chats": {}}
    tmp = tempfile.mkdtemp(prefix="mtmd-check-")
    pixels = {}
    # a square opaque picture too (image0's left 61×61): there the two preprocessings should meet
    sq = os.path.join(tmp, "square61.png")
    Image.open(os.path.join(TINY, IMAGES[0])).convert("RGB").crop((0, 0, 61, 61)).save(sq)
    for k, name in enumerate(IMAGES + ("square61.png",)):
        img = os.path.join(TINY, name) if k < len(IMAGES) else sq
        px, ft = os.path.join(tmp, name + ".rgb"), os.path.join(tmp, name + ".inferd.f32")
        run([bench, "--mmproj", MMPROJ, "--threads", "1", "--reps", "1", "--image", img,
             "--dump-pixels", px, "--dump-features", ft])
        pixels[name] = px
        fi = f32(ft, 64)
        r = {"inferd_vs_transformers": rel(fi, refs["mmproj_features_%d" % k])
             if k < len(IMAGES) else None}
        dump = os.path.join(tmp, name + ".dump")
        os.makedirs(dump)
        for flash in (True, False):
            e = os.path.join(tmp, name + ".same.f32")
            if not flash:
                os.environ["MTMD_PROBE_DUMP"] = dump
            probe(args, tmp, ["--rgb", px, "--size", str(SIZE), "--embd-out", e]
                  + ([] if flash else ["--no-flash"]))
            os.environ.pop("MTMD_PROBE_DUMP", None)
            r["llamacpp_same_pixels_vs_inferd" + ("" if flash else "_no_flash")] = rel(f32(e, 64), fi)
            if not flash:
                r["llamacpp_no_flash_vs_transformers_with_ggml_roundings"] = (
                    explain(px, f32(e, 64), dump) if k < len(IMAGES) else None)
        own = os.path.join(tmp, name + ".own.f32")
        probe(args, tmp, ["--image", img, "--embd-out", own])
        fo = f32(own, 64)
        r["llamacpp_own_preproc_vs_inferd"] = rel(fo, fi)
        lp, (nw, nh) = llamacpp_picture(img)
        lpf = os.path.join(tmp, name + ".llamacpp.rgb")
        lp.tofile(lpf)
        em = os.path.join(tmp, name + ".emul.f32")
        probe(args, tmp, ["--rgb", lpf, "--size", str(SIZE), "--embd-out", em])
        r["emulated_llamacpp_preproc_vs_llamacpp_own"] = rel(f32(em, 64), fo)
        ip = np.fromfile(px, dtype=np.uint8).reshape(SIZE, SIZE, 3)
        d = np.abs(ip.astype(np.int16) - lp.astype(np.int16))
        r["pixels"] = {"size": list(Image.open(img).size), "mode": Image.open(img).mode,
                       "llamacpp_resized_to": [nw, nh], "max_abs_diff": int(d.max()),
                       "mean_abs_diff": float(d.mean()),
                       "share_differing": float((d.max(axis=2) > 0).mean())}
        res["images"][name] = r
    inf = inferd_greedy(inferd, chats)
    for name, chat in chats.items():
        prompt = mtmd_prompt(chat)
        al = os.path.join(tmp, name + ".logits.f32")
        rgb = []
        for im in chat["images"]:
            rgb += ["--rgb", pixels[im]]
        if rgb:
            same = probe(args, tmp, rgb + ["--size", str(SIZE), "--prompt", prompt, "-n", str(N_PREDICT),
                                             "--all-logits-out", al])
        else:
            same = probe_text(args, prompt, al)
        want = refs[name + "_input_ids"].tolist()
        got = [511 if t == -1 else t for t in same["prompt_ids"]]
        lg = f32(al, 512)
        ref = refs[name + "_logits"]
        row = np.abs(lg - ref).max(axis=1) / np.abs(ref).max(axis=1)
        img_pos = [i for i, t in enumerate(want) if t == 511]
        c = {"prompt_ids_equal": got == want, "n_prompt": len(want),
             "logits_rel_max": float(row.max()),
             "logits_rel_max_text_positions": float(np.delete(row, img_pos).max()),
             "logits_rel_max_image_positions": float(row[img_pos].max()) if img_pos else None,
             "argmax_equal_positions": int((lg.argmax(1) == ref.argmax(1)).sum()),
             "llamacpp_greedy": same["generated_ids"],
             "inferd_greedy": inf[name]["generated_ids"],
             "inferd_prompt_ids_equal": inf[name]["prompt_ids"] == want}
        if rgb and name == "one":
            # the control: image tokens made causal in llama.cpp (MTMD_PROBE_CAUSAL) — what a
            # wrong mask costs, so the agreement above does test the mask
            os.environ["MTMD_PROBE_CAUSAL"] = "1"
            cl = os.path.join(tmp, name + ".causal.f32")
            probe(args, tmp, rgb + ["--size", str(SIZE), "--prompt", prompt, "-n", "1",
                                    "--all-logits-out", cl])
            os.environ.pop("MTMD_PROBE_CAUSAL")
            lc = f32(cl, 512)
            rc = np.abs(lc - ref).max(axis=1) / np.abs(ref).max(axis=1)
            c["control_causal_image_logits_rel_max_image_positions"] = float(rc[img_pos].max())
            c["control_causal_image_argmax_equal_positions"] = int(
                (lc.argmax(1) == ref.argmax(1)).sum())
        if rgb:
            own = probe(args, tmp, sum((["--image", os.path.join(TINY, im)]
                                        for im in chat["images"]), [])
                        + ["--prompt", prompt, "-n", str(N_PREDICT)])
            c["llamacpp_own_preproc_greedy"] = own["generated_ids"]
        c["greedy_equal"] = c["llamacpp_greedy"] == c["inferd_greedy"]
        res["chats"][name] = c
    summary(res)
    if args.keep:
        print("files kept in " + tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(res, f, indent=1)


def summary(res):
    g = lambda x: "-" if x is None else "%.2g" % x  # noqa: E731
    for name, r in res["images"].items():
        p = r["pixels"]
        print("%s (%dx%d %s): inferd vs transformers %s; llama.cpp on inferd's pixels vs inferd %s "
              "(no flash %s); llama.cpp's own preprocessing vs inferd %s — its picture (resized to "
              "%dx%d, padded) differs in %.0f%% of pixels, mean |d| %.1f; emulated picture vs "
              "llama.cpp's %s" % (name, p["size"][0], p["size"][1], p["mode"],
                                  g(r["inferd_vs_transformers"]),
                                  g(r["llamacpp_same_pixels_vs_inferd"]),
                                  g(r["llamacpp_same_pixels_vs_inferd_no_flash"]),
                                  g(r["llamacpp_own_preproc_vs_inferd"]),
                                  p["llamacpp_resized_to"][0], p["llamacpp_resized_to"][1],
                                  100 * p["share_differing"], p["mean_abs_diff"],
                                  g(r["emulated_llamacpp_preproc_vs_llamacpp_own"])))
        e = r["llamacpp_no_flash_vs_transformers_with_ggml_roundings"]
        if e:
            print("  ggml's roundings emulated: " + ", ".join("%s %s" % (k, g(v)) for k, v in e.items()))
    for name, c in res["chats"].items():
        print("%s: %d prompt ids equal %s (inferd %s); llama.cpp logits vs transformers' max %s "
              "(text positions %s, image positions %s), argmax equal at %d/%d; greedy llama.cpp %s "
              "inferd %s%s" % (name, c["n_prompt"], c["prompt_ids_equal"],
                               c["inferd_prompt_ids_equal"], g(c["logits_rel_max"]),
                               g(c["logits_rel_max_text_positions"]),
                               g(c["logits_rel_max_image_positions"]),
                               c["argmax_equal_positions"], c["n_prompt"], c["llamacpp_greedy"],
                               c["inferd_greedy"],
                               "; llama.cpp's own preprocessing %s" % c["llamacpp_own_preproc_greedy"]
                               if "llamacpp_own_preproc_greedy" in c else ""))
        if "control_causal_image_argmax_equal_positions" in c:
            print("  control, image tokens causal in llama.cpp: image positions %s, argmax equal "
                  "at %d/%d" % (g(c["control_causal_image_logits_rel_max_image_positions"]),
                                c["control_causal_image_argmax_equal_positions"], c["n_prompt"]))


def probe_text(args, prompt, al):
    """A chat without images (mtmd_probe --text-only)."""
    out = run([args.probe, "--model", TEXT, "--mmproj", MMPROJ, "--threads", "1",
               "--text-only", "--prompt", prompt, "-n", str(N_PREDICT), "--all-logits-out", al])
    return json.loads(out.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
