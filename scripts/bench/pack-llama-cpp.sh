#!/usr/bin/env bash
# Packs the llama.cpp source tree that scripts/bench/llama-cpp-cuda.sh builds: the llama.cpp that
# the llama-cpp-python 0.3.36 source package vendors (ggml-org/llama.cpp@0c1e57098, per the
# package's CHANGELOG), trimmed to what CMake needs to configure it and build llama-bench with the
# CPU and CUDA backends, as one small tarball to carry to a GPU machine with no network.
#
#   scripts/bench/pack-llama-cpp.sh [OUT_TARBALL]
#
# OUT_TARBALL defaults to .peer/llama.cpp-0c1e570.tar.xz in the repository (ignored by git through
# .git/info/exclude; nothing fetched is committed); the sdist's sha256 goes beside it, in
# llama_cpp_python-0.3.36.tar.gz.sha256. Fetches the sdist from PyPI's simple index (not
# `pip download --no-binary :all:`, which builds CMake from source just to read the metadata) and
# checks its sha256 against the one pinned here. Works in PACK_WORK_DIR (default: a temporary
# folder, removed afterwards). The tarball is reproducible: same bytes from the same sdist.
#
# What is dropped: docs, models (vocab files), media, gguf-py, python conversion scripts, tests,
# examples, pocs, benches, CI and editor files, the server/cli/web-ui/rpc/tuning tools (only
# configured with LLAMA_BUILD_SERVER / GGML_RPC / GGML_METAL), sample media of tools/mtmd, and the
# ggml backends other than ggml-cpu, ggml-cuda and ggml-blas. All tools/ subfolders that
# tools/CMakeLists.txt adds unconditionally stay, since CMake checks their sources at configure
# time. Configure it with LLAMA_BUILD_TESTS/EXAMPLES/SERVER/APP=OFF, as llama-cpp-cuda.sh does.
set -euo pipefail

LCPP_PY_VERSION=0.3.36
SDIST_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
LLAMA_CPP_COMMIT=0c1e57098   # as the sdist's CHANGELOG names it; checked below
NAME=llama.cpp-0c1e570       # top folder in the tarball and the tarball's base name

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="${1:-$repo/.peer/$NAME.tar.xz}"
mkdir -p "$(dirname "$out")"
out="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"

if [ -n "${PACK_WORK_DIR:-}" ]; then
  work="$PACK_WORK_DIR"
  mkdir -p "$work"
else
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
fi

sdist="$work/llama_cpp_python-$LCPP_PY_VERSION.tar.gz"
if [ ! -s "$sdist" ] || [ "$(sha256sum "$sdist" | cut -d' ' -f1)" != "$SDIST_SHA256" ]; then
  python3 - "$LCPP_PY_VERSION" "$SDIST_SHA256" "$sdist" <<'EOF'
import hashlib, re, sys, urllib.request
ver, want, out = sys.argv[1:4]
index = urllib.request.urlopen("https://pypi.org/simple/llama-cpp-python/").read().decode()
m = re.search(r'href="([^"]*/llama_cpp_python-' + re.escape(ver) + r'\.tar\.gz)#sha256=([0-9a-f]{64})"', index)
if not m:
    sys.exit(f"pack-llama-cpp.sh: llama-cpp-python {ver} has no sdist on PyPI's simple index")
if m.group(2) != want:
    sys.exit(f"pack-llama-cpp.sh: the index gives sha256 {m.group(2)}, this script pins {want}")
urllib.request.urlretrieve(m.group(1), out)
digest = hashlib.sha256(open(out, "rb").read()).hexdigest()
if digest != want:
    sys.exit(f"pack-llama-cpp.sh: sha256 of {m.group(1)} is {digest}, expected {want}")
EOF
fi
echo "pack-llama-cpp.sh: sdist $(basename "$sdist") sha256 $SDIST_SHA256" >&2

pkg="$work/llama_cpp_python-$LCPP_PY_VERSION"
rm -rf "$pkg" "${work:?}/$NAME"
tar -xzf "$sdist" -C "$work"
changelog_commit="$(grep -m1 -o 'llama.cpp@[0-9a-f]*' "$pkg/CHANGELOG.md" | cut -d@ -f2)"
if [ "$changelog_commit" != "$LLAMA_CPP_COMMIT" ]; then
  echo "pack-llama-cpp.sh: the sdist's CHANGELOG names llama.cpp@$changelog_commit, expected $LLAMA_CPP_COMMIT" >&2
  exit 1
fi
mv "$pkg/vendor/llama.cpp" "$work/$NAME"
rm -rf "$pkg"
src="$work/$NAME"

cd "$src"
# .git is a submodule pointer into the python package's (absent) .git/modules.
rm -rf .git .gitmodules .github .devops .gemini .pi .dockerignore .ecrc .editorconfig .flake8 \
  .pre-commit-config.yaml .clang-format .clang-tidy AGENTS.md CLAUDE.md CODEOWNERS CONTRIBUTING.md \
  SECURITY.md Makefile flake.nix build-xcframework.sh pyproject.toml pyrightconfig.json mypy.ini \
  ty.toml requirements.txt convert_*.py \
  benches ci conversion docs examples gguf-py grammars media models pocs requirements scripts \
  skills tests \
  tools/server tools/ui tools/cli tools/rpc tools/tuning \
  tools/mtmd/test-1.jpeg tools/mtmd/test-2.mp3 tools/mtmd/test-3.mp4 tools/mtmd/tests \
  tools/mtmd/legacy-models
for backend in ggml/src/ggml-*/; do
  case "$(basename "$backend")" in
    ggml-cpu|ggml-cuda|ggml-blas) ;;
    *) rm -rf "$backend" ;;
  esac
done
[ -f include/llama.h ] && [ -f tools/llama-bench/llama-bench.cpp ] && [ -f ggml/src/ggml-cuda/CMakeLists.txt ]

cat >PROVENANCE <<EOF
llama.cpp ggml-org/llama.cpp@$LLAMA_CPP_COMMIT, as vendored in llama-cpp-python $LCPP_PY_VERSION
(https://pypi.org/project/llama-cpp-python/$LCPP_PY_VERSION/, sdist sha256 $SDIST_SHA256),
trimmed by trine's scripts/bench/pack-llama-cpp.sh to what llama-bench with the CPU and CUDA
backends needs. No .git: pass -DLLAMA_BUILD_COMMIT=$LLAMA_CPP_COMMIT to CMake.
commit=$LLAMA_CPP_COMMIT
llama_cpp_python=$LCPP_PY_VERSION
sdist_sha256=$SDIST_SHA256
EOF

cd "$work"
tmp="$out.tmp.$$"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --mode=u+rw,go+r,go-w \
  -cf - "$NAME" | xz -9 -T1 -c >"$tmp"
mv "$tmp" "$out"
echo "$SDIST_SHA256  llama_cpp_python-$LCPP_PY_VERSION.tar.gz" >"$(dirname "$out")/llama_cpp_python-$LCPP_PY_VERSION.tar.gz.sha256"
echo "pack-llama-cpp.sh: wrote $out ($(du -k "$out" | cut -f1) KiB, sha256 $(sha256sum "$out" | cut -d' ' -f1))" >&2
