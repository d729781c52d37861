#!/usr/bin/env bash
# trine's CPU backend and llama.cpp's CPU backend on this machine and the same GGUF, one after
# the other in one run: the measurement behind docs/bench/cpu-*.md.
#
#   scripts/bench/cpu-side-by-side.sh BIN_DIR TARBALL WORK_DIR OUT_DIR [GGUF]
#
# BIN_DIR holds trine's release `xtask` (cargo build --release -p xtask). TARBALL is llama.cpp
# as scripts/bench/pack-llama-cpp.sh packs it. WORK_DIR gets llama.cpp's CPU-only build (reused
# by a later run); OUT_DIR gets trine.json, trine.md and llama-cpp/ (see llama-cpp-cuda.sh).
# GGUF defaults to SmolLM2-135M-Instruct Q4_1 from trine's asset cache (.ci/fetch-assets puts
# it there). Both tools use every core: llama-bench's default threads, trine's CPU backend one
# worker per core. llama.cpp runs once first (its build and a warm-up), then trine, then
# llama-bench again.
set -euo pipefail
[ $# -eq 4 ] || [ $# -eq 5 ] || { sed -n '5p' "$0" | sed 's/^# *//' >&2; exit 2; }
bin="$(cd "$1" && pwd)"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$3" "$4"
work="$(cd "$3" && pwd)"
out="$(cd "$4" && pwd)"
gguf="${5:-${TRINE_ASSET_DIR:-$HOME/.cache/trine/assets}/SmolLM2-135M-Instruct.Q4_1.gguf}"
[ -f "$gguf" ] || { echo "cpu-side-by-side.sh: no GGUF $gguf (run .ci/fetch-assets)" >&2; exit 1; }
export LCPP_CUDA=OFF
bash "$here/llama-cpp-cuda.sh" "$2" "$work/llama.cpp" "$gguf" "$work/llama-cpp-first" >/dev/null
"$bin/xtask" bench --model "$gguf" -p 512 -n 128 --reps 3 --backends cpu \
  --json "$out/trine.json" --markdown "$out/trine.md"
bash "$here/llama-cpp-cuda.sh" "$2" "$work/llama.cpp" "$gguf" "$out/llama-cpp"
