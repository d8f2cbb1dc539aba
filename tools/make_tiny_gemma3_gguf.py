#!/usr/bin/env python3
"""Converts the tiny random Gemma 3 vision model (tests/data/tiny-gemma3-vision, made by
tools/make_tiny_gemma3_vision.py) with llama.cpp's own converter into a text GGUF and an
mmproj GGUF, and computes the transformers references they are checked against
(tests/data/tiny-gemma3-vision/gguf/, docs/vision.md "An mmproj made by llama.cpp"):

    ~/.cache/inferd/torch-venv/bin/python tools/make_tiny_gemma3_gguf.py \\
        --llama-cpp DIR [--out DIR] [--check]

DIR is llama.cpp's source; the committed files were made with the one vendored in the PyPI
sdist of llama-cpp-python 0.3.36 (vendor/llama.cpp, git commit
0c1e57098bba43ac29e6e3b677cdceebdd22334f, "webgpu: fix SSM_SCAN binding aliasing (#29750)"):

    pip download --no-binary :all: --no-deps llama-cpp-python==0.3.36 -d ~/.cache/inferd/sdist
    tar xzf ~/.cache/inferd/sdist/llama_cpp_python-0.3.36.tar.gz -C ~/.cache/inferd/sdist
    DIR=~/.cache/inferd/sdist/llama_cpp_python-0.3.36/vendor/llama.cpp

with torch 2.15.0 (CPU is enough), transformers 5.25.0, sentencepiece and protobuf in the venv
(the converter imports its own gguf-py from DIR). The converter runs as

    python DIR/convert_hf_to_gguf.py SRC --outtype f32 --outfile tiny-gemma3-text-f32.gguf
    python DIR/convert_hf_to_gguf.py SRC --outtype f32 --mmproj \\
        --outfile mmproj-tiny-gemma3-f32.gguf
    python DIR/convert_hf_to_gguf.py SRC --outtype q8_0 --mmproj \\
        --outfile mmproj-tiny-gemma3-q8_0.gguf

on SRC, a temporary copy of the tiny directory in the layout of the published Gemma 3
checkpoints (google/gemma-3-4b-it), which is what the converter knows:

  * the tower's tensors under "vision_tower.vision_model." (transformers 5 saves them under
    "vision_tower."; the converter's tensor map has only the published names: "Can not map
    tensor 'vision_tower.embeddings.patch_embedding.bias'" otherwise), the same values;
  * a SentencePiece tokenizer.model beside tokenizer.json (published Gemma 3 ships one; without
    it the converter takes the BPE path, whose pre-tokenizer hash of our tiny tokenizer it does
    not know: "BPE pre-tokenizer was not recognized"). It holds the same 512 pieces with the
    same ids: the specials as CONTROL (<unk> UNKNOWN), <0x00>..<0xFF> as BYTE, the newline runs
    USER_DEFINED, the others NORMAL with score -rank of the merge that makes them (single
    characters below every merge), BPE with byte fallback, no dummy prefix — so that
    SentencePiece's merge-by-score gives tokenizer.json's merge-by-rank on the test texts
    (the test checks the ids).

What the converter does to the values, and so what the references are (refs_gguf.safetensors):

  * mm.input_projection.weight is stored F16 whatever --outtype says (its tensor_force_quant):
    the references compute with that matrix rounded through f16 (the rest f32);
  * mm.soft_emb_norm.weight and the text model's RMSNorm weights get +1 (Gemma's 1 + w);
  * the text GGUF states no sliding-window layer pattern for Gemma 3: llama.cpp (and inferd's
    GGUF loader) take every 6th layer global, so both layers of the tiny model are local
    (window 8, RoPE base 10000) while the HF config makes layer 1 global (RoPE base 1e6). The
    logits references are transformers' with layer_types = [sliding, sliding]: the model the
    GGUF pair describes. The script checks its harness: the same code on the HF config gives
    refs2.safetensors' text_prompt_logits (within 1e-5), and position 0 agrees between both.

refs_gguf.safetensors: mmproj_features_i [16, 64] (get_image_features of pixel_values_i of
refs.safetensors), <chat>_input_ids, <chat>_logits [n, 512] (every prompt position) for each
chat of chat_refs.json (the images' features from the f16-rounded projection).

refs_gguf_q8_0.safetensors: mmproj_q8_0_features_i for the q8_0 mmproj (the converter makes the
12 attention and MLP matrices Q8_0, the rest as in the f32 file; references_q8_0 says how).

--check converts and computes again in a temporary directory and compares: the GGUFs' tensors
and metadata (but general.* names), the references within 1e-6 relative.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
from safetensors.numpy import save_file
from safetensors.torch import load_file
from safetensors.torch import save_file as save_torch
from transformers import Gemma3Config, Gemma3ForConditionalGeneration

HERE = os.path.dirname(os.path.abspath(__file__))
TINY = os.path.join(HERE, "..", "tests", "data", "tiny-gemma3-vision")
TEXT = "tiny-gemma3-text-f32.gguf"
MMPROJ = "mmproj-tiny-gemma3-f32.gguf"
MMPROJ_Q8 = "mmproj-tiny-gemma3-q8_0.gguf"
COPY = ("config.json", "generation_config.json", "preprocessor_config.json",
        "processor_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def published_layout(src):
    """SRC: the tiny model as google/gemma-3-4b-it lays its files out (see above)."""
    for f in COPY:
        shutil.copy(os.path.join(TINY, f), src)
    w = load_file(os.path.join(TINY, "model.safetensors"))
    out = {}
    for k, v in w.items():
        if k.startswith("vision_tower.") and not k.startswith("vision_tower.vision_model."):
            k = "vision_tower.vision_model." + k[len("vision_tower."):]
        out[k] = v.contiguous()
    save_torch(out, os.path.join(src, "model.safetensors"), metadata={"format": "pt"})
    write_spm(src)


def write_spm(src):
    """tokenizer.model with tokenizer.json's pieces and ids (see above)."""
    from sentencepiece import sentencepiece_model_pb2 as spm
    with open(os.path.join(TINY, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    vocab = dict(tj["model"]["vocab"])
    added = {t["content"]: t for t in tj["added_tokens"]}
    for t in tj["added_tokens"]:
        vocab[t["content"]] = t["id"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in tj["model"]["merges"]]
    rank = {a + b: r for r, (a, b) in enumerate(merges)}
    n = max(vocab.values()) + 1
    pieces = [None] * n
    for p, i in vocab.items():
        pieces[i] = p
    assert all(p is not None for p in pieces), "ids without a piece"
    m = spm.ModelProto()
    m.trainer_spec.model_type = spm.TrainerSpec.BPE
    m.trainer_spec.vocab_size = n
    m.trainer_spec.byte_fallback = True
    m.trainer_spec.unk_id, m.trainer_spec.bos_id, m.trainer_spec.eos_id = 3, 2, 1
    m.trainer_spec.pad_id = 0
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = False
    m.normalizer_spec.remove_extra_whitespaces = False
    m.normalizer_spec.escape_whitespaces = True
    for i, p in enumerate(pieces):
        sp = m.pieces.add()
        sp.piece = p
        if p in added and added[p]["special"]:
            sp.type = sp.UNKNOWN if p == "<unk>" else sp.CONTROL
            sp.score = 0.0
        elif p in added:
            sp.type = sp.USER_DEFINED
            sp.score = 0.0
        elif len(p) == 6 and p.startswith("<0x") and p.endswith(">"):
            sp.type = sp.BYTE
            sp.score = 0.0
        else:
            sp.type = sp.NORMAL
            sp.score = -float(rank[p]) if p in rank else -float(len(merges) + i)
    with open(os.path.join(src, "tokenizer.model"), "wb") as f:
        f.write(m.SerializeToString())


def convert(llama_cpp, src, out):
    conv = os.path.join(llama_cpp, "convert_hf_to_gguf.py")
    for outtype, extra, name in (("f32", [], TEXT), ("f32", ["--mmproj"], MMPROJ),
                                 ("q8_0", ["--mmproj"], MMPROJ_Q8)):
        cmd = [sys.executable, conv, src, "--outtype", outtype, *extra,
               "--outfile", os.path.join(out, name)]
        print("+ " + " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)


def load_refs(name):
    from safetensors.numpy import load_file as load_np
    return load_np(os.path.join(TINY, name))


def references(out):
    """refs_gguf.safetensors (see above)."""
    with open(os.path.join(TINY, "config.json")) as f:
        cfg = Gemma3Config(**{k: v for k, v in json.load(f).items()
                              if k not in ("architectures", "model_type")})
    n_layer = cfg.text_config.num_hidden_layers
    assert n_layer < 6, "the tiny model's layers are all local under llama.cpp's period-6 rule"
    cfg.text_config.layer_types = ["sliding_attention"] * n_layer
    cfg._attn_implementation = "eager"
    model = Gemma3ForConditionalGeneration.from_pretrained(
        TINY, config=cfg, dtype=torch.float32, attn_implementation="eager").eval()
    assert model.config.text_config.layer_types == ["sliding_attention"] * n_layer
    w = model.model.multi_modal_projector.mm_input_projection_weight
    with torch.no_grad():
        w.copy_(w.to(torch.float16).to(torch.float32))
    r1, r2 = load_refs("refs.safetensors"), load_refs("refs2.safetensors")
    with open(os.path.join(TINY, "chat_refs.json"), encoding="utf-8") as f:
        chats = json.load(f)["chats"]
    refs = {}
    with torch.no_grad():
        for i in range(2):
            pv = torch.from_numpy(r1[f"pixel_values_{i}"])[None]
            t = model.model.vision_tower(pixel_values=pv).last_hidden_state
            refs[f"mmproj_features_{i}"] = model.model.multi_modal_projector(t)[0].numpy()
        for name, c in chats.items():
            ids = r2[f"{name}_input_ids"]
            kw = {}
            if c["images"]:
                kw["pixel_values"] = torch.stack([
                    torch.from_numpy(r1["pixel_values_%d" % int(f[len("image"):-len(".png")])])
                    for f in c["images"]])
                kw["token_type_ids"] = torch.from_numpy(
                    r2[f"{name}_token_type_ids"].astype(np.int64))[None]
            x = torch.from_numpy(ids.astype(np.int64))[None]
            logits = model(input_ids=x, attention_mask=torch.ones_like(x), **kw).logits[0]
            refs[f"{name}_input_ids"] = ids.astype(np.int32)
            refs[f"{name}_logits"] = logits.numpy().astype(np.float32)
    # the harness itself: the same code on the HF config (layer 1 global) gives refs2's logits
    hf = Gemma3ForConditionalGeneration.from_pretrained(
        TINY, dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        x = torch.from_numpy(r2["text_input_ids"].astype(np.int64))[None]
        got = hf(input_ids=x, attention_mask=torch.ones_like(x)).logits[0].numpy()
    want = r2["text_prompt_logits"]
    d = np.abs(got - want).max() / np.abs(want).max()
    assert d < 1e-5, f"the HF config's text logits differ from refs2's by {d}"
    d0 = np.abs(refs["text_logits"][0] - want[0]).max() / np.abs(want[0]).max()
    assert d0 < 1e-5, f"position 0 (no rotation, no window) differs by {d0}"
    save_file({k: np.ascontiguousarray(v, dtype=v.dtype) for k, v in refs.items()},
              os.path.join(out, "refs_gguf.safetensors"))


def references_q8_0(out, llama_cpp):
    """refs_gguf_q8_0.safetensors: mmproj_q8_0_features_i, transformers' tower and projector with
    the Q8_0 file's weights dequantized (gguf-py's dequantize) and the input of every Q8_0 linear
    quantized as inferd's CPU backend does (kernels/cpu/qmatmul.h: per 32 elements of a row,
    d = max|x| / 127, q = round-half-even(x · (127 / max|x|)), x ≈ q · d), the F16 projection
    rounded through f16; so inferd's features on the q8_0 mmproj are checked tightly
    (test_vision's test_mmproj_llamacpp_q8_0), and their distance to the f32 file's is the
    8-bit error itself."""
    sys.path.insert(0, os.path.join(llama_cpp, "gguf-py"))
    import gguf
    from gguf.quants import dequantize
    model = Gemma3ForConditionalGeneration.from_pretrained(
        TINY, dtype=torch.float32, attn_implementation="eager").eval()
    vt = model.model.vision_tower
    parts = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
             "attn_v": "self_attn.v_proj", "attn_out": "self_attn.out_proj",
             "ffn_up": "mlp.fc1", "ffn_down": "mlp.fc2"}

    def qact(mod, inp):
        x = inp[0]
        xb = x.reshape(-1, 32)
        amax = xb.abs().amax(dim=1, keepdim=True)
        inv = torch.where(amax > 0, torch.tensor(127.0) / amax, torch.zeros_like(amax))
        return ((torch.round(xb * inv) * (amax / 127.0)).reshape(x.shape),)
    n = 0
    for t in gguf.GGUFReader(os.path.join(out, MMPROJ_Q8)).tensors:
        if t.tensor_type != gguf.GGMLQuantizationType.Q8_0:
            continue
        v, blk, layer, kind, _ = t.name.split(".")
        assert (v, blk, kind in parts) == ("v", "blk", True), t.name
        mod = vt.encoder.layers[int(layer)]
        for a in parts[kind].split("."):
            mod = getattr(mod, a)
        w = dequantize(t.data, t.tensor_type).reshape(tuple(mod.weight.shape))
        with torch.no_grad():
            mod.weight.copy_(torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32)))
        mod.register_forward_pre_hook(qact)
        n += 1
    assert n == 6 * len(vt.encoder.layers), f"{n} Q8_0 tensors"
    w = model.model.multi_modal_projector.mm_input_projection_weight
    r1 = load_refs("refs.safetensors")
    refs = {}
    with torch.no_grad():
        w.copy_(w.to(torch.float16).to(torch.float32))
        for i in range(2):
            pv = torch.from_numpy(r1[f"pixel_values_{i}"])[None]
            t = vt(pixel_values=pv).last_hidden_state
            refs[f"mmproj_q8_0_features_{i}"] = model.model.multi_modal_projector(t)[0].numpy()
    save_file({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in refs.items()},
              os.path.join(out, "refs_gguf_q8_0.safetensors"))


def make(llama_cpp, out):
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tiny-gemma3-gguf-") as tmp:
        src = os.path.join(tmp, "tiny-gemma3-vision")  # general.name comes from its name
        os.makedirs(src)
        published_layout(src)
        convert(llama_cpp, src, out)
    references(out)
    references_q8_0(out, llama_cpp)


def gguf_summary(path, llama_cpp):
    sys.path.insert(0, os.path.join(llama_cpp, "gguf-py"))
    import gguf
    r = gguf.GGUFReader(path)
    meta = {k: (f.types, b"".join(bytes(p) for p in f.parts[1:]))
            for k, f in r.fields.items() if not k.startswith("general.")}
    tens = {t.name: (t.tensor_type, bytes(np.ascontiguousarray(t.data).tobytes()))
            for t in r.tensors}
    return meta, tens


def check(llama_cpp, committed):
    with tempfile.TemporaryDirectory(prefix="tiny-gemma3-gguf-check-") as tmp:
        make(llama_cpp, tmp)
        bad = 0
        for name in (TEXT, MMPROJ, MMPROJ_Q8):
            a = gguf_summary(os.path.join(tmp, name), llama_cpp)
            b = gguf_summary(os.path.join(committed, name), llama_cpp)
            same = a == b
            print(("same      " if same else "DIFFERENT ") + name)
            bad += not same
        from safetensors.numpy import load_file as load_np
        for rname in ("refs_gguf.safetensors", "refs_gguf_q8_0.safetensors"):
            x = load_np(os.path.join(tmp, rname))
            y = load_np(os.path.join(committed, rname))
            before = bad
            for k in sorted(set(x) | set(y)):
                ok = k in x and k in y and x[k].shape == y[k].shape and (
                    np.array_equal(x[k], y[k]) if x[k].dtype != np.float32 else
                    np.abs(x[k] - y[k]).max() <= 1e-6 * max(1.0, np.abs(y[k]).max()))
                if not ok:
                    print("DIFFERENT %s %s" % (rname, k))
                    bad += 1
            print(rname + (" same" if bad == before else " differs"))
        return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-cpp", required=True, help="llama.cpp's source directory")
    ap.add_argument("--out", default=os.path.join(TINY, "gguf"))
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    if a.check:
        return check(a.llama_cpp, a.out)
    make(a.llama_cpp, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
