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
      token_type_ids given), for the prefill side of issue 28;
  tokenizer.json, tokenizer_config.json, chat_template.jinja,
      processor_config.json: a tokenizer of Gemma 3's kind (tokenizer.json of
      SentencePiece-style BPE over characters, " " → "▁", byte fallback,
      Gemma's user-defined newline runs) with the 512 ids of the model —
      pad 0, eos 1, bos 2, unk 3, mask 4, <start_of_turn> 5, <end_of_turn> 6,
      "\n" x1..4 7-10, <0x00>..<0xFF> 11-266, "▁" and printable ASCII,
      147 merges learnt from CORPUS, then <start_of_image> 509,
      <end_of_image> 510, <image_soft_token> 511 — and gemma-3-4b-it's chat
      template, saved by a Gemma3Processor (image_seq_length 16) as
      transformers 5 saves one; generation_config.json stops on <eos> and
      <end_of_turn> as gemma-3-4b-it's does;
  hd64/: a variant with a text head_dim of 64 for the CUDA backend (make_hd64);
  refs2.safetensors + chat_refs.json: for the chats of CHATS (text only, one
      image, two images, system + image + a second turn), what Gemma3Processor
      (the PIL image processor, no pan-and-scan) and apply_chat_template
      (add_generation_prompt) give: <chat>_input_ids, <chat>_token_type_ids,
      greedy generation of N_GEN tokens (<chat>_gen_ids) with each step's
      logits (<chat>_gen_logits: row 0 is the last prompt position's), for
      the text-only chat the logits of every prompt position
      (text_prompt_logits); chat_refs.json: the messages, image files,
      rendered prompt and token counts of each chat, and the tokenizer's ids
      for the texts of TOKENIZE.

The text vocabulary is 512 ids, so the special ids are the tiny config's
own: boi 509, eoi 510, image 511 (Gemma 3 4B's 255999, 256000, 262144 would
need a 262k-row embedding: tens of MB). The random text model repeats the
last prompt token under greedy decoding (its tied embedding's self-logit
dominates after two layers: every chat generates "\n" x8, by margins of
~20 logits), so the generated ids are a weak check; the per-step logits are
the strong one (the image moves the last prompt position's logits by up
to 4).

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
from collections import Counter

import numpy as np
import torch
from PIL import Image
from safetensors.numpy import save_file
from safetensors.torch import load_file
from transformers import (AddedToken, Gemma3Config, Gemma3ForConditionalGeneration, Gemma3Processor,
                          GemmaTokenizer)

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
N_GEN = 8

# The tokenizer (Gemma 3's kind: tokenizer.json of SentencePiece-style BPE over characters,
# " " → "▁", byte fallback; made by transformers' GemmaTokenizer). Ids: Gemma's specials in
# Gemma's order (pad 0, eos 1, bos 2, unk 3, mask 4) and its turn markers, its user-defined
# newline runs, the 256 byte pieces, "▁" and printable ASCII, merges learnt from CORPUS, the
# image tokens last.
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"]
EOS, BOS, EOT = 1, 2, 6
NEWLINES = ["\n" * k for k in range(1, 5)]
BYTES = [f"<0x{b:02X}>" for b in range(256)]
ALPHABET = ["\u2581"] + [chr(c) for c in range(33, 127)]
IMAGE_TOKENS = ["<start_of_image>", "<end_of_image>", "<image_soft_token>"]
N_MERGES = VOCAB - len(SPECIALS) - len(NEWLINES) - len(BYTES) - len(ALPHABET) - len(IMAGE_TOKENS)
CORPUS = """The picture shows a small red house beside a green field under a blue sky.
A white cat sits on the wall and looks at the camera. What is in this image?
Describe the image in one sentence. The colours are bright: red, green, blue,
yellow and orange. There are two trees on the left and a road on the right.
Is there a person in the photo? No, there is only the cat. How many windows
does the house have? It has four windows and one door. The light comes from
the top left, so the shadows fall to the right. This is a photograph taken
in the morning. Compare the two images: the first one is wide and the second
one is tall. Both pictures are noisy, with random pixels of every colour.
Tell me what you see, then answer the question about the second picture.
Thank you! Here is another image for you to look at.
"""

# Gemma 3's chat template as google/gemma-3-4b-it's tokenizer_config.json has it (image parts
# become <start_of_image>): the one the chat-template goldens use.
sys.path.insert(0, os.path.join(HERE, "..", "tests", "data", "tokenizer"))
from gen_chat_golden import TEMPLATES  # noqa: E402

CHAT_TEMPLATE = TEMPLATES["gemma3"][3]

# The chat requests of refs2.safetensors / chat_refs.json, in transformers' message form: an
# image part names its file ({"type": "image", "image": "image0.png"}).
CHATS = {
    "text": [{"role": "user", "content": "What colour is the sky in the picture?"}],
    "one": [{"role": "user", "content": [
        {"type": "image", "image": "image0.png"},
        {"type": "text", "text": "Describe this image in one sentence."}]}],
    "two": [{"role": "user", "content": [
        {"type": "text", "text": "Compare the two images:"},
        {"type": "image", "image": "image0.png"},
        {"type": "image", "image": "image1.png"},
        {"type": "text", "text": "Which one is tall?"}]}],
    "turns": [
        {"role": "system", "content": "You answer in one sentence."},
        {"role": "user", "content": [
            {"type": "image", "image": "image1.png"},
            {"type": "text", "text": "What is in this image?"}]},
        {"role": "assistant", "content": "A white cat sits on the wall."},
        {"role": "user", "content": "How many windows does the house have?"}],
}

# Texts whose ids (special text parsed, no BOS added) chat_refs.json records: merges, byte
# fallback (accents, a tab, a 4-byte character), digits, runs of spaces and of newlines (the
# user-defined pieces, longest first), special tokens inside text.
TOKENIZE = [
    "Hello world, the picture!",
    " A leading space and  two\tspaces",
    "h\u00e9llo w\u00f6rld 1234 \u2713 \U0001F600",
    "line\n\n\nbreaks\n\n\n\n\nfive\n",
    "<start_of_turn>user\n<start_of_image><image_soft_token><end_of_image>x<end_of_turn>",
]

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


def train_merges(text, n):
    """n BPE merges learnt from text's words ("▁" + word, as Gemma's pieces begin): each step
    merges the most frequent adjacent pair, the smallest pair on a tie; never a pair whose
    right part starts a word. Plain Python, so no library version changes the vocabulary."""
    words = Counter(tuple("\u2581" + w) for line in text.split("\n") for w in line.split(" ") if w)
    merges = []
    for _ in range(n):
        pairs = Counter()
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                if not b.startswith("\u2581"):
                    pairs[a, b] += c
        (a, b), _count = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))
        merges.append((a, b))
        merged = Counter()
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if w[i:i + 2] == (a, b):
                    out.append(a + b)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] += c
        words = merged
    return merges


