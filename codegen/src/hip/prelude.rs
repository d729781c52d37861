//! The text before the kernel: the `trine_*` helpers the printer's output calls, per dialect.
//! Only the parts a kernel uses are emitted, which keeps NVRTC from parsing `cuda_fp16.h` for
//! kernels without f16.

use super::Dialect;
use crate::c_family::{binary, dot4_bytes, shuffle_fn, subgroup_fn, value_type, ByteSigns};
use std::fmt::Write;
use trine_ir::{BinaryOp, Scalar, SubgroupOp};

/// What a kernel uses that needs helpers.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Needs {
    pub f16: bool,
    pub subgroup: bool,
    /// The wait on the grid before it (`trine_wait_prior_grid`, CUDA only).
    pub prior_grid: bool,
    /// The packed 8-bit dot products (`BinaryOp::Dot4I8`, `Dot4U8`).
    pub dot4: bool,
    /// `Stmt::Prefetch` (`trine_prefetch`).
    pub prefetch: bool,
    /// Matrix tiles (see [`super::tiles`]).
    pub tiles: bool,
    /// Asynchronous copies (CUDA only: `trine_copy_*`).
    pub copies: bool,
    /// Warpgroup products (CUDA only; see [`super::groups`]). Their per-width helpers come
    /// after the prelude.
    pub groups: bool,
}

const FN: &str = "__device__ __forceinline__";

pub(crate) fn prelude(dialect: Dialect, needs: Needs) -> String {
    let mut out = String::new();
    if needs.f16 {
        let (include, ty, h2f, f2h, bits, pack) = match dialect {
            // hiprtc's built-in header already defines `__half`: including hip_fp16.h there is
            // a redefinition error, so HIP uses the compiler's own `_Float16`.
            Dialect::Hip => (
                "",
                "_Float16",
                "(float)h",
                "(trine_f16)f",
                "__builtin_bit_cast(trine_f16, b)",
                concat!(
                    "__builtin_bit_cast(unsigned int, (_Float16 __attribute__((ext_vector_type(2))))",
                    "{(trine_f16)a, (trine_f16)b})"
                ),
            ),
            Dialect::Cuda => (
                "#include <cuda_fp16.h>\n",
                "__half",
                "__half2float(h)",
                "__float2half_rn(f)",
                "__ushort_as_half(b)",
                concat!(
                    "(unsigned int)__half_as_ushort(__float2half_rn(a))",
                    " | (unsigned int)__half_as_ushort(__float2half_rn(b)) << 16"
                ),
            ),
        };
        let _ = write!(
            out,
            "{include}typedef {ty} trine_f16;\n\
             {FN} float trine_h2f(trine_f16 h) {{ return {h2f}; }}\n\
             {FN} trine_f16 trine_f2h(float f) {{ return {f2h}; }}\n\
             {FN} trine_f16 trine_h_bits(unsigned short b) {{ return {bits}; }}\n\
             {FN} unsigned int trine_pack_halves(float a, float b) {{ return {pack}; }}\n"
        );
    }
    if needs.subgroup {
        out.push_str(match dialect {
            Dialect::Hip => WARP_SIZE_HIP,
            Dialect::Cuda => WARP_SIZE_CUDA,
        });
        let types = [Scalar::F32, Scalar::I32, Scalar::U32, Scalar::F16];
        let types = types.iter().filter(|&&t| needs.f16 || t != Scalar::F16);
        for &ty in types.clone() {
            shuffle(&mut out, dialect, ty);
        }
        for &ty in types {
            for (op, combine) in [
                (SubgroupOp::Sum, BinaryOp::Add),
                (SubgroupOp::Min, BinaryOp::Min),
                (SubgroupOp::Max, BinaryOp::Max),
            ] {
                reduction(&mut out, op, combine, ty);
            }
        }
    }
    if needs.prior_grid {
        prior_grid_cuda(&mut out, !needs.tiles && !needs.groups);
    }
    if needs.prefetch {
        out.push_str(match dialect {
            Dialect::Hip => PREFETCH_HIP,
            Dialect::Cuda => PREFETCH_CUDA,
        });
    }
    if needs.tiles {
        out.push_str(match dialect {
            Dialect::Hip => super::tiles::TILES_HIP,
            Dialect::Cuda => super::tiles::TILES_CUDA,
        });
    }
    if needs.copies {
        out.push_str(COPIES_CUDA);
    }
    if needs.groups {
        out.push_str(super::groups::GROUPS_CUDA);
    }
    if needs.dot4 {
        match dialect {
            Dialect::Cuda => out.push_str(DOT4_CUDA),
            Dialect::Hip => dot4_hip(&mut out),
        }
    }
    out
}

