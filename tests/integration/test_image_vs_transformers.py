"""test_image_vs_transformers.py IMAGE_PREP — common/image against Pillow and transformers.

Builds a set of test images with Pillow (and a few by hand that Pillow cannot write:
16-bit RGB and grey + alpha PNGs, tRNS colours at every bit depth, palettes shorter than
their indices, GIFs without or with short colour maps, frames placed inside or past the
screen) — sizes, aspect ratios, every format and the modes that need conversion (alpha,
palette with and without transparency, grey, 1-bit, 16-bit, CMYK, animations) — and
checks, for each, with the C tool tests/tools/image_prep.c:
  decode: the RGB bytes equal transformers' convert_to_rgb(PIL.Image.open(f)) exactly, after
          load_image's PIL.ImageOps.exif_transpose (the EXIF orientation: every orientation,
          JPEG/PNG/WebP, byte orders and value types, XMP's tiff:Orientation);
  prep:   pixel_values equal Gemma3ImageProcessor's (its PIL backend) within 1e-6 (max abs),
          with google/gemma-3-4b-it's preprocessor_config.json, and with pan-and-scan on;
  resize: every PIL filter on a few sizes, and 48 random size pairs, equal PIL's
          Image.resize byte for byte (Pillow 13: both pass orders);
  truncations: a file of each format cut anywhere is refused or decoded as Pillow decodes it.
Prints one line per case and "N passed, N failed".
"""
import io
import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib

import numpy as np
from PIL import Image, ImageOps

try:
    from transformers.models.gemma3.image_processing_pil_gemma3 import (
        Gemma3ImageProcessorPil as Processor)
except ImportError:  # transformers 4.x: the slow processor is the PIL one
    from transformers import Gemma3ImageProcessor as Processor
from transformers.image_transforms import convert_to_rgb

# google/gemma-3-4b-it's preprocessor_config.json (the keys that matter)
GEMMA3 = {
    "do_convert_rgb": None, "do_normalize": True, "do_pan_and_scan": None,
    "do_rescale": True, "do_resize": True, "image_mean": [0.5, 0.5, 0.5],
    "image_processor_type": "Gemma3ImageProcessor", "image_seq_length": 256,
    "image_std": [0.5, 0.5, 0.5], "pan_and_scan_max_num_crops": 4,
    "pan_and_scan_min_crop_size": 256, "pan_and_scan_min_ratio_to_activate": 1.2,
    "processor_class": "Gemma3Processor", "resample": 2,
    "rescale_factor": 0.00392156862745098, "size": {"height": 896, "width": 896},
}


def rng_image(rng, w, h, mode):
    if mode in ("RGB", "RGBA", "CMYK", "LA"):
        bands = {"RGB": 3, "RGBA": 4, "CMYK": 4, "LA": 2}[mode]
        # smooth content plus noise, so lossy codecs and resizing see real structure
        y, x = np.mgrid[0:h, 0:w]
        base = np.stack([(x * 255 // max(w - 1, 1) + 37 * b) % 256 for b in range(bands)], -1)
        noise = rng.integers(0, 64, (h, w, bands))
        a = ((base + noise + (y[..., None] * 3)) % 256).astype(np.uint8)
        return Image.fromarray(a, mode)
    if mode == "L":
        return Image.fromarray(rng.integers(0, 256, (h, w), dtype=np.uint8), "L")
    if mode == "P":
        im = Image.fromarray(rng.integers(0, 40, (h, w), dtype=np.uint8), "L").convert("P")
        im.putpalette(list(rng.integers(0, 256, 40 * 3)))
        return im
    if mode == "1":
        return Image.fromarray(rng.integers(0, 2, (h, w), dtype=np.uint8) * 255, "L").convert("1")
    raise ValueError(mode)


def png_chunk(tag, data):
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))


def png_raw(w, h, depth, ctype, rows, extra=b""):
    """A PNG by hand: rows are bytes per scanline (filter 0 is prepended)."""
    ihdr = struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, 0)
    data = zlib.compress(b"".join(b"\0" + r for r in rows))
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + extra + png_chunk(b"IDAT", data)
            + png_chunk(b"IEND", b""))


