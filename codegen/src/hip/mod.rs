//! IR → C++ text in the common subset of HIP and CUDA.
//!
//! The output is one `extern "C" __global__` function (see [`crate::abi`]) after a short
//! prelude of `trine_*` helpers, which is the only part that differs between the dialects,
//! but for one statement of the CUDA kernel: a wait on the grid before it in the stream, so
//! that the backend may overlap their launches (see the prelude's `trine_wait_prior_grid`).
//! It comes first, after only the body's leading prefetches
//! (`trine_ir::Kernel::prefetch_prologue`), which so start while the grid before still runs.
//! It includes no header under HIP (hiprtc provides the runtime header itself) and
//! `cuda_fp16.h` under CUDA when the kernel uses f16.
//!
//! Names from the kernel are prefixed by kind (`b_` buffers, `p_` parameters, `s_` shared
//! arrays, `v_` variables) and expressions are `eN`, so no name of the IR can collide with a
//! C++ keyword, a builtin or another declaration. The kernel's own name is kept as is (the
//! backend looks the function up by it), so names the text cannot carry are rejected.

mod groups;
mod prelude;
mod tiles;

use crate::c_family::{self, Intrinsic, Printer, Spelling};
use crate::CodegenError;
use std::fmt::Write;
use trine_ir::{Builtin, Kernel};

/// The C++ dialect to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// HIP, compiled by hiprtc (ROCm) or hipcc.
    Hip,
    /// CUDA, compiled by NVRTC or nvcc.
    Cuda,
}

