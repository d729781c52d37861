#!/usr/bin/env bash
# Builds llama.cpp's llama-bench (CUDA backend by default, CPU-only on request) from a source
# tarball and runs `llama-bench -m GGUF -p 512 -n 128 -ngl 99` on one GGUF, once with JSON output
# and once as a markdown table: a llama.cpp baseline for trine's own speed on the same model.
#
#   scripts/bench/llama-cpp-cuda.sh TARBALL BUILD_DIR GGUF OUT_DIR
#
# TARBALL is llama.cpp as vendored by the llama-cpp-python 0.3.36 source package
# (ggml-org/llama.cpp@0c1e57098), trimmed; scripts/bench/pack-llama-cpp.sh makes it reproducibly
# (default .peer/llama.cpp-0c1e570.tar.xz, ignored by git, so nothing fetched is committed). It
# needs no network, so it can be carried to a GPU machine that has none. BUILD_DIR gets the
# unpacked sources (BUILD_DIR/src) and the CMake build (BUILD_DIR/build-cuda-ON or -OFF); a second
# run with the same tarball reuses both and rebuilds nothing. OUT_DIR gets five files: info.txt
# (versions, options, timings), build.log, llama-bench.json, llama-bench.md and bench.log
# (llama-bench's stderr).
#
# Environment:
#   LCPP_CUDA=ON|OFF     ON (default): -DGGML_CUDA=ON for CMAKE_CUDA_ARCHITECTURES=$LCPP_CUDA_ARCH
#                        (default 90, the H100/H200; plain sm_90 is all this llama.cpp uses).
#                        OFF: a CPU-only build, benchmarked without -ngl.
#   LCPP_FA_QUANTS       GGML_CUDA_FA_QUANTS, the K-V cache types whose FlashAttention vector
#                        kernels are compiled; default f16-f16 (llama-bench's default cache type,
#                        always compiled), which skips three of llama.cpp's default four to save
#                        build time. Other cache types still run, converted to f16 (slower), so
#                        set this when benchmarking with -ctk/-ctv other than f16.
#   LCPP_JOBS            parallel build jobs (default: nproc).
#   LCPP_BENCH_ARGS      extra llama-bench arguments, split on spaces (e.g. "-r 10 -fa 1").
#
# Configure options, besides the CUDA ones: no tests, examples, server or unified app (the trimmed
# tarball lacks their sources); tools on (llama-bench is one); no OpenSSL (no downloads); no NCCL
# (one GPU); the commit named explicitly, as the tarball has no .git. LLAMA_CURL is gone from this
# llama.cpp (it warns and ignores it). Full FlashAttention (mma, tile) and MMQ kernels of every type
# are built as llama.cpp builds them by default; nothing is switched off that a default run uses.
# Needs cmake >= 3.18 (ninja if present), a C++17 compiler and, for CUDA, nvcc (CUDA 12 or 13).
# The CPU-only build took 7 to 10 min on 2 shared CPU cores (-j 2, ninja).
set -euo pipefail

usage() { sed -n '6p' "$0" | sed 's/^# *//' >&2; exit 2; }
[ $# -eq 4 ] || usage
[ -f "$1" ] || { echo "llama-cpp-cuda.sh: no tarball $1 (make it with scripts/bench/pack-llama-cpp.sh)" >&2; exit 1; }
[ -f "$3" ] || { echo "llama-cpp-cuda.sh: no GGUF $3" >&2; exit 1; }
tarball="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
gguf="$(cd "$(dirname "$3")" && pwd)/$(basename "$3")"
mkdir -p "$2" "$4"
root="$(cd "$2" && pwd)"
out="$(cd "$4" && pwd)"

cuda="${LCPP_CUDA:-ON}"
case "$cuda" in ON|on|1) cuda=ON ;; OFF|off|0) cuda=OFF ;; *) echo "llama-cpp-cuda.sh: LCPP_CUDA must be ON or OFF" >&2; exit 2 ;; esac
arch="${LCPP_CUDA_ARCH:-90}"
fa_quants="${LCPP_FA_QUANTS:-f16-f16}"
jobs="${LCPP_JOBS:-$(nproc)}"
read -r -a extra <<<"${LCPP_BENCH_ARGS:-}"

log() { echo "llama-cpp-cuda.sh: $*" >&2; echo "$*" >>"$out/info.txt"; }
: >"$out/info.txt"