def gif_placed(im, screen, pos, **kw):
    """A one-frame GIF of im whose logical screen and frame position are rewritten: the
    frame inside a larger screen, or reaching past a smaller one (Pillow grows the image)."""
    buf = io.BytesIO()
    im.save(buf, "GIF", **kw)
    b = bytearray(buf.getvalue())
    struct.pack_into("<HH", b, 6, *screen)
    i = 13 + (3 * 2 ** ((b[10] & 7) + 1) if b[10] & 0x80 else 0)
    while b[i] != 0x2C:  # skip extensions to the image descriptor
        i += 2
        while b[i]:
            i += b[i] + 1
        i += 1
    struct.pack_into("<HH", b, i + 1, *pos)
    return bytes(b)


def gif_short_map(data, bits=None):
    """data's global colour map cut to 2 ** (bits + 1) entries (indices past it stay), or
    dropped when bits is None."""
    b = bytearray(data)
    size = 3 * 2 ** ((b[10] & 7) + 1)
    if bits is None:
        b[10] &= 0x7F
        return bytes(b[:13] + b[13 + size:])
    b[10] = (b[10] & ~7) | bits
    return bytes(b[:13 + 3 * 2 ** (bits + 1)] + b[13 + size:])


def build_images(d):
    rng = np.random.default_rng(28)
    out = []

    def save(name, im, fmt, **kw):
        p = os.path.join(d, name)
        im.save(p, fmt, **kw)
        out.append(p)

    for w, h in [(1, 1), (7, 3), (100, 50), (50, 100), (896, 896), (1000, 300), (640, 1700),
                 (1500, 1100)]:
        save(f"rgb_{w}x{h}.png", rng_image(rng, w, h, "RGB"), "PNG")
    save("rgb_q90.jpg", rng_image(rng, 333, 222, "RGB"), "JPEG", quality=90)
    save("rgb_444.jpg", rng_image(rng, 301, 203, "RGB"), "JPEG", quality=95, subsampling=0)
    save("rgb_422.jpg", rng_image(rng, 250, 401, "RGB"), "JPEG", quality=80, subsampling=1)
    save("rgb_prog.jpg", rng_image(rng, 640, 480, "RGB"), "JPEG", quality=85, progressive=True)
    save("grey.jpg", rng_image(rng, 123, 77, "L"), "JPEG")
    save("cmyk.jpg", rng_image(rng, 160, 120, "CMYK"), "JPEG", quality=90)
    save("rgba.png", rng_image(rng, 211, 97, "RGBA"), "PNG")
    save("la.png", rng_image(rng, 97, 211, "LA"), "PNG")
    save("grey.png", rng_image(rng, 300, 200, "L"), "PNG")
    save("bit1.png", rng_image(rng, 77, 33, "1"), "PNG")
    save("pal.png", rng_image(rng, 120, 80, "P"), "PNG")
    p = rng_image(rng, 120, 80, "P")
    save("pal_trns1.png", p, "PNG", transparency=3)
    save("pal_trns.png", p, "PNG", transparency=bytes(rng.integers(0, 256, 40).tolist()))
    save("pal2.png", rng_image(rng, 99, 66, "P"), "PNG", optimize=True)
    g16 = Image.fromarray(rng.integers(0, 400, (60, 90)).astype(np.uint16))
    save("grey16.png", g16, "PNG")
    save("grey_trns.png", rng_image(rng, 64, 64, "L"), "PNG", transparency=17)
    save("rgb_trns.png", rng_image(rng, 64, 48, "RGB"), "PNG", transparency=(10, 20, 30))
    save("webp_lossy.webp", rng_image(rng, 300, 180, "RGB"), "WEBP", quality=80)
    save("webp_lossless.webp", rng_image(rng, 180, 300, "RGB"), "WEBP", lossless=True)
    save("webp_alpha.webp", rng_image(rng, 200, 150, "RGBA"), "WEBP", quality=90)
    frames = [rng_image(rng, 96, 64, "RGB") for _ in range(3)]
    save("webp_anim.webp", frames[0], "WEBP", save_all=True, append_images=frames[1:])
    apng = [rng_image(rng, 30, 20, "RGBA") for _ in range(3)]
    save("apng.png", apng[0], "PNG", save_all=True, append_images=apng[1:], duration=50)
    save("apng_default.png", apng[0], "PNG", save_all=True, append_images=apng[1:],
         default_image=True)
    save("gif.gif", rng_image(rng, 150, 100, "P"), "GIF")
    save("gif_trns.gif", p, "GIF", transparency=5)
    gframes = [rng_image(rng, 80, 60, "P") for _ in range(3)]
    save("gif_anim.gif", gframes[0], "GIF", save_all=True, append_images=gframes[1:])
    save("gif_interlaced.gif", rng_image(rng, 70, 50, "P"), "GIF", interlace=True)
    save("gif_grey.gif", rng_image(rng, 70, 50, "L"), "GIF")
    # by hand: 16-bit RGB, 16-bit grey + alpha, 2-bit grey, RGB with a tRNS colour (Pillow
    # writes no interlaced PNG: test_image checks Adam7 against the plain decode)
    rows = [rng.integers(0, 65536, 3 * 40, dtype=np.uint16).astype(">u2").tobytes()
            for _ in range(30)]
    raw = {"rgb16.png": png_raw(40, 30, 16, 2, rows)}
    rows = [rng.integers(0, 65536, 2 * 33, dtype=np.uint16).astype(">u2").tobytes()
            for _ in range(21)]
    raw["la16.png"] = png_raw(33, 21, 16, 4, rows)
    rows = [rng.integers(0, 256, 5, dtype=np.uint8).tobytes() for _ in range(9)]
    raw["grey2.png"] = png_raw(20, 9, 2, 0, rows, png_chunk(b"tRNS", struct.pack(">H", 0)))
    rows = [bytes(rng.integers(0, 4, 3 * 16, dtype=np.uint8) * 60) for _ in range(12)]
    raw["rgb_trns_hand.png"] = png_raw(16, 12, 8, 2, rows,
                                       png_chunk(b"tRNS", struct.pack(">HHH", 60, 120, 0)))
    g = rng_image(rng, 10, 8, "P")
    raw["gif_offset.gif"] = gif_placed(g, (20, 16), (5, 4))
    raw["gif_offset_trns.gif"] = gif_placed(g, (20, 16), (5, 4), transparency=2)
    raw["gif_past_screen.gif"] = gif_placed(g, (12, 6), (4, 3))
    # tRNS in 16-bit and low-bit-depth images, palettes shorter than the indices used
    v = rng.integers(0, 300, (10, 12)).astype(np.uint16)
    v[0, 0] = 77
    raw["grey16_trns.png"] = png_raw(12, 10, 16, 0, [r.astype(">u2").tobytes() for r in v],
                                     png_chunk(b"tRNS", struct.pack(">H", 77)))
    v = rng.integers(0, 4, (8, 9, 3)).astype(np.uint16) * 256
    raw["rgb16_trns.png"] = png_raw(9, 8, 16, 2, [r.astype(">u2").tobytes() for r in v],
                                    png_chunk(b"tRNS", struct.pack(">HHH", 1, 2, 3)))
    g4 = rng.integers(0, 16, (5, 8)).astype(np.uint8)
    raw["grey4_trns.png"] = png_raw(8, 5, 4, 0, [bytes((r[i] << 4) | r[i + 1]
                                                       for i in range(0, 8, 2)) for r in g4],
                                    png_chunk(b"tRNS", struct.pack(">H", 3)))
    b1 = rng.integers(0, 2, (5, 16)).astype(np.uint8)
    raw["bit1_trns.png"] = png_raw(16, 5, 1, 0, [np.packbits(r).tobytes() for r in b1],
                                   png_chunk(b"tRNS", struct.pack(">H", 1)))
    idx = rng.integers(0, 8, (6, 7)).astype(np.uint8)
    plte = png_chunk(b"PLTE", bytes(rng.integers(0, 256, 12).tolist()))
    raw["pal_short.png"] = png_raw(7, 6, 8, 3, [r.tobytes() for r in idx], plte)
    raw["pal_short_trns.png"] = png_raw(7, 6, 8, 3, [r.tobytes() for r in idx],
                                        plte + png_chunk(b"tRNS", b"\x00\x80"))
    gbuf = io.BytesIO()
    rng_image(rng, 9, 7, "P").save(gbuf, "GIF")
    raw["gif_short_map.gif"] = gif_short_map(gbuf.getvalue(), 2)
    raw["gif_no_map.gif"] = gif_short_map(gbuf.getvalue())
    gbuf = io.BytesIO()
    rng_image(rng, 9, 7, "P").save(gbuf, "GIF", transparency=20)
    raw["gif_short_map_trns.gif"] = gif_short_map(gbuf.getvalue(), 2)
    gbuf = io.BytesIO()
    rng_image(rng, 9, 7, "L").save(gbuf, "GIF")
    raw["gif_grey_short_map.gif"] = gif_short_map(gbuf.getvalue(), 2)
    for name, b in raw.items():
        p = os.path.join(d, name)
        with open(p, "wb") as f:
            f.write(b)
        out.append(p)
    return out