def make_tokenizer(out):
    """tokenizer.json, tokenizer_config.json, chat_template.jinja and processor_config.json
    (transformers 5's save_pretrained of a Gemma3Processor); returns the processor with the PIL
    image processor."""
    merges = train_merges(CORPUS, N_MERGES)
    pieces = SPECIALS + NEWLINES + BYTES + ALPHABET + ["".join(m) for m in merges] + IMAGE_TOKENS
    assert len(pieces) == VOCAB == len(set(pieces)), "the vocabulary is not 512 distinct pieces"
    tok = GemmaTokenizer(vocab={p: i for i, p in enumerate(pieces)}, merges=merges,
                         add_bos_token=True, add_eos_token=False,
                         extra_special_tokens={"boi_token": IMAGE_TOKENS[0],
                                               "eoi_token": IMAGE_TOKENS[1],
                                               "image_token": IMAGE_TOKENS[2]})
    tok.add_tokens([AddedToken(t, special=True, normalized=False)
                    for t in SPECIALS + IMAGE_TOKENS], special_tokens=True)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in NEWLINES])
    assert (len(tok), tok.bos_token_id, tok.eos_token_id, tok.boi_token_id, tok.image_token_id) == (
        VOCAB, BOS, EOS, BOI, IMG)
    images = Processor(**{k: v for k, v in PREPROCESSOR.items() if k != "image_processor_type"})
    proc = Gemma3Processor(image_processor=images, tokenizer=tok, chat_template=CHAT_TEMPLATE,
                           image_seq_length=TOKENS)
    proc.save_pretrained(out)
    return proc


