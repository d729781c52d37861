#!/usr/bin/env bash
# Regenerates llama/tests/fixtures/smollm2_reference.json: token ids that llama.cpp (CPU) gives
# for SmolLM2-135M-Instruct Q4_1, the reference trine's tokenizer and greedy decoding must match;
# and smollm2_reference_f64.json: the same greedy prompts decoded in float64 by llama_numpy.py,
# which shows where llama.cpp's reduced-precision arithmetic flips a token. Takes 3–4 min once
# llama.cpp is built (≈ 10 min on 2 shared cores).
#
#   scripts/reference/run.sh [LLAMA_CPP_SOURCE_DIR]
#
# Without a source dir it fetches the pinned llama-cpp-python sdist (which vendors llama.cpp) from
# PyPI's simple index, checking its sha256 against the index. Builds go to LCPP_BUILD_DIR
# (default /tmp/lcpp-build), downloads to REF_WORK_DIR (default /tmp/trine-reference); neither is
# in the repo, nor is the virtual environment with numpy and gguf made in REF_WORK_DIR/venv. Needs
# cmake, a C++17 compiler, python3 and the model in trine's asset cache (.ci/fetch-assets).
set -euo pipefail

LCPP_PY_VERSION=0.3.36
THREADS=2
here="$(cd "$(dirname "$0")" && pwd)"
name=run.sh
# shellcheck source=scripts/reference/lcpp.sh
. "$here/lcpp.sh"
repo="$(cd "$here/../.." && pwd)"
build="${LCPP_BUILD_DIR:-/tmp/lcpp-build}"
work="${REF_WORK_DIR:-/tmp/trine-reference}"
assets="${TRINE_ASSET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/trine/assets}"
model="$assets/SmolLM2-135M-Instruct.Q4_1.gguf"
out="$repo/llama/tests/fixtures/smollm2_reference.json"
out_f64="$repo/llama/tests/fixtures/smollm2_reference_f64.json"

[ -s "$model" ] || { echo "run.sh: $model is missing; run .ci/fetch-assets" >&2; exit 1; }

lcpp_source "$work" "$@"

# Provenance. The sdist carries a shallow git checkout of llama.cpp (so its commit count, which
# llama.cpp uses as build number, is meaningless) and names the commit in its CHANGELOG.
pkg_root="$(cd "$src/../.." && pwd)"
py_version="none"
if [ -f "$pkg_root/llama_cpp/__init__.py" ]; then
  py_version="$(sed -n 's/^__version__ = "\(.*\)"/\1/p' "$pkg_root/llama_cpp/__init__.py")"
fi
commit=unknown
build_number=unknown
# Only a checkout of llama.cpp itself counts, not a repository that merely contains the tree.
if [ "$(git -C "$src" rev-parse --show-toplevel 2>/dev/null)" = "$src" ]; then
  commit="$(git -C "$src" rev-parse HEAD)"
  build_number="$(git -C "$src" rev-list --count HEAD)"
  if [ "$(git -C "$src" rev-parse --is-shallow-repository)" = true ]; then
    build_number="unknown (shallow git checkout)"
  fi
fi
changelog_commit="none"
if [ -f "$pkg_root/CHANGELOG.md" ]; then
  changelog_commit="$(grep -m1 -o 'llama.cpp@[0-9a-f]*' "$pkg_root/CHANGELOG.md" | cut -d@ -f2 || echo none)"
fi

lcpp_check_build "$build"
start=$(date +%s)
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF >/dev/null
nice -n 10 cmake --build "$build" --config Release -j2 --target llama >/dev/null
c++ -std=c++17 -O2 -Wall -Wextra -I"$src/include" -I"$src/ggml/include" "$here/llama_reference.cpp" \
  -L"$build/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$build/bin" -o "$build/llama_reference"
echo "run.sh: llama.cpp and llama_reference built in $(( $(date +%s) - start )) s" >&2

# llama.cpp's own CPU defaults: flash attention "auto" resolves to on, and with it an f32 KV
# cache would be cast to f16 anyway. Results do not depend on the thread count (thread_check).
cd "$repo"
cmd=("$build/llama_reference" --model "$model" --cases scripts/reference/cases.txt --threads "$THREADS"
  --check-threads 1 --n-ctx 512 --flash-attn on --kv-type f16)
tmp="$(mktemp)"
tmp_f64="$(mktemp)"
trap 'rm -f "$tmp" "$tmp_f64"' EXIT
"${cmd[@]}" \
  --info generator "scripts/reference/run.sh" \
  --info command "${cmd[*]/#$HOME/\~}" \
  --info date "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  --info llama_cpp_python_version "$py_version" \
  --info llama_cpp_commit "$commit" \
  --info llama_cpp_commit_per_changelog "$changelog_commit" \
  --info llama_cpp_build_number "$build_number" \
  --info compiler "$(c++ --version | head -n1)" \
  --info model "$(basename "$model")" \
  --info model_sha256 "$(sha256sum "$model" | cut -d' ' -f1)" >"$tmp"
python3 -m json.tool "$tmp" >/dev/null
mkdir -p "$(dirname "$out")"
chmod 644 "$tmp"
mv "$tmp" "$out"
echo "run.sh: wrote $out" >&2

ref_venv "$work"
# The f64 reference checks itself against llama.cpp on an F32 copy of the weights, where llama.cpp
# does no reduced-precision arithmetic either.
f32_model="$work/$(basename "$model" .gguf).f32.gguf"
[ -s "$f32_model" ] || "$venv/bin/python" "$here/dequantize_gguf.py" "$model" "$f32_model"
"$build/llama_reference" --model "$f32_model" --cases scripts/reference/cases.txt --threads "$THREADS" \
  --flash-attn off --kv-type f32 >"$work/f32_weights.json"
"$venv/bin/python" "$here/llama_numpy.py" "$model" "$out" "$work/f32_weights.json" >"$tmp_f64"
chmod 644 "$tmp_f64"
mv "$tmp_f64" "$out_f64"
trap - EXIT
echo "run.sh: wrote $out_f64" >&2
