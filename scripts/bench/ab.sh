#!/usr/bin/env bash
# Two builds of trine on the same machine and the same GGUF, in alternating rounds within one
# run: what a change does to speed (llama-bench's pp/tg through `xtask bench --model`) and to
# the tokens (greedy ids from `trine generate --json`, which must be equal).
#
#   scripts/bench/ab.sh BASE_BIN_DIR NEW_BIN_DIR OUT_DIR [GGUF]
#
# Each BIN_DIR holds `trine` and `xtask` release binaries (cargo build --release -p trine -p
# xtask; built elsewhere and carried). GGUF defaults to a synthetic SmolLM2-135M-shaped file made
# by NEW's `trine synth-model`. OUT_DIR gets base-N.json and new-N.json per round, and ids.txt.
# Environment: AB_BACKENDS (default vulkan,cuda), AB_ROUNDS (2), AB_REPS (5), AB_PROMPT (512),
# AB_GEN (128).
set -euo pipefail
[ $# -eq 3 ] || [ $# -eq 4 ] || { sed -n '6p' "$0" | sed 's/^# *//' >&2; exit 2; }
base="$(cd "$1" && pwd)" new="$(cd "$2" && pwd)"
mkdir -p "$3"
out="$(cd "$3" && pwd)"
backends="${AB_BACKENDS:-vulkan,cuda}"
gguf="${4:-$out/synth.gguf}"
[ -f "$gguf" ] || "$new/trine" synth-model --like smollm2-135m -o "$gguf"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
for round in $(seq "${AB_ROUNDS:-2}"); do
  for build in base new; do
    dir=$base; [ "$build" = new ] && dir=$new
    echo "== round $round, $build" >&2
    "$dir/xtask" bench --model "$gguf" -p "${AB_PROMPT:-512}" -n "${AB_GEN:-128}" \
      --reps "${AB_REPS:-5}" --backends "$backends" --json "$out/$build-$round.json" \
      --markdown "$out/$build-$round.md"
  done
done
: >"$out/ids.txt"
for backend in ${backends//,/ }; do
  for build in base new; do
    dir=$base; [ "$build" = new ] && dir=$new
    ids=$("$dir/trine" generate --model "$gguf" --prompt "Once upon a time," -n 32 \
      --backend "$backend" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["generated_tokens"])')
    echo "$backend $build $ids" | tee -a "$out/ids.txt"
  done
done
