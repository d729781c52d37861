#!/usr/bin/env bash
# The scale sweep in one run on one GPU machine: for each layout and type, a synthetic GGUF made
# here by trine, llama.cpp CUDA's llama-bench (flash attention on) and trine's cuda and vulkan
# backends on that same file, one after the other; then a page with each figure, trine's ratio to
# llama.cpp, the share of the copy rate its decode streams weights at, and its device memory.
#
#   scripts/bench/scale.sh BIN_DIR TARBALL WORK_DIR OUT_DIR [LAYOUT:TYPE ...]
#
# BIN_DIR holds trine's release binaries (trine, xtask). TARBALL is llama.cpp as
# scripts/bench/pack-llama-cpp.sh packs it, built once into WORK_DIR/llama.cpp (reused when it is
# there). OUT_DIR gets each tool's JSON per model and scale.md. Each model file is deleted after
# its runs, so the disk holds one at a time (the 70B layout is about 40 GB).
#
# LAYOUT:TYPE names a `trine synth-model --like` layout and `--type` (q4_0, q8_0, …) or the mix
# `q4_k_m`; the default sweep is the one issue 38 names:
#   smollm2-135m:q4_1 llama-3.2-1b:q4_0 llama-3.2-1b:q8_0 llama-3.2-1b:q4_k_m
#   llama-3-8b:q4_0 llama-3-8b:q8_0 llama-3-8b:q4_k_m llama-3-70b:q4_0
#
# Environment: SCALE_REPS (default 3) repetitions of each test for both tools; SCALE_BACKENDS
# (default cuda,vulkan) trine's backends; LCPP_BENCH (a llama-bench binary) skips the build;
# SCALE_DEPTH (e.g. 4096) runs both tools' tests a second time with that many tokens already in
# the KV cache (llama-bench's -d), on the layouts SCALE_DEPTH_ON names (default: every one);
# SCALE_TUNE=1 runs `xtask tune` on each file first (its tables, TUNE-NAME.md, go to OUT_DIR), so
# that trine runs with the choices measured on this device, as `trine generate` would after it.
set -euo pipefail
usage() { sed -n '7p' "$0" | sed 's/^# *//' >&2; exit 2; }
[ $# -ge 4 ] || usage
bin="$(cd "$1" && pwd)"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$3" "$4"
work="$(cd "$3" && pwd)"
out="$(cd "$4" && pwd)"
tarball="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
shift 4
sweep=("$@")
[ ${#sweep[@]} -gt 0 ] || sweep=(smollm2-135m:q4_1 llama-3.2-1b:q4_0 llama-3.2-1b:q8_0
  llama-3.2-1b:q4_k_m llama-3-8b:q4_0 llama-3-8b:q8_0 llama-3-8b:q4_k_m llama-3-70b:q4_0)
reps="${SCALE_REPS:-3}"
depth="${SCALE_DEPTH:-}"
depth_on="${SCALE_DEPTH_ON:-}"
backends="${SCALE_BACKENDS:-cuda,vulkan}"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"

synth() { # LAYOUT TYPE FILE (one already there, made earlier in the run, is used as it is)
  [ -s "$3" ] && return
  case "$2" in
    q4_k_m) "$bin/trine" synth-model --like "$1" --mix q4_k_m -o "$3" ;;
    q4_1) "$bin/trine" synth-model --like "$1" -o "$3" ;;
    *) "$bin/trine" synth-model --like "$1" --type "$2" -o "$3" ;;
  esac >/dev/null
}

lb="${LCPP_BENCH:-}"
if [ -z "$lb" ]; then
  first="$work/first.gguf"
  synth smollm2-135m q4_1 "$first"
  LCPP_BENCH_ARGS="-fa 1 -r 1 -p 16 -n 4" bash "$here/llama-cpp-cuda.sh" "$tarball" \
    "$work/llama.cpp" "$first" "$out/llama-cpp-build" >/dev/null
  rm -f "$first"
  lb="$(find "$work/llama.cpp" -name llama-bench -type f -perm -u+x | head -1)"
fi
[ -x "$lb" ] || { echo "scale.sh: no llama-bench" >&2; exit 1; }

both() { # FILE NAME DEPTH: llama-bench and trine on FILE, with DEPTH tokens in the cache (0: none)
  local f="$1" name="$2" d=()
  [ "$3" = 0 ] || { d=(-d "$3"); name="$name-d$3"; }
  "$lb" -m "$f" -p 512 -n 128 "${d[@]}" -ngl 99 -fa 1 -r "$reps" -o json \
    > "$out/llama-$name.json" 2> "$out/llama-$name.log" \
    || echo "scale.sh: llama-bench failed on $name" >&2
  "$bin/xtask" bench --model "$f" -p 512 -n 128 "${d[@]}" --reps "$reps" --backends "$backends" \
    --json "$out/trine-$name.json" > "$out/trine-$name.log" 2>&1 \
    || echo "scale.sh: trine failed on $name" >&2
}

for item in "${sweep[@]}"; do
  layout="${item%%:*}" type="${item#*:}"
  name="$layout-$type"
  f="$work/$name.gguf"
  echo "scale.sh: $name $(date -u +%H:%M:%S)" >&2
  synth "$layout" "$type" "$f"
  if [ -n "${SCALE_TUNE:-}" ]; then
    "$bin/xtask" tune --model "$f" --backends "$backends" > "$out/tune-$name.md" \
      2> "$out/tune-$name.log" || echo "scale.sh: tune failed on $name" >&2
  fi
  both "$f" "$name" 0
  if [ -n "$depth" ] && { [ -z "$depth_on" ] || [[ ",$depth_on," == *",$item,"* ]]; }; then
    both "$f" "$name" "$depth"
  fi
  rm -f "$f"
done

{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
  grep -m1 -i "commit\|version" "$out/llama-cpp-build/info.txt" 2>/dev/null || true
} > "$out/machine.txt"
python3 "$here/scale_page.py" "$out" "${sweep[@]}" > "$out/scale.md"
cat "$out/scale.md"