def tiff_ifd0(entries, big_endian=False):
    """An EXIF block (b"Exif\\0\\0" + a TIFF header + IFD0) of (tag, type, count, value
    bytes) entries; values over 4 bytes are placed after the IFD."""
    e = ">" if big_endian else "<"
    head = (b"MM\0*" if big_endian else b"II*\0") + struct.pack(e + "I", 8)
    ifd_len = 2 + 12 * len(entries) + 4
    body, extra = struct.pack(e + "H", len(entries)), b""
    for tag, typ, count, val in entries:
        if len(val) > 4:
            body += struct.pack(e + "HHII", tag, typ, count, 8 + ifd_len + len(extra))
            extra += val
        else:
            body += struct.pack(e + "HHI", tag, typ, count) + val.ljust(4, b"\0")
    return b"Exif\0\0" + head + body + struct.pack(e + "I", 0) + extra


def build_exif_images(d):
    """EXIF orientation as transformers' load_image applies it (ImageOps.exif_transpose):
    every orientation in a JPEG, big- and little-endian blocks, other value types, a PNG
    eXIf chunk before and after the image data, WebP EXIF chunks, an RGBA PNG (transposed
    and composited), XMP's tiff:Orientation, and values that are no orientation."""
    rng = np.random.default_rng(281)
    out = []

    def save(name, im, fmt, **kw):
        p = os.path.join(d, name)
        im.save(p, fmt, **kw)
        out.append(p)

    def short(v, be=False):
        return struct.pack(">H" if be else "<H", v)

    im = rng_image(rng, 37, 23, "RGB")
    for o in range(1, 9):
        save(f"exif_o{o}.jpg", im, "JPEG", quality=95, exif=tiff_ifd0([(0x112, 3, 1, short(o))]))
    save("exif_be_o7.jpg", im, "JPEG", exif=tiff_ifd0([(0x112, 3, 1, short(7, True))], True))
    save("exif_long_o6.jpg", im, "JPEG", exif=tiff_ifd0([(0x112, 4, 1, struct.pack("<I", 6))]))
    save("exif_count2_o8.jpg", im, "JPEG", exif=tiff_ifd0([(0x112, 3, 2, short(8) + short(3))]))
    save("exif_rational_o5.jpg", im, "JPEG",
         exif=tiff_ifd0([(0x10F, 2, 6, b"Maker\0"), (0x112, 5, 1, struct.pack("<II", 10, 2))]))
    save("exif_o9.jpg", im, "JPEG", exif=tiff_ifd0([(0x112, 3, 1, short(9))]))
    save("exif_byte_o6.jpg", im, "JPEG", exif=tiff_ifd0([(0x112, 1, 1, b"\x06")]))
    save("exif_twice_first_o6.jpg", im, "JPEG",
         exif=tiff_ifd0([(0x112, 3, 1, short(6)), (0x112, 3, 1, short(3))]))
    xmp = (b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF><rdf:Description '
           b'tiff:Orientation="6"/></rdf:RDF></x:xmpmeta>')
    save("xmp_o6.jpg", im, "JPEG", xmp=xmp)
    save("xmp_elem_o8.jpg", im, "JPEG", xmp=b"<tiff:Orientation>8</tiff:Orientation>")
    save("exif_o1_xmp_o6.jpg", im, "JPEG", exif=tiff_ifd0([(0x112, 3, 1, short(1))]), xmp=xmp)
    pim = rng_image(rng, 29, 17, "RGB")
    save("exif_o6.png", pim, "PNG", exif=tiff_ifd0([(0x112, 3, 1, short(6))]))
    save("exif_o8_rgba.png", rng_image(rng, 31, 13, "RGBA"), "PNG",
         exif=tiff_ifd0([(0x112, 3, 1, short(8))]))
    save("exif_o3.webp", rng_image(rng, 41, 19, "RGB"), "WEBP", lossless=True,
         exif=tiff_ifd0([(0x112, 3, 1, short(3))]))
    save("exif_o5_alpha.webp", rng_image(rng, 23, 35, "RGBA"), "WEBP", quality=90,
         exif=tiff_ifd0([(0x112, 3, 1, short(5))]))
    # a PNG whose eXIf chunk follows the image data (Pillow reads it on load)
    rows = [rng.integers(0, 256, 3 * 14, dtype=np.uint8).tobytes() for _ in range(9)]
    b = png_raw(14, 9, 8, 2, rows)
    exif = png_chunk(b"eXIf", tiff_ifd0([(0x112, 3, 1, short(7, True))], True)[6:])
    p = os.path.join(d, "exif_after_idat_o7.png")
    with open(p, "wb") as f:
        f.write(b[:-12] + exif + b[-12:])
    out.append(p)
    return out