/// Writes `trine_wait_prior_grid`, called first in every CUDA kernel. The CUDA backend
/// launches kernels on sm_90 and later with programmatic stream serialisation, so a kernel's
/// blocks may start while the kernel before it in the stream still runs: each waits here
/// until that grid has finished and its writes are visible (`griddepcontrol.wait`, which
/// returns at once when nothing precedes it), then lets the next kernel's blocks launch in
/// turn. Triggering only after the wait keeps at most one kernel ahead resident: triggered
/// before it, every kernel of a decode step launched as soon as the one ahead had started,
/// and decode was a fifth slower (docs/bench/decode.md). Kernels on matrix tiles or
/// warpgroup products only wait (no `trigger`), so the kernel after one starts when it ends:
/// a prompt's tiled products and attention are several waves of large workgroups, which the
/// trigger slowed (docs/bench/prefill.md), while decode, which has no tiles, keeps its
/// overlap. Before sm_90 no launch overlaps and this is empty.
fn prior_grid_cuda(out: &mut String, trigger: bool) {
    out.push_str(
        "__device__ __forceinline__ void trine_wait_prior_grid() {
#if __CUDA_ARCH__ >= 900
  asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");
",
    );
    if trigger {
        out.push_str("  asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");\n");
    }
    out.push_str("#endif\n}\n");
}

/// `trine_ir::CopyOp`: `cp.async` of 16 bytes, which goes through L2 only (`.cg`) into shared
/// memory, and its batches; the shared address is converted from the generic one. Before
/// sm_80, which has no `cp.async`, a copy is a plain 16-byte load and store, done by the time
/// the wait is reached.
const COPIES_CUDA: &str =
    "__device__ __forceinline__ void trine_copy_async(void* dst, const void* src) {
#if __CUDA_ARCH__ >= 800
  unsigned int s = (unsigned int)__cvta_generic_to_shared(dst);
  asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16;\" :: \"r\"(s), \"l\"(src) : \"memory\");
#else
  *(uint4*)dst = *(const uint4*)src;
