#!/usr/bin/env python3
"""Copies a GGUF with every tensor dequantized to F32 and the metadata unchanged.

llama.cpp multiplies F32 weights with F32 activations, so running it on this copy (flash
attention off, f32 KV cache) is an exact-arithmetic check of llama_numpy.py by a second,
independent implementation.

    python3 dequantize_gguf.py IN.gguf OUT.gguf
"""

import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter
from gguf.quants import dequantize

# general.file_type value that says "all tensors F32" (llama_ftype LLAMA_FTYPE_ALL_F32).
FILE_TYPE_ALL_F32 = 0


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: dequantize_gguf.py IN.gguf OUT.gguf")
    reader = GGUFReader(sys.argv[1])
    writer = GGUFWriter(sys.argv[2], arch=reader.fields["general.architecture"].contents())
    for field in reader.fields.values():
        # The writer adds the architecture and the GGUF.* header fields itself.
        if field.name == "general.architecture" or field.name.startswith("GGUF."):
            continue
        kind = field.types[0]
        value = FILE_TYPE_ALL_F32 if field.name == "general.file_type" else field.contents()
        sub = field.types[-1] if kind == GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, value, kind, sub_type=sub)
    for tensor in reader.tensors:
        data = dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        writer.add_tensor(tensor.name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main()
