#!/usr/bin/env python3
"""Writes gguf/tests/fixtures/dequant/: for each quantized weight type trine-gguf knows, random
blocks and the f32 values the `gguf` Python package (gguf-py, llama.cpp's own) decodes them to,
which gguf/tests/dequant_reference.rs checks trine_gguf::quant::dequantize against bit for bit.

Each block is random bytes with every scale field (an f16 d, dmin or m) replaced by a finite
random f16 of magnitude 1e-5 to 10 (some subnormal), either sign, so that every code, sub-block
scale and bit position is exercised and every value is finite. Of each type's blocks, the first
has every other byte 0xff and the second every other byte 0x00 (the extreme codes and scales).
One file per type, <name>.bin: the blocks, then their elements' values as little-endian f32.

gguf-py does not decode Q8_K (ggml's activation type for K-quant products, never a weight in a
file); its values here come from ggml-common.h's struct (f32 d, i8 qs[256], i16 bsums[16]) read
with numpy, d·qs in f32: an independent decoding, not gguf-py's. README.md in the folder says so
and records the versions used; dequant_fixtures_ggml.c beside this checks every file, Q8_K's
included, against ggml's own C dequantizers.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install gguf numpy
    /tmp/venv/bin/python scripts/reference/dequant_fixtures.py

The output is the same on every run with the same gguf-py (the generator is seeded).
"""

import importlib.metadata
import pathlib

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

SEED = 20250601
OUT = pathlib.Path(__file__).resolve().parents[2] / "gguf" / "tests" / "fixtures" / "dequant"

# Type, blocks, byte offsets of its f16 scale fields (ggml-common.h's block structs).
TYPES = [
    (T.Q8_0, 32, [0]),
    (T.Q4_0, 32, [0]),
    (T.Q4_1, 32, [0, 2]),
    (T.Q5_0, 32, [0]),
    (T.Q5_1, 32, [0, 2]),
    (T.IQ4_NL, 32, [0]),
    (T.Q2_K, 8, [80, 82]),
    (T.Q3_K, 8, [108]),
    (T.Q4_K, 8, [0, 2]),
    (T.Q5_K, 8, [0, 2]),
    (T.Q6_K, 8, [208]),
    (T.IQ4_XS, 8, [0]),
    (T.Q8_K, 8, []),
]


def random_scales(rng, n, dtype):
    magnitude = 10.0 ** rng.uniform(-5.0, 1.0, n)
    sign = rng.choice([-1.0, 1.0], n)
    return (sign * magnitude).astype(dtype)


def blocks_of(rng, qtype, n_blocks, scale_at):
    _, type_size = GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, (n_blocks, type_size), dtype=np.uint8)
    blocks[0, :] = 0xFF
    blocks[1, :] = 0x00
    for at in scale_at:
        blocks[:, at : at + 2] = random_scales(rng, n_blocks, np.float16).view(np.uint8).reshape(-1, 2)
    if qtype == T.Q8_K:
        blocks[:, 0:4] = random_scales(rng, n_blocks, np.float32).view(np.uint8).reshape(-1, 4)
    return blocks


def q8_k_values(blocks):
    """ggml's block_q8_K, read as its struct: y = d·qs in f32 (dequantize_row_q8_K)."""
    block_q8_k = np.dtype([("d", "<f4"), ("qs", "i1", 256), ("bsums", "<i2", 16)])
    assert block_q8_k.itemsize == GGML_QUANT_SIZES[T.Q8_K][1]
    b = blocks.reshape(-1).view(block_q8_k)
    return (b["d"][:, None] * b["qs"].astype(np.float32)).astype(np.float32)


def main():
    rng = np.random.default_rng(SEED)
    OUT.mkdir(parents=True, exist_ok=True)
    for qtype, n_blocks, scale_at in TYPES:
        blocks = blocks_of(rng, qtype, n_blocks, scale_at)
        if qtype == T.Q8_K:
            values = q8_k_values(blocks)
        else:
            values = dequantize(blocks, qtype)
        block_size, _ = GGML_QUANT_SIZES[qtype]
        values = np.asarray(values, dtype="<f4").reshape(-1)
        assert values.size == n_blocks * block_size and np.isfinite(values).all()
        path = OUT / f"{qtype.name.lower()}.bin"
        path.write_bytes(blocks.tobytes() + values.tobytes())
        print(f"{path.name}: {n_blocks} blocks, {path.stat().st_size} bytes")
    versions = {p: importlib.metadata.version(p) for p in ("gguf", "numpy")}
    print("versions:", versions)


if __name__ == "__main__":
    main()
