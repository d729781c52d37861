#!/usr/bin/env bash
# The proof on real quantized weights (issue 37): SmolLM2-135M-Instruct dequantized to F32 and
# quantized again by llama.cpp's own llama-quantize into Q4_K_M, Q5_K_M, Q6_K, Q3_K_M, Q2_K,
# Q2_K --pure and IQ4_XS; on each, trine's greedy ids on its cpu, vulkan and wgpu backends
# against llama.cpp's CPU build, vulkan and wgpu cross-checked node by node against the cpu
# backend; and llama.cpp on an F32 copy of each file, to tell at a parting which token the
# weights choose without 8-bit activations. Writes docs/models/quantized.md (quantized_check.py
# makes it) and, from the same files, gguf/tests/fixtures/dequant/real/ (dequant_fixtures.py
# --real). Exits nonzero if any comparison fails; the page says which.
#
#   scripts/reference/quantized.sh [LLAMA_CPP_SOURCE_DIR]
#
# Takes about an hour on 2 shared cores once llama.cpp is built (≈ 10 min more to build it with
# llama-quantize): lavapipe is most of it, where the 98-token prompt takes two minutes a run.
#
# Sources, folders and tools as run.sh: without a source dir it fetches the pinned
# llama-cpp-python sdist (which vendors llama.cpp) from PyPI, checking its sha256; llama.cpp
# builds in LCPP_BUILD_DIR (default /tmp/lcpp-build-tools: it is configured with the common
# library and tools that llama-quantize needs, which run.sh's build leaves out), the rest goes to
# REF_WORK_DIR (default /tmp/trine-reference; the models to its quantized/). trine is built with
# cargo (`--release --features wgpu`, into CARGO_TARGET_DIR or target/). Needs cmake, a C++17
# compiler, python3, cargo and a Vulkan driver; the model comes from .ci/fetch-assets.
set -euo pipefail

LCPP_PY_VERSION=0.3.36
THREADS=2
TYPES=(Q4_K_M Q5_K_M Q6_K Q3_K_M Q2_K Q2_K-pure IQ4_XS)
here="$(cd "$(dirname "$0")" && pwd)"
name=quantized.sh
# shellcheck source=scripts/reference/lcpp.sh
. "$here/lcpp.sh"
repo="$(cd "$here/../.." && pwd)"
build="${LCPP_BUILD_DIR:-/tmp/lcpp-build-tools}"
work="${REF_WORK_DIR:-/tmp/trine-reference}"
quant="$work/quantized"
assets="${TRINE_ASSET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/trine/assets}"
model="$assets/SmolLM2-135M-Instruct.Q4_1.gguf"
page="$repo/docs/models/quantized.md"
started=$(date +%s)

[ -s "$model" ] || "$repo/.ci/fetch-assets" --model-only

lcpp_source "$work" "$@"

# Which llama.cpp: a git checkout's commit, else the one the sdist's CHANGELOG names, else the
# PROVENANCE file of a tree scripts/bench/pack-llama-cpp.sh trimmed.
pkg_root="$(cd "$src/../.." && pwd)"
if [ "$(git -C "$src" rev-parse --show-toplevel 2>/dev/null)" = "$src" ]; then
  lcpp="ggml-org/llama.cpp@$(git -C "$src" rev-parse --short=9 HEAD) (git checkout)"
elif [ -f "$pkg_root/CHANGELOG.md" ] && grep -q 'llama.cpp@[0-9a-f]' "$pkg_root/CHANGELOG.md"; then
  lcpp="$(grep -m1 -o 'llama.cpp@[0-9a-f]*' "$pkg_root/CHANGELOG.md") as vendored by llama-cpp-python $LCPP_PY_VERSION"
elif [ -f "$src/PROVENANCE" ]; then
  lcpp="ggml-org/llama.cpp@$(sed -n 's/^commit=//p' "$src/PROVENANCE") as vendored by llama-cpp-python \
$(sed -n 's/^llama_cpp_python=//p' "$src/PROVENANCE"), trimmed by scripts/bench/pack-llama-cpp.sh"
else
  lcpp="unknown commit, from $src"
