#!/usr/bin/env bash
# A kernel's sm_90 machine code without a GPU: what the cuda backend's lowering compiles to,
# counted by instruction, so that a change to a kernel's instructions can be looked at before
# the GPU time to measure it.
#
#   scripts/bench/sass.sh KERNEL [XTASK] [WORK_DIR]
#
# KERNEL is a name `xtask emit --list` prints; XTASK the xtask binary (default: target/release/
# xtask). NVIDIA's NVRTC 12.9, ptxas, cuobjdump and nvdisasm come from their PyPI wheels into
# WORK_DIR (default /tmp/sass), fetched once. The source is compiled as the backend compiles it
# (`-arch=compute_90 --fmad=false`, backends/src/cuda/program.rs), then by ptxas for sm_90.
# Prints ptxas's register count, the instruction count and the count of each opcode; the
# disassembly is left in WORK_DIR/KERNEL.sass.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '7p' "$0" | sed 's/^# *//' >&2; exit 2; }
kernel="$1"
xtask="${2:-target/release/xtask}"
work="${3:-/tmp/sass}"
mkdir -p "$work"
x="$work/x"
if [ ! -x "$x/nvidia/cu13/bin/nvdisasm" ]; then
  (cd "$work" && pip download --no-deps -q nvidia-cuda-nvrtc-cu12==12.9.86 \
    nvidia-cuda-nvcc-cu12==12.9.86 nvidia-cuda-runtime-cu12==12.9.79 \
    nvidia-cuda-cuobjdump==13.5.37 nvidia-cuda-nvdisasm==13.5.37)
  for w in "$work"/*.whl; do unzip -q -o "$w" -d "$x"; done
fi
"$xtask" emit "$kernel" --target cuda >"$work/$kernel.cu"
LD_LIBRARY_PATH="$x/nvidia/cuda_nvrtc/lib" python3 - "$work/$kernel.cu" "$work/$kernel.ptx" \
  "-I$x/nvidia/cuda_runtime/include" <<'PY'
import ctypes, sys
nvrtc = ctypes.CDLL("libnvrtc.so.12")
prog = ctypes.c_void_p()
source = open(sys.argv[1], "rb").read()
assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), source, b"kernel.cu", 0, None, None) == 0
opts = [b"-arch=compute_90", b"--fmad=false", b"-default-device", sys.argv[3].encode()]
status = nvrtc.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
size = ctypes.c_size_t()
if status != 0:
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(prog, log)
    sys.exit(log.value.decode())
nvrtc.nvrtcGetPTXSize(prog, ctypes.byref(size))
ptx = ctypes.create_string_buffer(size.value)
nvrtc.nvrtcGetPTX(prog, ptx)
open(sys.argv[2], "wb").write(ptx.value)
PY
"$x/nvidia/cuda_nvcc/bin/ptxas" -arch=sm_90 -v "$work/$kernel.ptx" -o "$work/$kernel.cubin" 2>&1 \
  | grep -E "registers|spill"
PATH="$PATH:$x/nvidia/cu13/bin" "$x/nvidia/cu13/bin/cuobjdump" -sass "$work/$kernel.cubin" \
  2>/dev/null >"$work/$kernel.sass"
ops="$(grep -oE '^\s+/\*[0-9a-f]{4}\*/\s+(@!?U?P[0-9T] )?[A-Z0-9_.]+' "$work/$kernel.sass" \
  | awk '{print $NF}')"
echo "$kernel: $(echo "$ops" | wc -l) instructions"
echo "$ops" | sort | uniq -c | sort -rn
