#!/usr/bin/env bash
# Regenerates tokenizer/tests/fixtures/llama_cpp_ids/*.out: the ids llama.cpp gives for the texts
# of ggml-vocab-qwen35.gguf.inp (llama.cpp's vocab test texts, a superset of llama-bpe's) and of
# extra.inp (trine's own), for vocabs llama.cpp ships no such ids for:
# - ggml-vocab-llama-bpe.gguf rewritten to name another pre-tokenizer (gpt-4o, tekken);
# - Gemma 3's SentencePiece vocab, read from the Gemma 3 270M file;
# - ggml-vocab-{gemma-4,deepseek-llm,deepseek-coder,falcon}.gguf, on more texts than their own
#   tests have.
# tokenizer/tests/tokenizer_llama_cpp_ids.rs checks them.
#
#   LCPP_BUILD_DIR=/tmp/lcpp/build GGUF_PYTHON=/work/venv-gguf/bin/python \
#     scripts/reference/vocab_ids.sh /tmp/lcpp/llama.cpp-0c1e570
#
# Arguments and the fetched sources are as in run.sh. A build folder that is already configured
# is only built (target llama), never configured again. GGUF_PYTHON is a Python with the gguf
# package; without it a virtual environment is made in REF_WORK_DIR/venv. Needs the vocab files
# and the Gemma 3 file in trine's asset cache. Takes seconds once libllama is built.
set -euo pipefail

LCPP_PY_VERSION=0.3.36
PRES=(gpt-4o tekken)
here="$(cd "$(dirname "$0")" && pwd)"
name=vocab_ids.sh
# shellcheck source=scripts/reference/lcpp.sh
. "$here/lcpp.sh"
repo="$(cd "$here/../.." && pwd)"
build="${LCPP_BUILD_DIR:-/tmp/lcpp-build}"
work="${REF_WORK_DIR:-/tmp/trine-reference}"
assets="${TRINE_ASSET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/trine/assets}"
vocab="$assets/vocab/ggml-vocab-llama-bpe.gguf"
fixtures="$repo/tokenizer/tests/fixtures/llama_cpp_ids"
gemma3="$assets/gemma-3-270m-q4_k_m.gguf"
MORE=(gemma-4 deepseek-llm deepseek-coder falcon)
texts=("$assets/vocab/ggml-vocab-qwen35.gguf.inp" "$fixtures/extra.inp")

more_files=()
for v in "${MORE[@]}"; do more_files+=("$assets/vocab/ggml-vocab-$v.gguf"); done
for f in "$vocab" "$gemma3" "${more_files[@]}" "${texts[@]}"; do
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

# ids_for VOCAB NAME: NAME.STEM.out for each text file STEM.inp.
ids_for() {
  local inp stem
  for inp in "${texts[@]}"; do
    stem="$(basename "$inp" .inp)"
    stem="${stem#ggml-vocab-}"
    stem="${stem%.gguf}"
    "$work/vocab_ids" "$1" "$inp" 2>/dev/null >"$fixtures/$2.$stem.out"
  done
}

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
  ids_for "$renamed" "$pre"
  rm "$renamed"
done
ids_for "$gemma3" gemma-3
for v in "${MORE[@]}"; do
  ids_for "$assets/vocab/ggml-vocab-$v.gguf" "$v"
done
echo "$name: wrote $(ls "$fixtures"/*.out | wc -l) files in $fixtures" >&2
