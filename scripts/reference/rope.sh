#!/usr/bin/env bash
# The references of the rope scaling tests (llama/tests/executor/rope_scaling.rs): the tiny
# models with Llama 3.2's rope_freqs.weight, linear and YaRN scaling, and Phi-4-mini's partial
# rotary (rope on 12 of each head's 16 values; examples/rope_models.rs),
# llama.cpp's greedy ids and top-2 logits on them (llama_reference: CPU, F32 KV cache, flash
# attention off, so its arithmetic is float32 throughout), and the float64 reference's
# (llama_numpy.py), with the scaling and ignoring it (for partial rotary: turning whole heads,
# --whole-heads), into llama/tests/fixtures/rope_reference.json.
#
#   scripts/reference/rope.sh [LLAMA_CPP_SOURCE_DIR [LLAMA_CPP_BUILD_DIR]]
#
# The source dir holds include/ and ggml/include/ (default /tmp/lcpp/llama.cpp-0c1e570, the
# llama-cpp-python 0.3.36 sources); the build dir a CPU build of it with bin/libllama.so
# (default /tmp/lcpp/build; lcpp.sh makes one). Takes a minute once trine's example is built.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
src="${1:-/tmp/lcpp/llama.cpp-0c1e570}"
build="${2:-/tmp/lcpp/build}"
work="${REF_WORK_DIR:-/tmp/trine-reference}/rope"
fixture="$repo/llama/tests/fixtures/rope_reference.json"
mkdir -p "$work"

c++ -std=c++17 -O2 -Wall -Wextra -I"$src/include" -I"$src/ggml/include" "$here/llama_reference.cpp" \
  -L"$build/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$build/bin" -o "$work/llama_reference"
(cd "$repo" && cargo run --quiet --example rope_models -- "$work")

# A prompt of 320 byte tokens (the tiny models' vocabulary has one per byte): positions past
# the YaRN model's trained context of 64 and far enough for the scaled pairs to turn.
prompt="Rotary embeddings turn each pair of a head by an angle that grows with the position.\s"
prompt+="Scaling divides those angles: Llama 3 bakes its factors into a tensor, linear scaling "
prompt+="divides every position, and YaRN ramps between interpolation and extrapolation. A long "
prompt+="prompt reaches the positions where the scaled pairs have turned far from the plain ones."
printf '# Inputs of llama_reference for scripts/reference/rope.sh (format in cases.txt).\ngreedy 0 16 %s\n' \
  "$prompt" > "$work/cases.txt"

for kind in llama3 linear yarn partial; do
  model="$work/tiny-$kind.gguf"
  sha=$(sha256sum "$model" | cut -d' ' -f1)
  "$work/llama_reference" --model "$model" --cases "$work/cases.txt" --threads 2 --n-ctx 512 \
    --flash-attn off --kv-type f32 --info model_sha256 "$sha" > "$work/lcpp-$kind.json"
  python3 "$here/llama_numpy.py" "$model" "$work/lcpp-$kind.json" > "$work/f64-$kind.json"
  ignoring=--ignore-rope-scaling
  [ "$kind" = partial ] && ignoring=--whole-heads
  python3 "$here/llama_numpy.py" "$ignoring" "$model" "$work/lcpp-$kind.json" \
    > "$work/f64-ignoring-$kind.json"
done

python3 - "$work" "$src" > "$fixture" <<'PY'
import datetime, json, sys

work, src = sys.argv[1], sys.argv[2]
def greedy(name):
    with open(f"{work}/{name}.json", encoding="utf-8", errors="replace") as f:
        g = json.load(f)["greedy"][0]
    return {k: g[k] for k in ("prompt_ids", "ids", "top2")}

out = {
    "provenance": {
        "generator": "scripts/reference/rope.sh",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "models": "examples/rope_models.rs (trine_gguf::synth::rope::tiny, seed 5)",
        "llama_cpp": f"{src}, CPU, F32 KV cache, flash attention off",
        "f64": "scripts/reference/llama_numpy.py; f64_ignoring_scaling with --ignore-rope-scaling (--whole-heads for partial)",
    },
    "models": {
        kind: {
            "llama_cpp": greedy(f"lcpp-{kind}"),
            "f64": greedy(f"f64-{kind}"),
            "f64_ignoring_scaling": greedy(f"f64-ignoring-{kind}"),
        }
        for kind in ("llama3", "linear", "yarn", "partial")
    },
}
print(json.dumps(out, separators=(",", ":")).replace('},"', '},\n"'))
PY
echo "rope.sh: wrote $fixture" >&2
