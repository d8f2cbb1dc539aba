#!/usr/bin/env python3
"""A random-weight mmproj GGUF in google/gemma-3-4b's vision shape, made by llama.cpp's own
converter, so that inferd (bench_vision --mmproj) and llama.cpp (libmtmd: bench/mtmd_probe.cpp)
time the same file (issue 28 item 8; bench/vision_vs_mtmd.sh, docs/benchmarks.md "Vision tower"):

    ~/.cache/inferd/torch-venv/bin/python tools/make_gemma3_4b_mmproj.py \\
        --llama-cpp DIR [--out ~/.cache/inferd/shapes] [--outtype f16]

DIR is llama.cpp's source (the one tools/make_tiny_gemma3_gguf.py names). It builds a random
Gemma3ForConditionalGeneration whose vision tower is gemma-3-4b's (SigLIP at 896², patch 14,
27 layers, width 1152, MLP 4304, 16 heads; 256 tokens per image; projection to 2560) and whose
language model is cut to one small layer of width 2560 over the tiny model's 512-token
vocabulary (llama.cpp's mtmd needs a text model whose width is the projection's; only the
mmproj is timed), saves it in the published checkpoints' layout (tools/make_tiny_gemma3_gguf.py
explains why) and converts it:

    OUT/gemma-3-4b-vision-text1.gguf          the cut text model (f32, ~7 MB)
    OUT/mmproj-gemma-3-4b-random-OUTTYPE.gguf  the tower and projector (f16: ~0.8 GB)

Weights: torch's default init of the HF modules (seeded), as a trained tower's scale is
irrelevant to the encode time. Takes a few minutes and ~4 GB of memory.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file
from safetensors.torch import save_file as save_torch
from transformers import Gemma3Config, Gemma3ForConditionalGeneration

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_tiny_gemma3_gguf as tiny  # noqa: E402

TOK = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
       "preprocessor_config.json", "processor_config.json", "generation_config.json")


def config():
    return Gemma3Config(
        vision_config={"model_type": "siglip_vision_model", "hidden_size": 1152,
                       "intermediate_size": 4304, "num_hidden_layers": 27,
                       "num_attention_heads": 16, "image_size": 896, "patch_size": 14,
                       "layer_norm_eps": 1e-6, "hidden_act": "gelu_pytorch_tanh",
                       "vision_use_head": False},
        text_config={"model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 256,
                     "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
                     "head_dim": 64, "vocab_size": 512, "max_position_embeddings": 2048,
                     "sliding_window": 1024, "layer_types": ["sliding_attention"],
                     "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0},
        mm_tokens_per_image=256, boi_token_index=509, eoi_token_index=510,
        image_token_index=511, tie_word_embeddings=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-cpp", required=True)
    ap.add_argument("--out", default=os.path.expanduser("~/.cache/inferd/shapes"))
    ap.add_argument("--outtype", default="f16", choices=("f16", "f32", "bf16", "q8_0"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(28)
    with tempfile.TemporaryDirectory(prefix="gemma3-4b-mmproj-") as src:
        model = Gemma3ForConditionalGeneration(config()).eval()
        model.save_pretrained(src)
        del model
        for f in TOK:
            shutil.copy(os.path.join(tiny.TINY, f), src)
        # the processor of google/gemma-3-4b: 896², 256 tokens (the converter derives the
        # pooling from image_seq_length: the tiny model's 16 would make it 16 tokens)
        for f in ("preprocessor_config.json", "processor_config.json"):
            with open(os.path.join(src, f), encoding="utf-8") as fh:
                pc = json.load(fh)
            for d in (pc, pc.get("image_processor", {})):
                if "size" in d:
                    d["size"] = {"height": 896, "width": 896}
                if "image_seq_length" in d:
                    d["image_seq_length"] = 256
            with open(os.path.join(src, f), "w", encoding="utf-8") as fh:
                json.dump(pc, fh, indent=2)
        # the published layout: vision_tower.vision_model.*, one safetensors file
        w = {}
        for name in sorted(os.listdir(src)):
            if name.endswith(".safetensors"):
                w.update(load_file(os.path.join(src, name)))
                os.remove(os.path.join(src, name))
        idx = os.path.join(src, "model.safetensors.index.json")
        if os.path.exists(idx):
            os.remove(idx)
        out = {}
        for k, v in w.items():
            if k.startswith("model."):
                k = k[len("model."):]
            if k.startswith("language_model.") and not k.startswith("language_model.model."):
                k = "language_model.model." + k[len("language_model."):]
            if k.startswith("vision_tower.") and not k.startswith("vision_tower.vision_model."):
                k = "vision_tower.vision_model." + k[len("vision_tower."):]
            out[k] = v.contiguous()
        save_torch(out, os.path.join(src, "model.safetensors"), metadata={"format": "pt"})
        del w, out
        tiny.write_spm(src)
        conv = os.path.join(args.llama_cpp, "convert_hf_to_gguf.py")
        text = os.path.join(args.out, "gemma-3-4b-vision-text1.gguf")
        mm = os.path.join(args.out, "mmproj-gemma-3-4b-random-%s.gguf" % args.outtype)
        for cmd in ([sys.executable, conv, src, "--outtype", "f32", "--outfile", text],
                    [sys.executable, conv, src, "--outtype", args.outtype, "--mmproj",
                     "--outfile", mm]):
            print("+ " + " ".join(cmd), flush=True)
            subprocess.run(cmd, check=True)
    sys.path.insert(0, os.path.join(args.llama_cpp, "gguf-py"))
    import gguf
    f = gguf.GGUFReader(mm).fields.get("clip.vision.projector.scale_factor")
    assert f is None or int(f.parts[-1][0]) == 4, "pooling is not 4×4 (256 tokens)"
    print(text)
    print(mm)


if __name__ == "__main__":
    main()
