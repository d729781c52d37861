#!/usr/bin/env bash
# Greedy ids of trine against llama.cpp's CPU backend on the full-size synthetic Qwen layouts
# (`trine synth-model --like qwen2.5-0.5b|qwen3-0.6b`, random weights), for the prompts of
# qwen_cases.txt: trine's ids must be llama.cpp's up to a step where llama.cpp's top two logits
# are within 0.5 (the demo's rule: 8-bit activations may flip such a choice). Prints one line
# per preset, backend and prompt; exits 1 if any run parts at a clear choice.
#
#   scripts/reference/qwen_greedy.sh LLAMA_CPP_SOURCE_DIR LLAMA_CPP_BUILD_DIR [BACKEND...]
#
# BACKENDs default to cpu and vulkan; wgpu needs trine built with `--features wgpu`, which
# this script does when it is asked for. Files go to REF_WORK_DIR (default /tmp/trine-reference).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
name=qwen_greedy.sh
repo="$(cd "$here/../.." && pwd)"
[ $# -ge 2 ] || { echo "usage: $name LLAMA_CPP_SOURCE_DIR LLAMA_CPP_BUILD_DIR [BACKEND...]" >&2; exit 2; }
src="$(cd "$1" && pwd)"
lib="$(cd "$2" && pwd)"
shift 2
backends=("$@")
[ ${#backends[@]} -gt 0 ] || backends=(cpu vulkan)
lib_dir="$lib"
[ -f "$lib/bin/libllama.so" ] && lib_dir="$lib/bin"
work="${REF_WORK_DIR:-/tmp/trine-reference}"
mkdir -p "$work"

c++ -std=c++17 -O2 -I"$src/include" -I"$src/ggml/include" "$here/llama_reference.cpp" \
  -L"$lib_dir" -lllama -lggml -lggml-base -Wl,-rpath,"$lib_dir" -o "$work/llama_reference"
cd "$repo"
features=()
[[ " ${backends[*]} " == *" wgpu "* ]] && features=(--features wgpu)
cargo build -q -p trine "${features[@]}"
trine="${CARGO_TARGET_DIR:-$repo/target}/debug/trine"

status=0
for preset in qwen2.5-0.5b qwen3-0.6b; do
  model="$work/$preset.gguf"
  [ -s "$model" ] || "$trine" synth-model --like "$preset" --seed 1 -o "$model"
  "$work/llama_reference" --model "$model" --cases scripts/reference/qwen_cases.txt --threads 2 \
    --check-threads 1 --n-ctx 512 --flash-attn on --kv-type f16 >"$work/$preset.llama_cpp.json"
  for backend in "${backends[@]}"; do
    python3 - "$work/$preset.llama_cpp.json" "$trine" "$model" "$backend" "$preset" <<'PY' || status=1
import json, subprocess, sys
ref, trine, model, backend, preset = sys.argv[1:]
failed = False
for case in json.load(open(ref))["greedy"]:
    theirs, top2 = case["ids"], case["top2"]
    args = [trine, "generate", "--model", model, "--backend", backend, "--prompt", case["prompt"],
            "-n", str(len(theirs)), "--json"]
    if not case["parse_special"]:
        args.append("--no-special")
    out = json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)
    if out["prompt_ids"] != case["prompt_ids"]:
        sys.exit(f"{preset} {backend}: prompt ids {out['prompt_ids']} against {case['prompt_ids']}")
    ours = out["generated_tokens"]
    step = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
    if step is None:
        verdict = f"{min(len(ours), len(theirs))} of {len(theirs)} ids equal"
    else:
        gap = top2[step][0] - top2[step][1]
        verdict = f"equal up to step {step}, where llama.cpp's top-2 gap is {gap:.3f}"
        if gap >= 0.5:
            verdict += ": NOT a near tie"
            failed = True
    print(f"{preset} {backend} {case['prompt'][:24]!r}: {verdict}")
sys.exit(1 if failed else 0)
PY
  done
done
exit $status