def chat_refs(model, proc, out):
    """For each of CHATS: what apply_chat_template(tokenize=True, add_generation_prompt=True)
    gives (the PIL images passed in, so transparency is composited as convert_to_rgb does, not
    dropped as load_image's convert("RGB") would), the logits of every prompt position for the
    text-only chat, and greedy generation (do_sample False, eos [1, 6]) with each step's raw
    logits: gen_logits row 0 is the last prompt position's."""
    refs, meta = {}, {}
    for name, msgs in CHATS.items():
        files = [p["image"] for m in msgs if isinstance(m["content"], list)
                 for p in m["content"] if p["type"] == "image"]
        text = proc.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        kw = {"images": [Image.open(os.path.join(out, f)) for f in files]} if files else {}
        inp = proc.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True,
                                       return_dict=True, return_tensors="pt", processor_kwargs=kw)
        assert inp["input_ids"][0, 0] == BOS and inp["input_ids"][0, 1] != BOS, "one BOS"
        with torch.no_grad():
            gen = model.generate(**inp, max_new_tokens=N_GEN, do_sample=False,
                                 output_logits=True, return_dict_in_generate=True)
            if not files:
                refs[f"{name}_prompt_logits"] = model(**inp).logits[0].numpy().astype(np.float32)
        n = inp["input_ids"].shape[1]
        refs[f"{name}_input_ids"] = inp["input_ids"][0].numpy().astype(np.int32)
        refs[f"{name}_token_type_ids"] = inp["token_type_ids"][0].numpy().astype(np.int32)
        refs[f"{name}_gen_ids"] = gen.sequences[0, n:].numpy().astype(np.int32)
        refs[f"{name}_gen_logits"] = torch.cat(gen.logits).numpy().astype(np.float32)
        meta[name] = {"messages": msgs, "images": files, "prompt": text,
                      "prompt_tokens": n, "completion_tokens": int(gen.sequences.shape[1] - n)}
    save_file(refs, os.path.join(out, "refs2.safetensors"))
    toks = [{"text": t, "ids": proc.tokenizer(t, add_special_tokens=False)["input_ids"]}
            for t in TOKENIZE]
    with open(os.path.join(out, "chat_refs.json"), "w") as f:
        json.dump({"max_tokens": N_GEN, "chats": meta, "tokenize": toks}, f, indent=1,
                  ensure_ascii=False)
        f.write("\n")


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
    model.generation_config.eos_token_id = [EOS, EOT]  # as gemma-3-4b-it's: <eos>, <end_of_turn>
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
    proc = make_tokenizer(out)
    chat_refs(model, proc, out)
    for name, dtype in (("bf16", torch.bfloat16), ("f16", torch.float16)):
        half = Gemma3ForConditionalGeneration(cfg).eval()
        half.load_state_dict(model.state_dict())
        half = half.to(dtype)
        half.generation_config.eos_token_id = [EOS, EOT]
        half.save_pretrained(os.path.join(out, name), safe_serialization=True)
        half = half.float()  # 16-bit weights, f32 compute: what inferd's CPU backend does
        for i in range(2):
            refs[f"{name}_vision_{i}"], refs[f"{name}_features_{i}"] = vision_refs(
                half, refs[f"pixel_values_{i}"])
    save_file(refs, os.path.join(out, "refs.safetensors"))
    make_hd64(out, proc)


HD64 = "hd64"


