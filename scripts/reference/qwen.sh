#!/usr/bin/env bash
# Regenerates the Qwen reference fixtures from the tiny synthetic Qwen2, Qwen3 and Qwen3-MoE
# files (`trine synth-model --like qwen2-tiny|qwen3-tiny|qwen3moe-tiny --seed 5`, the files the
# tests build in memory), for tests/tests/qwen_reference.rs:
#
# - llama/tests/fixtures/FAMILY_tiny_llama_cpp.json: llama.cpp's CPU greedy ids and top-2
#   logits for the prompts of qwen_cases.txt (llama_reference.cpp, flash attention on, f16 KV
#   cache: llama.cpp's CPU defaults);
# - llama/tests/fixtures/FAMILY_tiny_f64.json: the same family's graph in float64
#   (llama_numpy.py --ids), every step's logits, for a prompt of ids.
#
#   scripts/reference/qwen.sh LLAMA_CPP_SOURCE_DIR LLAMA_CPP_BUILD_DIR [FAMILY...]
#
# With FAMILY arguments (qwen2, qwen3, qwen3moe), only those families' fixtures.
#
# LLAMA_CPP_BUILD_DIR holds a CPU build of libllama (run.sh makes one in /tmp/lcpp-build).
# Needs python3 with numpy and gguf (ref_venv makes one in REF_WORK_DIR, default
# /tmp/trine-reference) and cargo. Takes a minute once trine is built.
set -euo pipefail

LCPP_PY_VERSION=0.3.36
here="$(cd "$(dirname "$0")" && pwd)"
name=qwen.sh
# shellcheck source=scripts/reference/lcpp.sh
. "$here/lcpp.sh"
repo="$(cd "$here/../.." && pwd)"
[ $# -ge 2 ] || { echo "usage: $name LLAMA_CPP_SOURCE_DIR LLAMA_CPP_BUILD_DIR [FAMILY...]" >&2; exit 2; }
src="$(cd "$1" && pwd)"
lib="$(cd "$2" && pwd)"
shift 2
families=("$@")
[ ${#families[@]} -gt 0 ] || families=(qwen2 qwen3 qwen3moe)
[ -f "$src/include/llama.h" ] || { echo "$name: $src is not a llama.cpp source tree" >&2; exit 1; }
lib_dir="$lib"
[ -f "$lib/bin/libllama.so" ] && lib_dir="$lib/bin"
work="${REF_WORK_DIR:-/tmp/trine-reference}"
mkdir -p "$work"
fixtures="$repo/llama/tests/fixtures"

c++ -std=c++17 -O2 -Wall -Wextra -I"$src/include" -I"$src/ggml/include" "$here/llama_reference.cpp" \
  -L"$lib_dir" -lllama -lggml -lggml-base -Wl,-rpath,"$lib_dir" -o "$work/llama_reference"
ref_venv "$work"

cd "$repo"
cargo build -q -p trine
trine="${CARGO_TARGET_DIR:-$repo/target}/debug/trine"
for family in "${families[@]}"; do
  model="$work/$family-tiny.gguf"
  "$trine" synth-model --like "$family-tiny" --seed 5 -o "$model"
  sha="$(sha256sum "$model" | cut -d' ' -f1)"
  cmd=("$work/llama_reference" --model "$model" --cases scripts/reference/qwen_cases.txt --threads 2
    --check-threads 1 --n-ctx 512 --flash-attn on --kv-type f16)
  tmp="$(mktemp)"
  "${cmd[@]}" \
    --info generator "scripts/reference/qwen.sh" \
    --info command "trine synth-model --like $family-tiny --seed 5; llama_reference --cases scripts/reference/qwen_cases.txt --threads 2 --n-ctx 512 --flash-attn on --kv-type f16" \
    --info date "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    --info llama_cpp_source "$(basename "$src")" \
    --info model "$family-tiny (trine synth-model, seed 5)" \
    --info model_sha256 "$sha" >"$tmp"
  python3 -m json.tool "$tmp" >/dev/null
  chmod 644 "$tmp"
  mv "$tmp" "$fixtures/${family}_tiny_llama_cpp.json"
  "$venv/bin/python" "$here/llama_numpy.py" --ids "$model" 8 17,90,200,3,45 >"$fixtures/${family}_tiny_f64.json"
  echo "$name: wrote $fixtures/${family}_tiny_llama_cpp.json and ${family}_tiny_f64.json" >&2
done