fi

lcpp_check_build "$build"
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=ON \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF >/dev/null
nice -n 10 cmake --build "$build" --config Release -j2 --target llama llama-quantize >/dev/null
c++ -std=c++17 -O2 -Wall -Wextra -I"$src/include" -I"$src/ggml/include" "$here/llama_reference.cpp" \
  -L"$build/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$build/bin" -o "$build/llama_reference"
(cd "$repo" && nice -n 10 cargo build --release --bin trine --features wgpu)
trine="${CARGO_TARGET_DIR:-$repo/target}/release/trine"
echo "quantized.sh: llama.cpp, llama_reference and trine built in $(( $(date +%s) - started )) s" >&2

ref_venv "$work"
mkdir -p "$quant"
f32_model="$work/$(basename "$model" .gguf).f32.gguf"
[ -s "$f32_model" ] || "$venv/bin/python" "$here/dequantize_gguf.py" "$model" "$f32_model"

grep '^greedy ' "$here/cases.txt" >"$quant/greedy_cases.txt"
files=()
for label in "${TYPES[@]}"; do
  out="$quant/SmolLM2-135M-Instruct.$label.gguf"
  pure=()
  [ "${label%-pure}" != "$label" ] && pure=(--pure)
  nice -n 10 "$build/bin/llama-quantize" "${pure[@]}" "$f32_model" "$out" "${label%-pure}" "$THREADS" \
    >"$quant/$label.log" 2>&1 || { tail -n 5 "$quant/$label.log" >&2; exit 1; }
  # As run.sh: llama.cpp's CPU defaults, flash attention on and an f16 KV cache.
  "$build/llama_reference" --model "$out" --cases "$quant/greedy_cases.txt" --threads "$THREADS" \
    --check-threads 1 --n-ctx 512 --flash-attn on --kv-type f16 >"$quant/$label.reference.json"
  # The same weights without 8-bit activations (as run.sh's F32 check): llama.cpp on an F32 copy,
  # which says at each parting which token the weights themselves choose.
  "$venv/bin/python" "$here/dequantize_gguf.py" "$out" "$quant/f32-copy.gguf"
  "$build/llama_reference" --model "$quant/f32-copy.gguf" --cases "$quant/greedy_cases.txt" \
    --threads "$THREADS" --n-ctx 512 --flash-attn off --kv-type f32 >"$quant/$label.f32.json"
  rm "$quant/f32-copy.gguf"
  files+=("$out")
done
echo "quantized.sh: quantized and decoded by llama.cpp in $(( $(date +%s) - started )) s" >&2

# The fixtures take their blocks from the original Q4_1 file too: its Q4_1 is a type none of the
# quantized files holds.
"$venv/bin/python" "$here/dequant_fixtures.py" --real "$model" "${files[@]}"

trine_rev="$(git -C "$repo" rev-parse --short HEAD)"
git -C "$repo" diff --quiet HEAD -- ':!docs/models/quantized.md' ':!gguf/tests/fixtures' ||
  trine_rev="$trine_rev with uncommitted changes"
command="scripts/reference/quantized.sh $*"
[ -n "${LCPP_BUILD_DIR:-}" ] && command="LCPP_BUILD_DIR=$LCPP_BUILD_DIR $command"
[ -n "${REF_WORK_DIR:-}" ] && command="REF_WORK_DIR=$REF_WORK_DIR $command"
cpu="$(sed -n 's/^Model name: *//p' <(lscpu) | head -n1)"
nice -n 10 "$venv/bin/python" "$here/quantized_check.py" run --trine "$trine" --work "$quant" "${TYPES[@]}"
"$venv/bin/python" "$here/quantized_check.py" page --work "$quant" --page "$page" --started "$started" \
  --info date "$(date -u +%Y-%m-%d)" \
  --info machine "$(nproc) cores of $cpu, $(uname -sr)" \
  --info llama_cpp "$lcpp" \
  --info trine "$trine_rev" \
  --info threads "$THREADS" \
  --info command "$command" \
  "${TYPES[@]}"
