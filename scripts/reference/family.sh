# Sourced by gemma.sh, phi3.sh and qwen.sh (after lcpp.sh): what their fixtures of a family
# share. The caller sets `here` (its folder) and `name` (its own name, for messages).

# family_setup SOURCE_DIR BUILD_DIR: sets `repo`, `src`, `lib_dir` (where libllama is),
# `work` (REF_WORK_DIR, default /tmp/trine-reference), `fixtures`, `venv` (REF_VENV, or one
# ref_venv makes in `work`) and `trine` (built); compiles llama_reference.cpp into `work`.
# Leaves the working directory at the repository's root.
family_setup() {
  repo="$(cd "$here/../.." && pwd)"
  src="$(cd "$1" && pwd)"
  local lib
  lib="$(cd "$2" && pwd)"
  [ -f "$src/include/llama.h" ] || { echo "$name: $src is not a llama.cpp source tree" >&2; exit 1; }
  lib_dir="$lib"
  [ -f "$lib/bin/libllama.so" ] && lib_dir="$lib/bin"
  work="${REF_WORK_DIR:-/tmp/trine-reference}"
  mkdir -p "$work"
  fixtures="$repo/llama/tests/fixtures"
  c++ -std=c++17 -O2 -Wall -Wextra -I"$src/include" -I"$src/ggml/include" "$here/llama_reference.cpp" \
    -L"$lib_dir" -lllama -lggml -lggml-base -Wl,-rpath,"$lib_dir" -o "$work/llama_reference"
  if [ -n "${REF_VENV:-}" ]; then
    venv="$REF_VENV"
  else
    ref_venv "$work"
  fi
  cd "$repo"
  cargo build -q -p trine
  trine="${CARGO_TARGET_DIR:-$repo/target}/debug/trine"
}

# synth_model FAMILY: writes `trine synth-model --like FAMILY-tiny --seed 5` (the file the
# tests build in memory) to `work` and sets `model` to it.
synth_model() {
  model="$work/$1-tiny.gguf"
  "$trine" synth-model --like "$1-tiny" --seed 5 -o "$model"
}

# reference MODEL CASES CTX LABEL MADE_BY OUT: llama_reference's JSON for MODEL (greedy ids
# and top-2 logits with a context of CTX, flash attention on and an f16 KV cache: llama.cpp's
# CPU defaults), with its provenance (MADE_BY: how MODEL was made, before the command).
reference() {
  local model="$1" cases="$2" ctx="$3" label="$4" made_by="$5" out="$6" tmp
  tmp="$(mktemp)"
  "$work/llama_reference" --model "$model" --cases "$cases" --threads 2 --check-threads 1 \
    --n-ctx "$ctx" --flash-attn on --kv-type f16 \
    --info generator "scripts/reference/$name" \
    --info command "${made_by}llama_reference --cases $cases --threads 2 --n-ctx $ctx --flash-attn on --kv-type f16" \
    --info date "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    --info llama_cpp_source "$(basename "$src")" \
    --info model "$label" \
    --info model_sha256 "$(sha256sum "$model" | cut -d' ' -f1)" >"$tmp" 2>"$work/llama_reference.log"
  # A random model's completion may end inside a multi-byte character: the text is for
  # people, so such bytes become U+FFFD and the file stays UTF-8 JSON.
  python3 - "$tmp" <<'PY'
import json, sys
text = open(sys.argv[1], "rb").read().decode("utf-8", "replace")
json.loads(text)
open(sys.argv[1], "w", encoding="utf-8").write(text)
PY
  chmod 644 "$tmp"
  mv "$tmp" "$out"
  echo "$name: wrote $out" >&2
}

# synth_reference FAMILY CASES CTX OUT: [reference] for the synthetic file [synth_model] wrote.
synth_reference() {
  local family="$1" cases="$2" ctx="$3" out="$4"
  reference "$model" "$cases" "$ctx" "$family-tiny (trine synth-model, seed 5)" \
    "trine synth-model --like $family-tiny --seed 5; " "$out"
}