/// Lowers `kernel` to C++ source for `dialect`.
///
/// Errors: the kernel is invalid, or its name cannot be a C++ function name here (a keyword,
/// a name the lowered text itself uses, or one reserved to the implementation).
pub fn hip(kernel: &Kernel, dialect: Dialect) -> Result<String, CodegenError> {
    let info = crate::validated(kernel)?;
    check_name(&kernel.name)?;
    let k = kernel;
    let tiles = k.capabilities.tiles;
    let wide = k.capabilities.subgroup_width.is_some_and(|w| w != 32);
    if tiles && dialect == Dialect::Hip && wide {
        // RDNA3's WMMA has wave32 and wave64 forms with different operand layouts; the HIP
        // tiles are wave32's (see `tiles`), which gfx11 runs HIP kernels in.
        return Err(CodegenError::Unsupported {
            target: "hip",
            kernel: k.name.clone(),
            what: "matrix tiles outside subgroups of 32",
        });
    }
    if k.capabilities.async_copy && dialect == Dialect::Hip {
        // AMD GPUs before gfx950 have no copy from global to shared memory that bypasses
        // registers; HIP devices run the variants that stage through them.
        return Err(CodegenError::Unsupported {
            target: "hip",
            kernel: k.name.clone(),
            what: "asynchronous copies",
        });
    }
    let groups = k.capabilities.group_mma;
    if groups && dialect == Dialect::Hip {
        // AMD's matrix instructions take their operands from registers; HIP devices run the
        // subgroup tiles.
        return Err(CodegenError::Unsupported {
            target: "hip",
            kernel: k.name.clone(),
            what: "warpgroup products",
        });
    }
    let needs = prelude::Needs {
        // Tiles hold f16 operands, whatever else the kernel computes in.
        f16: c_family::uses_f16(k, &info) || tiles || groups,
        subgroup: k.capabilities.subgroup,
        prior_grid: dialect == Dialect::Cuda,
        dot4: c_family::uses_dot4(k),
        prefetch: k.has_prefetch(),
        tiles,
        copies: k.capabilities.async_copy,
        groups,
    };
    let mut out = prelude::prelude(dialect, needs);
    let mut widths: Vec<u32> = k.group_accs.iter().map(|g| g.cols).collect();
    widths.sort_unstable();
    widths.dedup();
    for cols in widths {
        out.push_str(&groups::mma_helper(cols));
    }
    if !out.is_empty() {
        out.push('\n');
    }

    let buffers = k.buffers.iter().enumerate().map(|(i, b)| {
        let konst = if b.access.can_write() { "" } else { "const " };
        let name = c_family::buffer_name(k, trine_ir::BufferId(i as u32));
        format!(
            "{konst}{}* __restrict__ {name}",
            c_family::elem_type(b.elem)
        )
    });
    let params = k.params.iter().enumerate().map(|(i, p)| {
        let name = c_family::param_name(k, trine_ir::ParamId(i as u32));
        format!("{} {name}", c_family::value_type(p.ty))
    });
    let args = buffers.chain(params).collect::<Vec<_>>().join(", ");
    // HIP's second bound counts waves per SIMD, not workgroups, so only CUDA takes it.
    let resident = match (dialect, k.min_resident) {
        (Dialect::Cuda, Some(n)) => format!(", {n}"),
        _ => String::new(),
    };
    let _ = writeln!(
        out,
        "extern \"C\" __global__ void __launch_bounds__({}{resident}) {}({args}) {{",
        k.invocations(),
        k.name
    );

    let spelling = Gpu { groups };
    let mut p = Printer::new(k, &info, &spelling);
    let dynamic = match dialect {
        Dialect::Cuda => dynamic_layout(k),
        // hiprtc's devices offer 64 KiB, which validation already holds kernels to.
        Dialect::Hip => None,
    };
    if dynamic.is_some() {
        let align = shared_align(k).unwrap_or(16);
        p.line(
            1,
            &format!("extern __shared__ __align__({align}) unsigned char trine_shared[];"),
        );
    }
    for (i, s) in k.shared.iter().enumerate() {
        let name = c_family::shared_name(k, trine_ir::SharedId(i as u32));
        let ty = c_family::elem_type(s.elem);
        if let Some((offsets, _)) = &dynamic {
            let at = offsets[i];
            p.line(1, &format!("{ty}* {name} = ({ty}*)(trine_shared + {at});"));
            continue;
        }
        if let Some(o) = s.over {
            let base = c_family::shared_name(k, o);
            p.line(1, &format!("{ty}* {name} = ({ty}*){base};"));
            continue;
        }
        p.line(
            1,
            &format!(
                "__shared__ {}{} {name}[{}];",
                shared_align(k).map_or(String::new(), |a| format!("__align__({a}) ")),
                c_family::elem_type(s.elem),
                s.len
            ),
        );
    }
    for (i, v) in k.vars.iter().enumerate() {
        let name = c_family::var_name(k, trine_ir::VarId(i as u32));
        let zero = c_family::literal(&spelling, c_family::zero(v.ty));
        p.line(
            1,
            &format!("{} {name} = {zero};", c_family::value_type(v.ty)),
        );
    }
    for (i, t) in k.tiles.iter().enumerate() {
        let name = c_family::tile_name(k, trine_ir::TileId(i as u32));
        p.line(1, &format!("trine_tile_{} {name};", t.role.name()));
    }
    for (i, g) in k.group_accs.iter().enumerate() {
        let name = c_family::group_acc_name(k, trine_ir::GroupAccId(i as u32));
        p.line(1, &format!("float {name}[{}];", g.cols / 2));
    }
    // The leading prefetches run before the wait, while the kernel ahead may still run.
    let (early, rest) = k.body.split_at(if needs.prior_grid {
        k.prefetch_prologue()
    } else {
        0
    });
    p.block(early, 1);
    if needs.prior_grid {
        // Without the next kernel's trigger in kernels on tiles (see the prelude).
        p.line(1, "trine_wait_prior_grid();");
    }
    p.block(rest, 1);
    out.push_str(&p.finish());
    out.push_str("}\n");
    Ok(out)
}

/// Shared memory a CUDA kernel declares statically; beyond it, its arrays live in dynamic
/// shared memory, which the function must be allowed (the device's opt-in maximum) and each
/// launch sizes ([`cuda_dynamic_shared_bytes`]).
pub const CUDA_STATIC_SHARED_BYTES: u64 = 48 * 1024;