# Unpack into BUILD_DIR/src, unless this very tarball was unpacked there before. Through python3's
# tarfile where xz is missing.
tar_sha="$(sha256sum "$tarball" | cut -d' ' -f1)"
src="$root/src"
build="$root/build-cuda-$cuda"
if [ "$(cat "$root/.tarball-sha256" 2>/dev/null)" != "$tar_sha" ] || [ ! -f "$src/CMakeLists.txt" ]; then
  rm -rf "$src" "$root"/build-cuda-* "$root/.tarball-sha256" "$root/unpack.tmp"
  mkdir "$root/unpack.tmp"
  if command -v xz >/dev/null; then
    tar -xJf "$tarball" -C "$root/unpack.tmp"
  else
    python3 - "$tarball" "$root/unpack.tmp" <<'EOF'
import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    if hasattr(tarfile, "data_filter"):
        t.extractall(sys.argv[2], filter="data")
    else:
        t.extractall(sys.argv[2])
EOF
  fi
  mv "$root/unpack.tmp"/* "$src"
  rmdir "$root/unpack.tmp"
  echo "$tar_sha" >"$root/.tarball-sha256"
fi
commit="$(sed -n 's/^commit=//p' "$src/PROVENANCE" 2>/dev/null || true)"
commit="${commit:-unknown}"

# The sources have no .git; keep CMake's git calls from reporting an enclosing repository instead.
export GIT_CEILING_DIRECTORIES="$root"

if [ "$cuda" = ON ] && ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

opts=(
  -DCMAKE_BUILD_TYPE=Release
  -DLLAMA_BUILD_COMMIT="$commit"
  -DLLAMA_OPENSSL=OFF
  -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF
  -DLLAMA_BUILD_TOOLS=ON
  -DLLAMA_BUILD_SERVER=OFF
  -DLLAMA_BUILD_APP=OFF
  -DGGML_CCACHE=OFF
)
if [ "$cuda" = ON ]; then
  opts+=(
    -DGGML_CUDA=ON
    -DCMAKE_CUDA_ARCHITECTURES="$arch"
    -DGGML_CUDA_FA_QUANTS="$fa_quants"
    -DGGML_CUDA_NCCL=OFF
  )
else
  opts+=(-DGGML_CUDA=OFF)
fi
generator=()
if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null; then
  generator=(-G Ninja)
fi

log "source: $(sed -n 1p "$src/PROVENANCE" 2>/dev/null)"
log "tarball: $(basename "$tarball") sha256 $tar_sha"
log "cmake: $(cmake --version | head -n1); compiler: $(c++ --version | head -n1)"
if [ "$cuda" = ON ]; then
  log "nvcc: $(nvcc --version | tail -n2 | tr '\n' ' ')"
fi
if command -v nvidia-smi >/dev/null; then
  log "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n1 || echo unknown)"
fi
log "cpu: $(nproc) cores; $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)"
log "configure: cmake ${generator[*]} ${opts[*]}"

t0=$SECONDS
status=0
{
  cmake -S "$src" -B "$build" "${generator[@]}" "${opts[@]}" &&
    cmake --build "$build" --config Release --target llama-bench -j "$jobs"
} >"$out/build.log" 2>&1 || status=$?
build_s=$((SECONDS - t0))
if [ "$status" -ne 0 ]; then
  tail -n 60 "$out/build.log" >&2
  log "build FAILED (exit $status) after ${build_s} s; see build.log"
  exit "$status"
fi
log "build: ${build_s} s (configure + llama-bench target, -j $jobs)"

bench="$build/bin/llama-bench"
log "version: $("$bench" --version 2>&1 | tr '\n' ' ')"
log "gguf: $(basename "$gguf") ($(du -k "$gguf" | cut -f1) KiB)"

args=(-m "$gguf" -p 512 -n 128)
[ "$cuda" = ON ] && args+=(-ngl 99)
args+=("${extra[@]}")
log "bench: llama-bench ${args[*]} -o json|md"
t0=$SECONDS
bench_failed() { tail -n 40 "$out/bench.log" >&2; log "llama-bench FAILED; see bench.log"; exit 1; }
"$bench" "${args[@]}" -o json >"$out/llama-bench.json" 2>"$out/bench.log" || bench_failed
"$bench" "${args[@]}" -o md >"$out/llama-bench.md" 2>>"$out/bench.log" || bench_failed
log "bench: $((SECONDS - t0)) s for both runs"
cat "$out/llama-bench.md"