#endif
}
__device__ __forceinline__ void trine_copy_commit() {
#if __CUDA_ARCH__ >= 800
  asm volatile(\"cp.async.commit_group;\" ::: \"memory\");
#endif
}
template <int N> __device__ __forceinline__ void trine_copy_wait() {
#if __CUDA_ARCH__ >= 800
  asm volatile(\"cp.async.wait_group %0;\" :: \"n\"(N) : \"memory\");
#endif
}
";

/// `trine_ir::Stmt::Prefetch`: the line holding `p` into L2, through its generic address
/// (no state space), so nothing assumes how generic and global addresses relate.
const PREFETCH_CUDA: &str = "__device__ __forceinline__ void trine_prefetch(const void* p) {
  asm volatile(\"prefetch.L2 [%0];\" :: \"l\"(p));
}
";

/// The pre-gfx12 AMD GPUs hiprtc compiles for have no prefetch instruction: the hint is dropped.
const PREFETCH_HIP: &str = "__device__ __forceinline__ void trine_prefetch(const void*) {}\n";

/// The subgroup width. Every NVIDIA GPU runs warps of 32, while CUDA's `warpSize` is a
/// variable read at run time: with it, NVRTC kept the butterflies as loops and divided by it
/// with a dozen instructions, on the path of every reduction.
const WARP_SIZE_CUDA: &str =
    "__device__ __forceinline__ unsigned int trine_warp_size() { return 32u; }\n";

/// AMD's wavefronts are 32 or 64 wide, by arch and compile mode: hiprtc's `warpSize` says which.
const WARP_SIZE_HIP: &str =
    "__device__ __forceinline__ unsigned int trine_warp_size() { return (unsigned int)warpSize; }\n";

/// The packed dot products on NVIDIA's `dp4a` (sm_61 and later, every target NVRTC builds).
const DOT4_CUDA: &str = "\
__device__ __forceinline__ int trine_dot4i8(unsigned int a, unsigned int b) { return __dp4a((int)a, (int)b, 0); }
__device__ __forceinline__ unsigned int trine_dot4u8(unsigned int a, unsigned int b) { return __dp4a(a, b, 0u); }
";

/// The AMD arches with `v_dot4_i32_i8` and `v_dot4_u32_u8` (LLVM's `dot1-insts` and
/// `dot7-insts`: Vega 20, CDNA, Navi 12/14 and every RDNA2 but the BC-250's gfx1013), as
/// their predefined macros. clang-19 and HIP 5.2's hiprtc take `__builtin_amdgcn_sdot4` and
/// `udot4` for exactly these; gfx11 and gfx12 have `v_dot4_i32_iu8` (`sudot4`, its operands'
/// signs as arguments) and `udot4`; gfx90c, gfx1010 and gfx1013 have neither.
const SDOT4_ARCHES: [&str; 15] = [
    "gfx906", "gfx908", "gfx90a", "gfx940", "gfx941", "gfx942", "gfx1011", "gfx1012", "gfx1030",
    "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036",
];

/// The packed dot products on the dot instructions of the arch hiprtc compiles for (one text
/// serves every arch, so it chooses by the arch's predefined macros), else as the C lowering's
/// four byte products.
fn dot4_hip(out: &mut String) {
    let sdot4: Vec<String> = SDOT4_ARCHES
        .iter()
        .map(|a| format!("defined(__{a}__)"))
        .collect();
    let _ = writeln!(
        out,
        "#if {}
#define TRINE_SDOT4 1
#endif
#if defined(__GFX11__) || defined(__GFX12__)
#define TRINE_SUDOT4 1
#endif",
        sdot4.join(" || ")
    );
    let signed = dot4_bytes(ByteSigns::Signed, "a", "b");
    let unsigned = dot4_bytes(ByteSigns::Unsigned, "a", "b");
    let _ = write!(
        out,
        "{FN} int trine_dot4i8(unsigned int a, unsigned int b) {{
#if defined(TRINE_SDOT4)
    return __builtin_amdgcn_sdot4((int)a, (int)b, 0, false);
#elif defined(TRINE_SUDOT4)
    return __builtin_amdgcn_sudot4(true, (int)a, true, (int)b, 0, false);
#else
    return {signed};
#endif
}}
{FN} unsigned int trine_dot4u8(unsigned int a, unsigned int b) {{
#if defined(TRINE_SDOT4) || defined(TRINE_SUDOT4)
    return __builtin_amdgcn_udot4(a, b, 0u, false);
#else
    return {unsigned};
#endif
}}
"
    );
}

/// `trine_shfl_xor_T(v, m)`: lane `self ^ m`'s value. f16 travels as float (exact both ways),
/// since not every dialect shuffles 16-bit values.
fn shuffle(out: &mut String, dialect: Dialect, ty: Scalar) {
    let t = value_type(ty);
    let f = shuffle_fn(ty);
    let shfl = |v: &str| match dialect {
        Dialect::Hip => format!("__shfl_xor({v}, (int)m)"),
        Dialect::Cuda => format!("__shfl_xor_sync(0xffffffffu, {v}, (int)m)"),
    };
    let body = match ty {
        Scalar::F16 => {
            format!("trine_f2h({}(trine_h2f(v), m))", shuffle_fn(Scalar::F32))
        }
        Scalar::U32 => format!("(unsigned int){}", shfl("(int)v")),
        _ => shfl("v"),
    };
    let _ = writeln!(
        out,
        "{FN} {t} {f}({t} v, unsigned int m) {{ return {body}; }}"
    );
}

/// `trine_sg_OP_T(v)`: a butterfly over the whole subgroup, every lane ending with the
/// result. Each step combines with the printer's own operator text, so an f16 sum rounds after
/// every addition and an i32 sum wraps, as the IR's arithmetic does. A butterfly reads every
/// lane, so it is exact only when the whole subgroup is active: uniform control flow and a
/// workgroup size that is a multiple of the subgroup width.
fn reduction(out: &mut String, op: SubgroupOp, combine: BinaryOp, ty: Scalar) {
    let t = value_type(ty);
    let f = subgroup_fn(op, ty);
    let shfl = shuffle_fn(ty);
    let step = binary(&super::Gpu { groups: false }, combine, ty, "v", "o");
    let _ = write!(
        out,
        "{FN} {t} {f}({t} v) {{\n\
         \x20   for (unsigned int m = trine_warp_size() / 2u; m > 0u; m >>= 1) {{\n\
         \x20       const {t} o = {shfl}(v, m);\n\
         \x20       v = {step};\n\
         \x20   }}\n\
         \x20   return v;\n\
         }}\n"
    );
}
