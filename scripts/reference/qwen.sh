#!/usr/bin/env bash
# Regenerates the Qwen reference fixtures from the tiny synthetic Qwen2, Qwen3 and Qwen3-MoE
# files (`trine synth-model --like qwen2-tiny|qwen3-tiny|qwen3moe-tiny|qwen3-30b-a3b-tiny --seed 5`,
# the files the tests build in memory), for tests/tests/qwen_reference.rs:
#
# - llama/tests/fixtures/FAMILY_tiny_llama_cpp.json: llama.cpp's CPU greedy ids and top-2
#   logits for the prompts of qwen_cases.txt (llama_reference.cpp, flash attention on, f16 KV
#   cache: llama.cpp's CPU defaults);
# - llama/tests/fixtures/FAMILY_tiny_f64.json: the same family's graph in float64
#   (llama_numpy.py --ids), every step's logits, for a prompt of ids.
#
#   scripts/reference/qwen.sh LLAMA_CPP_SOURCE_DIR LLAMA_CPP_BUILD_DIR [FAMILY...]
#
# With FAMILY arguments (qwen2, qwen3, qwen3moe, qwen3-30b-a3b), only those families' fixtures.
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
# shellcheck source=scripts/reference/family.sh
. "$here/family.sh"
[ $# -ge 2 ] || { echo "usage: $name LLAMA_CPP_SOURCE_DIR LLAMA_CPP_BUILD_DIR [FAMILY...]" >&2; exit 2; }
family_setup "$1" "$2"
shift 2
families=("$@")
[ ${#families[@]} -gt 0 ] || families=(qwen2 qwen3 qwen3moe qwen3-30b-a3b)

for family in "${families[@]}"; do
  synth_model "$family"
  synth_reference "$family" scripts/reference/qwen_cases.txt 512 "$fixtures/${family}_tiny_llama_cpp.json"
  "$venv/bin/python" "$here/llama_numpy.py" --ids "$model" 8 17,90,200,3,45 >"$fixtures/${family}_tiny_f64.json"
  echo "$name: wrote $fixtures/${family}_tiny_f64.json" >&2
done