/// The alignment, in bytes, a kernel's shared arrays need beyond their elements': tiles load
/// 16-byte rows of them (`ldmatrix`), copies store 16-byte lines, and warpgroup products read
/// whole swizzle atoms.
fn shared_align(k: &Kernel) -> Option<u64> {
    if k.capabilities.group_mma {
        Some(groups::GROUP_ALIGN)
    } else if k.capabilities.tiles || k.capabilities.async_copy {
        Some(16)
    } else if k.shared.iter().any(|s| s.over.is_some()) {
        // An overlay's elements may be wider than its array's.
        Some(16)
    } else if k.stores_shared_pairs() {
        // A pair of halves is one 32-bit store.
        Some(4)
    } else {
        None
    }
}

/// Each array's byte offset in a CUDA kernel's dynamic shared memory (aligned to 16 bytes
/// at least, [`shared_align`]) and the total, or `None` where the arrays are declared
/// statically (at most [`CUDA_STATIC_SHARED_BYTES`]).
fn dynamic_layout(kernel: &Kernel) -> Option<(Vec<u64>, u64)> {
    if kernel.overlaid_shared_bytes() <= CUDA_STATIC_SHARED_BYTES {
        return None;
    }
    let align = shared_align(kernel).unwrap_or(16);
    let mut end = 0u64;
    let mut offsets: Vec<u64> = Vec::with_capacity(kernel.shared.len());
    for s in &kernel.shared {
        // Validation puts an overlay after its array; one that is not gets its own bytes.
        let at = match s.over.and_then(|o| offsets.get(o.0 as usize).copied()) {
            Some(at) => at,
            None => {
                let at = end.next_multiple_of(align);
                end = at + s.bytes();
                at
            }
        };
        offsets.push(at);
    }
    Some((offsets, end))
}

/// The bytes of dynamic shared memory a launch of `kernel`'s CUDA lowering takes: 0 where
/// its arrays are static.
pub fn cuda_dynamic_shared_bytes(kernel: &Kernel) -> u64 {
    dynamic_layout(kernel).map_or(0, |(_, bytes)| bytes)
}

/// The spelling HIP and CUDA share: they differ only in their preludes. A kernel with
/// warpgroup products fences its shared-memory writes for them at each barrier.
struct Gpu {
    groups: bool,
}

const AXES: [&str; 3] = ["x", "y", "z"];

impl Spelling for Gpu {
    fn builtin(&self, b: Builtin, wg: [u32; 3]) -> String {
        // The workgroup size is a compile-time constant of the kernel, so it is spelled as one
        // rather than read from `blockDim`.
        let axis = |a: u8| AXES[a as usize];
        match b {
            Builtin::GlobalId(a) => format!(
                "(unsigned int)blockIdx.{x} * {}u + (unsigned int)threadIdx.{x}",
                wg[a as usize],
                x = axis(a)
            ),
            Builtin::LocalId(a) => format!("(unsigned int)threadIdx.{}", axis(a)),
            Builtin::LocalIndex => local_index(wg),
            Builtin::WorkgroupId(a) => format!("(unsigned int)blockIdx.{}", axis(a)),
            Builtin::NumWorkgroups(a) => format!("(unsigned int)gridDim.{}", axis(a)),
            Builtin::SubgroupSize => "trine_warp_size()".to_string(),
            // Both vendors form subgroups from consecutive linear thread indices.
            Builtin::SubgroupInvocationId => format!("{} % trine_warp_size()", lane(wg)),
            Builtin::SubgroupId => format!("{} / trine_warp_size()", lane(wg)),
        }
    }

    fn store_pair(&self, array: &str, index: &str, value: &str) -> String {
        format!("*(unsigned int*)(&{array}[{index}]) = {value};")
    }

