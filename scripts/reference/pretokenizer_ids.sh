#!/usr/bin/env bash
# Regenerates tokenizer/tests/fixtures/pretokenizer/*.out: the ids llama.cpp gives for the texts
# of ggml-vocab-qwen35.gguf.inp (llama.cpp's vocab test texts, a superset of llama-bpe's) and of
# case_split.inp, with ggml-vocab-llama-bpe.gguf rewritten to name another pre-tokenizer. llama.cpp
# ships no vocab test for these pre-tokenizers (gpt-4o, tekken); trine's
# tokenizer_pretokenizers.rs rebuilds the same rewritten vocab in memory and must give these ids.
#
#   LCPP_BUILD_DIR=/tmp/lcpp/build GGUF_PYTHON=/work/venv-gguf/bin/python \
#     scripts/reference/pretokenizer_ids.sh /tmp/lcpp/llama.cpp-0c1e570
#
# Arguments and the fetched sources are as in run.sh. A build folder that is already configured
# is only built (target llama), never configured again. GGUF_PYTHON is a Python with the gguf
# package; without it a virtual environment is made in REF_WORK_DIR/venv. Needs the vocab files in
# trine's asset cache (.ci/fetch-assets). Takes seconds once libllama is built.
set -euo pipefail

LCPP_PY_VERSION=0.3.36
PRES=(gpt-4o tekken)
here="$(cd "$(dirname "$0")" && pwd)"
name=pretokenizer_ids.sh
# shellcheck source=scripts/reference/lcpp.sh
. "$here/lcpp.sh"
repo="$(cd "$here/../.." && pwd)"
build="${LCPP_BUILD_DIR:-/tmp/lcpp-build}"
work="${REF_WORK_DIR:-/tmp/trine-reference}"
assets="${TRINE_ASSET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/trine/assets}"
vocab="$assets/vocab/ggml-vocab-llama-bpe.gguf"
fixtures="$repo/tokenizer/tests/fixtures/pretokenizer"
texts=("$assets/vocab/ggml-vocab-qwen35.gguf.inp" "$fixtures/case_split.inp")

for f in "$vocab" "${texts[@]}"; do
  [ -s "$f" ] || { echo "$name: $f is missing; run .ci/fetch-assets" >&2; exit 1; }
done

lcpp_source "$work" "$@"
lcpp_check_build "$build"
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF >/dev/null
fi
nice -n 10 cmake --build "$build" --config Release -j2 --target llama >/dev/null
mkdir -p "$work"
c++ -std=c++17 -O2 -Wall -Wextra -I"$src/include" -I"$src/ggml/include" "$here/vocab_ids.cpp" \
  -L"$build/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$build/bin" -o "$work/vocab_ids"

if [ -n "${GGUF_PYTHON:-}" ]; then
  py="$GGUF_PYTHON"
else
  ref_venv "$work"
  py="$venv/bin/python"
fi

for pre in "${PRES[@]}"; do
  renamed="$work/ggml-vocab-llama-bpe-$pre.gguf"
  "$py" - "$vocab" "$renamed" "$pre" <<'PY'
import sys
import gguf

src, dst, pre = sys.argv[1:]
reader = gguf.GGUFReader(src)
if len(reader.tensors) != 0:
    sys.exit(f"{src} has tensors; a vocab file has none")
writer = gguf.GGUFWriter(dst, arch=reader.fields["general.architecture"].contents())
for key, field in reader.fields.items():
    if key.startswith("GGUF.") or key == "general.architecture":
        continue
    vtype = field.types[0]
    sub_type = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
    value = pre if key == "tokenizer.ggml.pre" else field.contents()
    writer.add_key_value(key, value, vtype, sub_type=sub_type)
writer.write_header_to_file()
writer.write_kv_data_to_file()
writer.close()
PY
  for inp in "${texts[@]}"; do
    stem="$(basename "$inp" .inp)"
    stem="${stem#ggml-vocab-}"
    stem="${stem%.gguf}"
    "$work/vocab_ids" "$renamed" "$inp" 2>/dev/null >"$fixtures/$pre.$stem.out"
  done
  rm "$renamed"
done
echo "$name: wrote $(ls "$fixtures"/*.out | wc -l) files in $fixtures" >&2
