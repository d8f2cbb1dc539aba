#!/usr/bin/env python3
"""Makes tests/data/tiny-gemma3-vision: a tiny random-weight
Gemma3ForConditionalGeneration (SigLIP tower + projector + Gemma 3 text
model) and its reference outputs from transformers, so CI checks inferd's
vision tower without torch (docs/vision.md, "Oracle").

    python tools/make_tiny_gemma3_vision.py [--out DIR] [--check]

Writes (f32 weights, a few hundred KB in all):
  config.json, model.safetensors, preprocessor_config.json (transformers'
      save_pretrained; 112x112 images, patch 14: an 8x8 patch grid, 2 layers,
      width 64, 4 heads, pooled 2x2 to 16 tokens, text width 64);
  bf16/, f16/: the same model with bf16 / f16 weights (config.json,
      model.safetensors);
  image0.png (97x61 RGB), image1.png (40x90 RGBA): the test images;
  refs.safetensors: for image i, pixel_values_i [3, 112, 112] (the PIL
      processor's), vision_i [64, 64] (the tower's last_hidden_state, post
      layernorm included), features_i [16, 64] (get_image_features: pooled,
      normed, projected), bf16_vision_i / bf16_features_i and f16_… (the
      16-bit models, computed in f32 on their 16-bit weights); and a mixed
      text+image prompt:
      prompt_ids [n] (int32), token_type_ids [n] (1 = image token) and
      prompt_logits [n, vocab] (eager attention, the processor's
      token_type_ids given), for the prefill side of issue 28.

The text vocabulary is 512 ids, so the special ids are the tiny config's
own: boi 509, eoi 510, image 511 (Gemma 3 4B's 255999, 256000, 262144 would
need a 262k-row embedding: tens of MB).

Random weights: every parameter drawn from one seeded generator (matrices
U(-a, a) with a = sqrt(3 / fan_in); LayerNorm weights 1 + U(-0.1, 0.1);
Gemma RMSNorm weights and biases U(-0.1, 0.1); position embeddings
U(-0.5, 0.5)), so that no layer is the identity. --check recomputes
everything in a temporary directory and compares it with the committed
files (weights and inputs bit for bit, outputs within 1e-6 relative): run it
after a torch or transformers upgrade. Needs torch (CPU is enough) and
transformers 5; the project venv has no torch: use
~/.cache/inferd/torch-venv (docs/vision.md).
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np
import torch
from PIL import Image
from safetensors.numpy import save_file
from safetensors.torch import load_file
from transformers import Gemma3Config, Gemma3ForConditionalGeneration

try:  # transformers 5: the PIL backend has its own class
    from transformers.models.gemma3.image_processing_pil_gemma3 import (
        Gemma3ImageProcessorPil as Processor)
except ImportError:  # 4.x
    from transformers import Gemma3ImageProcessor as Processor

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "..", "tests", "data", "tiny-gemma3-vision")
SEED = 28
IMAGE = 112
VOCAB, BOI, EOI, IMG = 512, 509, 510, 511
TOKENS = 16

CONFIG = {
    "architectures": ["Gemma3ForConditionalGeneration"],
    "model_type": "gemma3",
    "boi_token_index": BOI,
    "eoi_token_index": EOI,
    "image_token_index": IMG,
    "mm_tokens_per_image": TOKENS,
    "text_config": {
        "model_type": "gemma3_text", "vocab_size": VOCAB, "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
        "num_key_value_heads": 1, "head_dim": 32, "max_position_embeddings": 256,
        "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention"],
        "query_pre_attn_scalar": 32, "rms_norm_eps": 1e-6,
        "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
    },
    "vision_config": {
        "model_type": "siglip_vision_model", "hidden_size": 64, "intermediate_size": 96,
        "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": IMAGE,
        "patch_size": 14, "layer_norm_eps": 1e-6, "hidden_act": "gelu_pytorch_tanh",
        "vision_use_head": False,
    },
}

PREPROCESSOR = {
    "image_processor_type": "Gemma3ImageProcessor", "do_convert_rgb": True,
    "do_normalize": True, "do_pan_and_scan": False, "do_rescale": True,
    "do_resize": True, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
    "resample": 2, "rescale_factor": 0.00392156862745098,
    "size": {"height": IMAGE, "width": IMAGE}, "image_seq_length": TOKENS,
}


def randomize(model, gen):
    """Every parameter from gen, in name order (see the file comment)."""
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            u = torch.rand(p.shape, generator=gen, dtype=torch.float64) * 2 - 1
            if "position_embedding" in name:
                v = 0.5 * u
            elif name.endswith("bias"):
                v = 0.1 * u
            elif "layer_norm" in name or "post_layernorm" in name:
                v = 1 + 0.1 * u
            elif p.dim() == 1:  # Gemma RMSNorm: 1 + w
                v = 0.1 * u
            elif "mm_input_projection" in name:
                v = u * (3.0 / p.shape[0]) ** 0.5
            elif "embed_tokens" in name:
                v = u
            else:  # [out, in...] fan_in = the rest
                v = u * (3.0 / (p.numel() // p.shape[0])) ** 0.5
            p.copy_(v.to(p.dtype))


def make_images(out):
    rng = np.random.default_rng(SEED)
    y, x = np.mgrid[0:61, 0:97]
    a = np.stack([x * 255 // 96, y * 255 // 60, (x + y) % 256], -1).astype(np.uint8)
    a = np.clip(a.astype(int) + rng.integers(-40, 40, a.shape), 0, 255).astype(np.uint8)
    Image.fromarray(a, "RGB").save(os.path.join(out, "image0.png"))
    b = rng.integers(0, 256, (90, 40, 4), dtype=np.uint8)
    b[..., 3] = np.where(b[..., 3] < 64, 0, b[..., 3])
    Image.fromarray(b, "RGBA").save(os.path.join(out, "image1.png"))


def pixel_values(path, proc):
    img = Image.open(path)
    return proc(images=[img], return_tensors="np")["pixel_values"][0].astype(np.float32)


def vision_refs(model, pv):
    with torch.no_grad():
        t = torch.from_numpy(pv)[None]
        out = model.model.vision_tower(pixel_values=t).last_hidden_state
        feats = model.model.multi_modal_projector(out)
    return out[0].numpy().astype(np.float32), feats[0].numpy().astype(np.float32)


def prompt_refs(model, pv):
    ids = [2, 17, 33, 108, BOI] + [IMG] * TOKENS + [EOI, 44, 250, 7]
    tt = [1 if i == IMG else 0 for i in ids]
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), pixel_values=torch.from_numpy(pv)[None],
                    token_type_ids=torch.tensor([tt]), attention_mask=torch.ones(1, len(ids),
                                                                                  dtype=torch.long))
    return (np.array(ids, np.int32), np.array(tt, np.int32),
            out.logits[0].numpy().astype(np.float32))


def make(out):
    for sub in ("bf16", "f16"):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    cfg = Gemma3Config(**{k: v for k, v in CONFIG.items() if k not in ("architectures", "model_type")})
    cfg.architectures = CONFIG["architectures"]
    cfg._attn_implementation = "eager"
    model = Gemma3ForConditionalGeneration(cfg).float().eval()
    randomize(model, gen)
    model.save_pretrained(out, safe_serialization=True)
    with open(os.path.join(out, "preprocessor_config.json"), "w") as f:
        json.dump(PREPROCESSOR, f, indent=2)
    make_images(out)
    proc = Processor(**{k: v for k, v in PREPROCESSOR.items() if k != "image_processor_type"})
    refs = {}
    for i in range(2):
        pv = pixel_values(os.path.join(out, f"image{i}.png"), proc)
        refs[f"pixel_values_{i}"] = pv
        refs[f"vision_{i}"], refs[f"features_{i}"] = vision_refs(model, pv)
    refs["prompt_ids"], refs["token_type_ids"], refs["prompt_logits"] = prompt_refs(
        model, refs["pixel_values_0"])
    for name, dtype in (("bf16", torch.bfloat16), ("f16", torch.float16)):
        half = Gemma3ForConditionalGeneration(cfg).eval()
        half.load_state_dict(model.state_dict())
        half = half.to(dtype)
        half.save_pretrained(os.path.join(out, name), safe_serialization=True)
        half = half.float()  # 16-bit weights, f32 compute: what inferd's CPU backend does
        for i in range(2):
            refs[f"{name}_vision_{i}"], refs[f"{name}_features_{i}"] = vision_refs(
                half, refs[f"pixel_values_{i}"])
    save_file(refs, os.path.join(out, "refs.safetensors"))


def check(committed):
    with tempfile.TemporaryDirectory(prefix="tiny-gemma3-vision-") as tmp:
        make(tmp)
        bad = 0
        for rel in ("model.safetensors", "bf16/model.safetensors", "f16/model.safetensors",
                    "refs.safetensors"):
            a, b = load_file(os.path.join(committed, rel)), load_file(os.path.join(tmp, rel))
            if sorted(a) != sorted(b):
                print(f"{rel}: tensor names differ", file=sys.stderr)
                bad += 1
                continue
            for k in a:
                exact = rel != "refs.safetensors" or k.startswith(("pixel", "prompt_ids", "token"))
                x, y = a[k].double().numpy(), b[k].double().numpy()
                err = np.max(np.abs(x - y) / np.maximum(np.abs(x), 1e-3)) if x.size else 0
                if (exact and not np.array_equal(x, y)) or err > 1e-6:
                    print(f"{rel}: {k}: max rel diff {err:.3g}", file=sys.stderr)
                    bad += 1
        for rel in ("image0.png", "image1.png", "preprocessor_config.json"):
            if open(os.path.join(committed, rel), "rb").read() != open(os.path.join(tmp, rel), "rb").read():
                print(f"{rel}: differs", file=sys.stderr)
                bad += 1
    print("reproduced" if not bad else f"{bad} differences")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--check", action="store_true", help="compare a fresh run with --out")
    a = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    if a.check:
        return check(a.out)
    make(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