    fn barrier(&self) -> &'static str {
        if self.groups {
            groups::GROUP_BARRIER
        } else {
            "__syncthreads()"
        }
    }

    fn prefetch(&self, pointer: &str) -> Option<String> {
        Some(format!("trine_prefetch({pointer})"))
    }

    /// Each lane reads its member of the quad as a `uint4`: the compilers merge the four
    /// reads of one quad into one 16-byte load, and keep the read-only path of the buffer's
    /// `const __restrict__` pointer.
    fn quad_lane(&self, buffer: &str, quad: &str, lane: u8) -> Option<String> {
        let member = ["x", "y", "z", "w"][usize::from(lane)];
        Some(format!("((const uint4*){buffer})[{quad}].{member}"))
    }

    fn intrinsic(&self, f: Intrinsic) -> &'static str {
        match f {
            Intrinsic::Rsqrt => "rsqrtf",
            Intrinsic::PopCount => "__popc",
            Intrinsic::FloatAsUint => "__float_as_uint",
            Intrinsic::UintAsFloat => "__uint_as_float",
            Intrinsic::FloatAsInt => "__float_as_int",
            Intrinsic::IntAsFloat => "__int_as_float",
            Intrinsic::FMin => "fminf",
            Intrinsic::FMax => "fmaxf",
            Intrinsic::Exp => "expf",
            Intrinsic::Log => "logf",
            Intrinsic::Sin => "sinf",
            Intrinsic::Cos => "cosf",
            Intrinsic::Tanh => "tanhf",
            Intrinsic::Pow => "powf",
        }
    }
}

/// The linear local index as an operand of `%` or `/`.
fn lane(wg: [u32; 3]) -> String {
    let index = local_index(wg);
    if index.contains(" + ") {
        format!("({index})")
    } else {
        index
    }
}

/// `x + y*sx + z*sx*sy`, leaving out axes of size 1 (their index is always 0).
fn local_index(wg: [u32; 3]) -> String {
    let strides = [1, wg[0], wg[0] * wg[1]];
    let terms: Vec<String> = (0..3)
        .filter(|&a| wg[a] > 1)
        .map(|a| match strides[a] {
            1 => format!("(unsigned int)threadIdx.{}", AXES[a]),
            s => format!("(unsigned int)threadIdx.{} * {s}u", AXES[a]),
        })
        .collect();
    if terms.is_empty() {
        "0u".to_string()
    } else {
        terms.join(" + ")
    }
}

/// C++ keywords, and identifiers the lowered text refers to that a function of that name
/// would clash with.
const TAKEN: &[&str] = &[
    "alignas",
    "alignof",
    "and",
    "and_eq",
    "asm",
    "auto",
    "bitand",
    "bitor",
    "bool",
    "break",
    "case",
    "catch",
    "char",
    "char8_t",
    "char16_t",
    "char32_t",
    "class",
    "compl",
    "concept",
    "const",
    "consteval",
    "constexpr",
    "constinit",
    "const_cast",
    "continue",
    "co_await",
    "co_return",
    "co_yield",
    "decltype",
    "default",
    "delete",
    "do",
    "double",
    "dynamic_cast",
    "else",
    "enum",
    "explicit",
    "export",
    "extern",
    "false",
    "float",
    "for",
    "friend",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "mutable",
    "namespace",
    "new",
    "noexcept",
    "not",
    "not_eq",
    "nullptr",
    "operator",
    "or",
    "or_eq",
    "private",
    "protected",
    "public",
    "register",
    "reinterpret_cast",
    "requires",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "static_assert",
    "static_cast",
    "struct",
    "switch",
    "template",
    "this",
    "thread_local",
    "throw",
    "true",
    "try",
    "typedef",
    "typeid",
    "typename",
    "union",
    "unsigned",
    "using",
    "virtual",
    "void",
    "volatile",
    "wchar_t",
    "while",
    "xor",
    "xor_eq",
    "main",
    "threadIdx",
    "blockIdx",
    "blockDim",
    "gridDim",
    "warpSize",
    "expf",
    "logf",
    "sqrtf",
    "rsqrtf",
    "sinf",
    "cosf",
    "tanhf",
    "floorf",
    "fabsf",
    "fmodf",
    "fminf",
    "fmaxf",
    "powf",
    "fmaf",
];

fn check_name(name: &str) -> Result<(), CodegenError> {
    let reserved = name.starts_with("__")
        || name.starts_with("trine_")
        || (name.starts_with('_') && name[1..].starts_with(|c: char| c.is_ascii_uppercase()));
    if reserved || TAKEN.contains(&name) {
        return Err(CodegenError::Write {
            target: "hip",
            kernel: name.to_string(),
            message: "the kernel name is a C++ keyword, reserved, or used by the lowered text"
                .to_string(),
        });
    }
    Ok(())
}