def make_hd64(out, proc):
    """hd64/: the same kind of model with a text head_dim of 64, the CUDA backend's smallest
    attention specialization (its kernels take 64/128/256; the main model's 32 is CPU only),
    so the oracle runs end to end on the CUDA backend (test_vision_cuda_emu's prompt cases).
    Its own seeded weights (config.json, model.safetensors), the main directory's tokenizer,
    template and processor files (copied: servable), and refs.safetensors: the tower output
    and features of both images (their pixel values are the main refs'), the mixed prompt's logits (prompt_ids, token_type_ids,
    prompt_logits as refs.safetensors'), and for the one- and two-image chats of CHATS their
    input_ids, token_type_ids, greedy gen_ids and every step's gen_logits."""
    d = os.path.join(out, HD64)
    os.makedirs(d, exist_ok=True)
    conf = json.loads(json.dumps(CONFIG))
    conf["text_config"].update(head_dim=64, query_pre_attn_scalar=64)
    gen = torch.Generator().manual_seed(SEED + 64)
    cfg = Gemma3Config(**{k: v for k, v in conf.items()
                          if k not in ("architectures", "model_type")})
    cfg.architectures = conf["architectures"]
    cfg._attn_implementation = "eager"
    model = Gemma3ForConditionalGeneration(cfg).float().eval()
    randomize(model, gen)
    model.generation_config.eos_token_id = [EOS, EOT]
    model.save_pretrained(d, safe_serialization=True)
    for rel in ("preprocessor_config.json", "tokenizer.json", "tokenizer_config.json",
                "chat_template.jinja", "processor_config.json"):
        with open(os.path.join(out, rel), "rb") as f, open(os.path.join(d, rel), "wb") as g:
            g.write(f.read())
    refs = {}
    images = Processor(**{k: v for k, v in PREPROCESSOR.items() if k != "image_processor_type"})
    pvs = [pixel_values(os.path.join(out, f"image{i}.png"), images) for i in range(2)]
    for i in range(2):  # the pixel values are the main refs.safetensors' pixel_values_i
        refs[f"vision_{i}"], refs[f"features_{i}"] = vision_refs(model, pvs[i])
    refs["prompt_ids"], refs["token_type_ids"], refs["prompt_logits"] = prompt_refs(model, pvs[0])
    for name in ("one", "two"):
        msgs = CHATS[name]
        files = [p["image"] for m in msgs if isinstance(m["content"], list)
                 for p in m["content"] if p["type"] == "image"]
        kw = {"images": [Image.open(os.path.join(out, f)) for f in files]}
        inp = proc.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True,
                                       return_dict=True, return_tensors="pt", processor_kwargs=kw)
        with torch.no_grad():
            g = model.generate(**inp, max_new_tokens=N_GEN, do_sample=False, output_logits=True,
                               return_dict_in_generate=True)
        n = inp["input_ids"].shape[1]
        refs[f"{name}_input_ids"] = inp["input_ids"][0].numpy().astype(np.int32)
        refs[f"{name}_token_type_ids"] = inp["token_type_ids"][0].numpy().astype(np.int32)
        refs[f"{name}_gen_ids"] = g.sequences[0, n:].numpy().astype(np.int32)
        refs[f"{name}_gen_logits"] = torch.cat(g.logits).numpy().astype(np.float32)
    save_file(refs, os.path.join(d, "refs.safetensors"))


def check(committed):
    with tempfile.TemporaryDirectory(prefix="tiny-gemma3-vision-") as tmp:
        make(tmp)
        bad = 0
        for rel in ("model.safetensors", "bf16/model.safetensors", "f16/model.safetensors",
                    "refs.safetensors", "refs2.safetensors", "hd64/model.safetensors",
                    "hd64/refs.safetensors"):
            a, b = load_file(os.path.join(committed, rel)), load_file(os.path.join(tmp, rel))
            if sorted(a) != sorted(b):
                print(f"{rel}: tensor names differ", file=sys.stderr)
                bad += 1
                continue
            for k in a:
                exact = (not rel.startswith("refs") or k.endswith("_ids")
                         or k.startswith(("pixel", "prompt_ids", "token")))
                x, y = a[k].double().numpy(), b[k].double().numpy()
                err = np.max(np.abs(x - y) / np.maximum(np.abs(x), 1e-3)) if x.size else 0
                if (exact and not np.array_equal(x, y)) or err > 1e-6:
                    print(f"{rel}: {k}: max rel diff {err:.3g}", file=sys.stderr)
                    bad += 1
        for rel in ("image0.png", "image1.png", "preprocessor_config.json", "tokenizer.json",
                    "tokenizer_config.json", "chat_template.jinja", "processor_config.json",
                    "chat_refs.json", "generation_config.json", "hd64/config.json",
                    "hd64/tokenizer.json"):
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
