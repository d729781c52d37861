#!/usr/bin/env bash
# trine and llama.cpp on the same machine and the same GGUF, one after the other in one run: the
# measurements behind docs/bench/decode.md and prefill.md (gpu) and docs/bench/cpu.md (cpu).
#
#   scripts/bench/side-by-side.sh gpu|cpu BIN_DIR TARBALL WORK_DIR OUT_DIR [GGUF]
#
# BIN_DIR holds trine's release binaries (cargo build --release -p trine -p xtask; built
# elsewhere and carried, or built here). TARBALL is llama.cpp as scripts/bench/pack-llama-cpp.sh
# packs it. WORK_DIR gets the model (gpu) and llama.cpp's build, reused by a later run; OUT_DIR
# gets trine.json, trine.md and llama-cpp/ (see llama-cpp-cuda.sh). llama.cpp is built and run
# once first (its build and a warm-up), then trine, then llama-bench again.
#
# gpu: trine's vulkan and cuda backends (5 repetitions) against llama.cpp CUDA, on a synthetic
#      GGUF with SmolLM2-135M-Instruct's layout, tokenizer and Q4_1/Q8_0 types and random
#      weights (`trine synth-model --like smollm2-135m`), unless GGUF is given: the real file
#      need not travel to the GPU machine, and both tools read the same one.
# cpu: trine's cpu backend (3 repetitions; one worker per core) against llama.cpp's CPU backend
#      (llama-bench's default threads, every core), on GGUF or else SmolLM2-135M-Instruct Q4_1
#      from trine's asset cache (.ci/fetch-assets puts it there).
set -euo pipefail
usage() { sed -n '5p' "$0" | sed 's/^# *//' >&2; exit 2; }
[ $# -eq 5 ] || [ $# -eq 6 ] || usage
mode="$1"
case "$mode" in gpu|cpu) ;; *) usage ;; esac
bin="$(cd "$2" && pwd)"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$4" "$5"
work="$(cd "$4" && pwd)"
out="$(cd "$5" && pwd)"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
case "$mode" in
  gpu)
    gguf="${6:-$work/smollm2-135m-synth.gguf}"
    [ -f "$gguf" ] || "$bin/trine" synth-model --like smollm2-135m -o "$gguf"
    backends=vulkan,cuda reps=5 ;;
  cpu)
    gguf="${6:-${TRINE_ASSET_DIR:-$HOME/.cache/trine/assets}/SmolLM2-135M-Instruct.Q4_1.gguf}"
    [ -f "$gguf" ] || { echo "side-by-side.sh: no GGUF $gguf (run .ci/fetch-assets)" >&2; exit 1; }
    export LCPP_CUDA=OFF
    backends=cpu reps=3 ;;
esac
# llama.cpp with flash attention on, as it is compared everywhere.
export LCPP_BENCH_ARGS="${LCPP_BENCH_ARGS:--fa 1}"
bash "$here/llama-cpp-cuda.sh" "$3" "$work/llama.cpp" "$gguf" "$work/llama-cpp-first" >/dev/null
"$bin/xtask" bench --model "$gguf" -p 512 -n 128 --reps "$reps" --backends "$backends" \
  --json "$out/trine.json" --markdown "$out/trine.md"
bash "$here/llama-cpp-cuda.sh" "$3" "$work/llama.cpp" "$gguf" "$out/llama-cpp"