EXIF_PREP = ("exif_o6.jpg", "exif_o8_rgba.png", "exif_o5_alpha.webp")


def transformers_image(path):
    """What transformers' load_image and convert_to_rgb make of a file: the EXIF orientation
    applied (exif_transpose), then transparency composited on white."""
    return ImageOps.exif_transpose(Image.open(path))


def run_tool(tool, *args):
    r = subprocess.run([tool, *args], capture_output=True, text=True)
    return r.returncode, r.stderr.strip()


def read_rgb(path):
    with open(path, "rb") as f:
        w, h = struct.unpack("<II", f.read(8))
        return np.frombuffer(f.read(), np.uint8).reshape(h, w, 3)


def read_pv(path):
    with open(path, "rb") as f:
        n, c, h, w = struct.unpack("<IIII", f.read(16))
        return np.frombuffer(f.read(), np.float32).reshape(n, c, h, w)


def truncations(tool, d, check):
    """Every format cut at ~50 points: common/image refuses, or gives Pillow's picture; it never
    accepts a file Pillow refuses. (It may refuse a file cut after its pixel data that Pillow
    still decodes: PNG without its last checksums, GIF without its terminator.)"""
    rng = np.random.default_rng(5)
    im = rng_image(rng, 60, 40, "RGB")
    kinds = {"png": dict(format="PNG"), "jpeg": dict(format="JPEG"),
             "progressive jpeg": dict(format="JPEG", progressive=True),
             "webp": dict(format="WEBP"), "gif": dict(format="GIF")}
    path, out = os.path.join(d, "cut.bin"), os.path.join(d, "cut.out")
    for kind, kw in kinds.items():
        buf = io.BytesIO()
        im.save(buf, **kw)
        data = buf.getvalue()
        bad = []
        for cut in sorted(set(range(0, len(data), max(1, len(data) // 40))) |
                          {len(data) - k for k in (1, 2, 3, 5, 10, 20, 50)}):
            with open(path, "wb") as f:
                f.write(data[:cut])
            try:
                ref = convert_to_rgb(Image.open(io.BytesIO(data[:cut])), return_numpy=True)
            except Exception:  # Pillow refuses it
                ref = None
            rc, err = run_tool(tool, "decode", path, out)
            if rc == 0 and (ref is None or not np.array_equal(read_rgb(out), ref)):
                bad.append(cut)
            elif rc not in (0, 2):
                bad.append(cut)
        check(f"truncations of a {kind} file ({len(data)} bytes)", not bad,
              f"wrong at cuts {bad[:8]}" if bad else "")


def resize_sweep(tool, d, check):
    """Random size pairs, bilinear: both pass orders of Pillow 13 (resample.c's rule)."""
    rng = np.random.default_rng(13)
    path, out = os.path.join(d, "sweep.png"), os.path.join(d, "sweep.out")
    bad = []
    for _ in range(8):
        w, h = (int(v) for v in rng.integers(2, 200, 2))
        im = rng_image(rng, w, h, "RGB")
        im.save(path, "PNG")
        for _ in range(6):
            tw, th = (int(v) for v in rng.integers(1, 260, 2))
            rc, err = run_tool(tool, "resize", path, str(tw), str(th), "2", out)
            if rc or not np.array_equal(read_rgb(out), np.array(im.resize((tw, th), 2))):
                bad.append((w, h, tw, th))
    check("resize sweep: 48 random size pairs, bilinear", not bad,
          f"wrong: {bad[:6]}" if bad else "")


def main():
    tool = sys.argv[1]
    passed = failed = 0

    def check(name, ok, detail=""):
        nonlocal passed, failed
        print(("ok     " if ok else "FAILED ") + name + (f": {detail}" if detail else ""))
        if ok:
            passed += 1
        else:
            failed += 1

    with tempfile.TemporaryDirectory() as d:
        images = build_images(d) + build_exif_images(d)
        cfg = os.path.join(d, "preprocessor_config.json")
        with open(cfg, "w") as f:
            json.dump(GEMMA3, f)
        cfg_pas = os.path.join(d, "pas.json")
        with open(cfg_pas, "w") as f:
            json.dump(dict(GEMMA3, do_pan_and_scan=True), f)
        # The config's do_convert_rgb is null, which the processor reads as "no conversion";
        # every caller converts first (transformers' load_image, vLLM), and common/image does
        # what do_convert_rgb=True does (convert_to_rgb: transparency onto white).
        kw = {k: v for k, v in GEMMA3.items()
              if k not in ("image_processor_type", "processor_class", "image_seq_length")}
        proc = Processor(**dict(kw, do_convert_rgb=True))
        out = os.path.join(d, "out.bin")
        for path in images:
            name = os.path.basename(path)
            ref_rgb = convert_to_rgb(transformers_image(path), return_numpy=True)
            rc, err = run_tool(tool, "decode", path, out)
            if rc:
                check(f"decode {name}", False, err)
                continue
            got = read_rgb(out)
            same = got.shape == ref_rgb.shape and np.array_equal(got, ref_rgb)
            diff = "" if same else (f"shape {got.shape} vs {ref_rgb.shape}" if got.shape !=
                                    ref_rgb.shape else
                                    f"{int((got != ref_rgb).sum())} bytes differ, max "
                                    f"{int(np.abs(got.astype(int) - ref_rgb).max())}")
            check(f"decode {name}", same, diff)
            for label, conf, pas in (("prep", cfg, False), ("prep+pas", cfg_pas, True)):
                if pas and max(ref_rgb.shape[:2]) / min(ref_rgb.shape[:2]) < 1.2:
                    continue
                if name.startswith(("exif", "xmp")) and name not in EXIF_PREP:
                    continue  # the decode is the EXIF check; a few go through the processor
                rc, err = run_tool(tool, "prep", path, conf, out)
                if rc:
                    check(f"{label} {name}", False, err)
                    continue
                got = read_pv(out)
                ref = proc(transformers_image(path), do_pan_and_scan=pas,
                           return_tensors="np")["pixel_values"]
                ok = got.shape == ref.shape and float(np.abs(got - ref).max()) <= 1e-6
                check(f"{label} {name}", ok,
                      f"shape {got.shape}" + (f" max diff {float(np.abs(got - ref).max()):.3g}"
                                              if got.shape == ref.shape else
                                              f" vs {ref.shape}"))
        truncations(tool, d, check)
        src = [p for p in images if os.path.basename(p) in
               ("rgb_1500x1100.png", "rgb_100x50.png", "rgb_7x3.png")]
        for path in src:
            im = Image.open(path).convert("RGB")
            for filt in (1, 2, 3, 4, 5):
                for w, h in ((896, 896), (31, 57), (im.width, 13), (3 * im.width, im.height),
                             (im.width + 10, max(1, im.height // 4))):
                    rc, err = run_tool(tool, "resize", path, str(w), str(h), str(filt), out)
                    ref = np.array(im.resize((w, h), resample=filt))
                    ok = rc == 0 and np.array_equal(read_rgb(out), ref)
                    check(f"resize {os.path.basename(path)} -> {w}x{h} filter {filt}", ok, err)
        resize_sweep(tool, d, check)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
