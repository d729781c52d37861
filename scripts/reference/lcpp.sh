# Sourced by the scripts here that run llama.cpp: where llama.cpp's sources come from, the check that a
# build folder belongs to them, and the Python environment with gguf-py. The caller sets
# LCPP_PY_VERSION and `name` (its own name, for messages).

# lcpp_source WORK [SOURCE_DIR]: sets `src` to SOURCE_DIR, or to the llama.cpp that the pinned
# llama-cpp-python sdist vendors, fetched into WORK from PyPI's simple index with the sha256 the
# index gives (once; later runs reuse it).
lcpp_source() {
  local work="$1"
  if [ $# -ge 2 ]; then
    src="$(cd "$2" && pwd)"
  else
    mkdir -p "$work"
    local pkg="$work/llama_cpp_python-$LCPP_PY_VERSION"
    if [ ! -d "$pkg/vendor/llama.cpp" ]; then
      python3 - "$LCPP_PY_VERSION" "$work/lcpp.tar.gz" "$name" <<'EOF'
import hashlib, re, sys, urllib.request
ver, out, name = sys.argv[1], sys.argv[2], sys.argv[3]
index = urllib.request.urlopen("https://pypi.org/simple/llama-cpp-python/").read().decode()
m = re.search(r'href="([^"]*/llama_cpp_python-' + re.escape(ver) + r'\.tar\.gz)#sha256=([0-9a-f]{64})"', index)
if not m:
    sys.exit(f"{name}: llama-cpp-python {ver} has no sdist on PyPI's simple index")
urllib.request.urlretrieve(m.group(1), out)
digest = hashlib.sha256(open(out, "rb").read()).hexdigest()
if digest != m.group(2):
    sys.exit(f"{name}: sha256 of {m.group(1)} is {digest}, the index says {m.group(2)}")
EOF
      tar -xzf "$work/lcpp.tar.gz" -C "$work"
      rm "$work/lcpp.tar.gz"
    fi
    src="$pkg/vendor/llama.cpp"
  fi
  [ -f "$src/include/llama.h" ] || { echo "$name: $src is not a llama.cpp source tree" >&2; exit 1; }
}

# lcpp_check_build BUILD: refuses a build folder that CMake configured for other sources.
lcpp_check_build() {
  local build="$1" configured
  if [ -f "$build/CMakeCache.txt" ]; then
    configured="$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")"
    if [ "$configured" != "$src" ]; then
      echo "$name: $build was configured for $configured; set LCPP_BUILD_DIR to another folder" >&2
      exit 1
    fi
  fi
}

# ref_venv WORK: sets `venv` to WORK/venv, made with numpy and gguf-py on first use.
ref_venv() {
  venv="$1/venv"
  mkdir -p "$1"
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q numpy==2.4.6 gguf==0.19.0
  fi
}
