#!/usr/bin/env bash
# Regenerates the Phi-3, Phi-4-mini and Mistral reference fixtures from the tiny synthetic
# files (`trine synth-model --like phi3-tiny|phi4-tiny|mistral-tiny --seed 5`, the files the
# tests build in memory), for tests/tests/phi3_reference.rs:
#
# - llama/tests/fixtures/FAMILY_tiny_llama_cpp[_CTX].json: llama.cpp's CPU greedy ids and
#   top-2 logits for the prompts of phi3_cases.txt (phi4_cases.txt for Phi-4-mini's byte-level
#   vocabulary; llama_reference.cpp, flash attention on, f16 KV cache: llama.cpp's CPU
#   defaults). Phi-3 and Phi-4-mini run at two contexts, 512 and 8192, on either side of their
#   original context (4096), so that llama.cpp turns rope by LongRoPE's short factors in one
#   and its long ones in the other (over the first 12 values of each head of 16 for
#   Phi-4-mini: partial rotary);
# - llama/tests/fixtures/FAMILY_tiny_f64[_CTX].json: the same graph in float64
#   (llama_numpy.py --ids, with --n-ctx), every step's logits, for a prompt of ids.
#
#   scripts/reference/phi3.sh LLAMA_CPP_SOURCE_DIR LLAMA_CPP_BUILD_DIR
#
# LLAMA_CPP_BUILD_DIR holds a CPU build of libllama (run.sh makes one in /tmp/lcpp-build).
# Needs python3 with numpy and gguf (ref_venv makes one in REF_WORK_DIR, default
# /tmp/trine-reference) and cargo. Takes a minute once trine is built.
set -euo pipefail

LCPP_PY_VERSION=0.3.36
here="$(cd "$(dirname "$0")" && pwd)"
name=phi3.sh
# shellcheck source=scripts/reference/lcpp.sh
. "$here/lcpp.sh"
# shellcheck source=scripts/reference/family.sh
. "$here/family.sh"
[ $# -eq 2 ] || { echo "usage: $name LLAMA_CPP_SOURCE_DIR LLAMA_CPP_BUILD_DIR" >&2; exit 2; }
family_setup "$1" "$2"

# family, context, cases, fixture suffix
for run in "phi3 512 phi3 _512" "phi3 8192 phi3 _8192" "phi4 512 phi4 _512" \
  "phi4 8192 phi4 _8192" "mistral 512 phi3 "; do
  read -r family ctx cases suffix <<<"$run"
  synth_model "$family"
  synth_reference "$family" "scripts/reference/${cases}_cases.txt" "$ctx" \
    "$fixtures/${family}_tiny_llama_cpp$suffix.json"
  "$venv/bin/python" "$here/llama_numpy.py" --n-ctx "$ctx" --ids "$model" 8 17,90,200,3,45 \
    >"$fixtures/${family}_tiny_f64$suffix.json"
  echo "$name: wrote $fixtures/${family}_tiny_f64$suffix.json" >&2
done
