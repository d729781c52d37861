#!/usr/bin/env python3
"""Writes gguf/tests/fixtures/dequant/: for each quantized weight type trine-gguf knows, random
blocks and the f32 values the `gguf` Python package (gguf-py, llama.cpp's own) decodes them to,
which gguf/tests/dequant_reference.rs checks trine_gguf::quant::dequantize against bit for bit.
With --real GGUF..., writes gguf/tests/fixtures/dequant/real/ instead: blocks drawn from the
quantized tensors of those files, in the same format (below).

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
    /tmp/venv/bin/python scripts/reference/dequant_fixtures.py --real A.gguf B.gguf ...

Random blocks reach codes and scales a quantizer never writes; real ones are what a model file
holds: scales a quantizer chose for real weights, the fallback types it used where a row's
length is not a multiple of 256. scripts/reference/quantized.sh calls the --real form with the
SmolLM2-135M files llama-quantize made. Of each type found, REAL_ELEMS elements' worth of blocks
are drawn without replacement from all that type's tensors of all the files, in file order.

The output is the same on every run with the same gguf-py and the same files (the generator is
seeded).
"""

import importlib.metadata
import pathlib
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

SEED = 20250601
OUT = pathlib.Path(__file__).resolve().parents[2] / "gguf" / "tests" / "fixtures" / "dequant"
REAL_OUT = OUT / "real"
# Per type: 32 super-blocks of 256 elements or 256 blocks of 32, 37 to 42 KB a file.
REAL_ELEMS = 8192

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


def write(out, qtype, blocks, values):
    block_size, _ = GGML_QUANT_SIZES[qtype]
    values = np.asarray(values, dtype="<f4").reshape(-1)
    assert values.size == len(blocks) * block_size and np.isfinite(values).all()
    path = out / f"{qtype.name.lower()}.bin"
    path.write_bytes(blocks.tobytes() + values.tobytes())
    return path


def random_fixtures():
    rng = np.random.default_rng(SEED)
    OUT.mkdir(parents=True, exist_ok=True)
    for qtype, n_blocks, scale_at in TYPES:
        blocks = blocks_of(rng, qtype, n_blocks, scale_at)
        values = q8_k_values(blocks) if qtype == T.Q8_K else dequantize(blocks, qtype)
        path = write(OUT, qtype, blocks, values)
        print(f"{path.name}: {n_blocks} blocks, {path.stat().st_size} bytes")


def real_fixtures(paths):
    """Blocks drawn from the quantized tensors of the GGUF files at `paths`, by type."""
    rng = np.random.default_rng(SEED)
    found = {}
    for path in paths:
        for tensor in GGUFReader(path).tensors:
            if tensor.tensor_type not in (T.F32, T.F16, T.BF16):
                _, type_size = GGML_QUANT_SIZES[tensor.tensor_type]
                found.setdefault(tensor.tensor_type, []).append(tensor.data.reshape(-1, type_size))
    REAL_OUT.mkdir(parents=True, exist_ok=True)
    for stale in REAL_OUT.glob("*.bin"):
        stale.unlink()
    for qtype, tensors in sorted(found.items()):
        block_size, _ = GGML_QUANT_SIZES[qtype]
        starts = np.cumsum([0] + [len(t) for t in tensors])
        picks = np.sort(rng.choice(starts[-1], REAL_ELEMS // block_size, replace=False))
        which = np.searchsorted(starts, picks, side="right") - 1
        blocks = np.stack([tensors[t][i - starts[t]] for t, i in zip(which, picks)])
        path = write(REAL_OUT, qtype, blocks, dequantize(blocks, qtype))
        print(f"real/{path.name}: {len(blocks)} blocks from {len(set(which))} of {len(tensors)} "
              f"tensors, {path.stat().st_size} bytes")


def main():
    if sys.argv[1:2] == ["--real"] and len(sys.argv) > 2:
        real_fixtures(sys.argv[2:])
    elif len(sys.argv) == 1:
        random_fixtures()
    else:
        sys.exit("usage: dequant_fixtures.py [--real GGUF...]")
    versions = {p: importlib.metadata.version(p) for p in ("gguf", "numpy")}
    print("versions:", versions)


if __name__ == "__main__":
    main()
