#!/usr/bin/env bash
# trine and llama.cpp on the same GPU and the same GGUF, one after the other in one run: the
# measurement behind docs/bench/decode-h100-*.md.
#
#   scripts/bench/decode-side-by-side.sh BIN_DIR TARBALL WORK_DIR OUT_DIR
#
# BIN_DIR holds trine's release `trine` and `xtask` binaries (cargo build --release -p trine -p
# xtask; built elsewhere and carried, or built here). TARBALL is llama.cpp as
# scripts/bench/pack-llama-cpp.sh packs it. WORK_DIR gets the model and llama.cpp's build; OUT_DIR
# gets trine.json, trine.md and llama-cpp/ (see llama-cpp-cuda.sh).
#
# The model is a synthetic GGUF with SmolLM2-135M-Instruct's layout, tokenizer and Q4_1/Q8_0
# types and random weights (`trine synth-model --like smollm2-135m`): the real file is not
# needed, and both tools read the same one. llama.cpp is built and run once first (its build
# and a warm-up), then trine runs pp512/tg128 on vulkan and cuda, then llama-bench runs again.
set -euo pipefail
[ $# -eq 4 ] || { sed -n '5p' "$0" | sed 's/^# *//' >&2; exit 2; }
bin="$(cd "$1" && pwd)"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$3" "$4"
work="$(cd "$3" && pwd)"
out="$(cd "$4" && pwd)"
gguf="$work/smollm2-135m-synth.gguf"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"

[ -f "$gguf" ] || "$bin/trine" synth-model --like smollm2-135m -o "$gguf"
bash "$here/llama-cpp-cuda.sh" "$2" "$work/llama.cpp" "$gguf" "$work/llama-cpp-first" >/dev/null
"$bin/xtask" bench --model "$gguf" -p 512 -n 128 --reps 5 --backends vulkan,cuda \
  --json "$out/trine.json" --markdown "$out/trine.md"
bash "$here/llama-cpp-cuda.sh" "$2" "$work/llama.cpp" "$gguf" "$out/llama-cpp"
