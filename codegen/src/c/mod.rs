//! IR → C for the CPU backend, compiled at run time by the system C compiler.
//!
//! A workgroup becomes loops over its invocations, split at every synchronisation point (loop
//! fission, as pocl does): each run of statements between barriers is one loop over the
//! invocations (a *region*, printed by the same printer as the HIP text), and the invocations
//! of a workgroup run one after another inside it. [`plan`] splits the body, [`uniform`]
//! decides which control flow around a barrier is workgroup-uniform, [`storage`] which values
//! live across a split (per-invocation arrays) and [`emit`] writes the C. Workgroup-shared
//! memory is an array of the workgroup's C frame.
//!
//! Subgroups are runs of `subgroup_size` consecutive invocations, the width the backend
//! reports. A subgroup operation reads other invocations' values, so it splits regions like a
//! barrier and runs between them over all invocations at once.
//!
//! # ABI
//!
//! ```c
//! void trine_NAME(void* const* buffers, const uint32_t* params, const uint32_t* grid,
//!                 uint64_t wg_begin, uint64_t wg_end);
//! ```
//! - `buffers[i]`: the start of the binding of buffer `i`, aligned to its element type, as a
//!   pointer to that type (`uint16_t` bits for bf16, `_Float16` for f16, bytes for u8/i8).
//!   Pointers are `restrict` unless [`COptions::restrict`] is false: a caller binding
//!   overlapping ranges of one allocation where one is written must use the variant without.
//! - `params[j]`: the 32 bits of parameter `j` (f32, i32 or u32), as `ParamValue::bits`.
//! - `grid[3]`: workgroups per axis, each at least 1.
//! - runs workgroups `wg_begin .. wg_end` of the grid in x-fastest linear order (workgroup
//!   `(x, y, z)` is number `x + y*gx + z*gx*gy`), with `wg_begin < wg_end <= gx*gy*gz`.
//!   Disjoint ranges may run on different threads at once.
//! - Everything per workgroup (shared memory, the per-invocation arrays) lives in the
//!   function's stack frame, at most [`C_MAX_FRAME_BYTES`]: callers run it on threads with
//!   stacks at least that much larger than their own use.
//!
//! # Semantics where C differs from the interpreter
//! - Integer arithmetic wraps through unsigned arithmetic, shifts take the amount modulo 32 and
//!   `i32::MIN / -1` wraps, exactly as the interpreter. Integer division by zero is undefined
//!   (the interpreter reports it), as on GPUs.
//! - Float → integer conversion out of range saturates and NaN gives 0 (the interpreter
//!   reports both). A loop whose variable would wrap past `u32::MAX` stops before that
//!   iteration (the interpreter reports the overflow).
//! - Float results equal the interpreter's, bit for bit, when compiled with
//!   `-ffp-contract=off` (no fused multiply-add but [`trine_ir::Expr::Fma`]): every operation
//!   rounds where the interpreter's does, and transcendentals go through the C library's
//!   double-precision functions, as the interpreter's do (Rust's `f64::ln` is libm's `log`);
//!   e^x is [`trine_ir::exp`]'s sequence of double operations in both, which vectorises.
//! - No bounds checks: an out-of-bounds index, or a shuffle from an inactive lane, reads or
//!   writes whatever is there, as on a GPU (the interpreter reports both). Two invocations of
//!   one workgroup writing and reading the same global memory with no barrier between race,
//!   as on every backend.

mod dots;
mod emit;
mod plan;
mod prelude;
mod spelling;
mod storage;
mod uniform;

use crate::c_family::{self, elem_type, value_type};
use crate::CodegenError;
use std::fmt::Write;
use trine_ir::{BufferId, Kernel, ParamId, Scalar, SharedId, VarId};

/// Most bytes of per-workgroup state (shared memory and per-invocation arrays) a kernel may
/// keep in its C stack frame.
pub const C_MAX_FRAME_BYTES: u64 = 8 << 20;

/// What the C text is specialised for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct COptions {
    /// Width of a subgroup: a power of two from 1 to 128.
    pub subgroup_size: u32,
    /// Whether buffer pointers are `restrict` (see the ABI above).
    pub restrict: bool,
}

impl COptions {
    /// `restrict` pointers, for bindings that do not overlap.
    pub fn new(subgroup_size: u32) -> COptions {
        COptions {
            subgroup_size,
            restrict: true,
        }
    }
}

/// The exported symbol of `kernel`'s C function.
pub fn c_symbol(kernel: &Kernel) -> String {
    format!("trine_{}", kernel.name)
}

/// A kernel's C text and the bytes of per-workgroup state its function keeps in its stack
/// frame (at most [`C_MAX_FRAME_BYTES`]).
pub struct CSource {
    pub text: String,
    pub frame_bytes: u64,
}

/// Lowers `kernel` to C source (see the module documentation for the ABI).
///
/// Errors: the kernel is invalid, its entry symbol would equal a helper of the prelude, the
/// subgroup size is not a power of two from 1 to 128, or its per-workgroup state exceeds
/// [`C_MAX_FRAME_BYTES`].
pub fn c(kernel: &Kernel, options: &COptions) -> Result<String, CodegenError> {
    c_source(kernel, options).map(|s| s.text)
}

/// [`c`], with the size of the function's per-workgroup state.
pub fn c_source(kernel: &Kernel, options: &COptions) -> Result<CSource, CodegenError> {
    let info = crate::validated(kernel)?;
    let k = kernel;
    if k.capabilities.tiles {
        // A CPU has no matrix unit to map a subgroup's tile onto; its kernels are the scalar
        // variants.
        return Err(CodegenError::Unsupported {
            target: "c",
            kernel: k.name.clone(),
            what: "matrix tiles",
        });
    }
    if k.capabilities.group_mma {
        return Err(CodegenError::Unsupported {
            target: "c",
            kernel: k.name.clone(),
            what: "warpgroup products",
        });
    }
    if k.capabilities.async_copy {
        // The CPU's variants stage through private variables, which its caches serve alike.
        return Err(CodegenError::Unsupported {
            target: "c",
            kernel: k.name.clone(),
            what: "asynchronous copies",
        });
    }
    let fail = |message: String| CodegenError::Write {
        target: "c",
        kernel: k.name.clone(),
        message,
    };
    let symbol = c_symbol(k);
    if prelude::HELPERS.contains(&symbol.as_str()) {
        return Err(fail(format!(
            "the entry symbol {symbol} is the name of a prelude helper"
        )));
    }
    let sg = options.subgroup_size;
    if !sg.is_power_of_two() || sg > 128 {
        return Err(fail(format!(
            "subgroup size {sg} is not a power of two from 1 to 128"
        )));
    }

    let uniformity = uniform::Uniformity::of(k);
    let sums = dots::sums(k, &info, &uniformity);
    let plan = plan::Plan::of(k, &uniformity, sums);
    let st = storage::Storage::of(k, &plan, &uniformity);
    let dialect = spelling::C { subgroup_size: sg };
    let (body, masks) = emit::Emitter::new(k, &info, &plan, &st, &dialect).body(2);

    let wg = k.invocations();
    let wg64 = wg as u64;
    let array_vars: Vec<VarId> = (0..k.vars.len() as u32)
        .map(VarId)
        .filter(|&v| st.var(v) == storage::VarClass::Array)
        .collect();
    let frame = k.shared_bytes()
        + st.exprs_in(storage::Place::Array)
            .map(|e| wg64 * emit::c_size(info.ty(e)))
            .sum::<u64>()
        + array_vars
            .iter()
            .map(|v| wg64 * emit::c_size(k.vars[v.0 as usize].ty))
            .sum::<u64>()
        + masks as u64 * wg64;
    if frame > C_MAX_FRAME_BYTES {
        return Err(fail(format!(
            "{frame} bytes of per-workgroup state exceed the limit of {C_MAX_FRAME_BYTES}"
        )));
    }

    let mut out = prelude::prelude(
        c_family::uses_f16(k, &info),
        c_family::uses_dot4(k),
        k.uses_unary(trine_ir::UnaryOp::Exp),
        reduces_f32(k, &info),
    );
    out.push('\n');
    let _ = writeln!(
        out,
        "void {symbol}(void* const* buffers, const uint32_t* params, const uint32_t* grid, \
         uint64_t wg_begin, uint64_t wg_end) {{"
    );
    let restrict = if options.restrict { "restrict " } else { "" };
    for (i, b) in k.buffers.iter().enumerate() {
        let konst = if b.access.can_write() { "" } else { "const " };
        let t = format!("{konst}{}*", elem_type(b.elem));
        let name = c_family::buffer_name(k, BufferId(i as u32));
        let _ = writeln!(out, "    {t} {restrict}{name} = ({t})buffers[{i}];");
    }
    for (j, p) in k.params.iter().enumerate() {
        let name = c_family::param_name(k, ParamId(j as u32));
        let value = match p.ty {
            Scalar::F32 => format!("trine_u_as_f(params[{j}])"),
            Scalar::I32 => format!("(int)params[{j}]"),
            _ => format!("params[{j}]"),
        };
        let _ = writeln!(out, "    const {} {name} = {value};", value_type(p.ty));
    }
    out.push_str(
        "    const uint32_t grid_x = grid[0], grid_y = grid[1], grid_z = grid[2];\n\
         \x20   uint32_t wg_x = (uint32_t)(wg_begin % grid_x);\n\
         \x20   uint32_t wg_y = (uint32_t)(wg_begin / grid_x % grid_y);\n\
         \x20   uint32_t wg_z = (uint32_t)(wg_begin / grid_x / grid_y);\n\
         \x20   (void)grid_z;\n\
         \x20   for (uint64_t wg = wg_begin; wg < wg_end; wg++) {\n",
    );
    for (i, s) in k.shared.iter().enumerate() {
        let name = c_family::shared_name(k, SharedId(i as u32));
        let t = elem_type(s.elem);
        // Reached only through a restrict pointer: once GCC's induction-variable pass has
        // turned an index into a pointer, the array's name no longer tells it that the
        // per-invocation arrays are elsewhere, and it keeps storing sums that a loop over
        // shared memory updates instead of holding them in registers.
        let _ = writeln!(out, "        {t} {name}_frame[{}];", s.len);
        let _ = writeln!(out, "        {t}* restrict {name} = {name}_frame;");
    }
    for e in st.exprs_in(storage::Place::Array) {
        let _ = writeln!(
            out,
            "        {} w_{}[{wg}];",
            lane_type(info.ty(e)),
            c_family::expr_name(e)
        );
    }
    for e in st.exprs_in(storage::Place::Scalar) {
        let ty = info.ty(e);
        let zero = c_family::literal(&dialect, c_family::zero(ty));
        let _ = writeln!(
            out,
            "        {} {} = {zero};",
            value_type(ty),
            emit::scalar(e)
        );
    }
    for &v in &array_vars {
        let ty = lane_type(k.vars[v.0 as usize].ty);
        let name = c_family::var_name(k, v);
        // Private variables start at zero in every invocation of every workgroup.
        let _ = writeln!(out, "        {ty} w_{name}[{wg}];");
        let _ = writeln!(out, "        memset(w_{name}, 0, sizeof w_{name});");
    }
    for (i, v) in k.vars.iter().enumerate() {
        if st.var(VarId(i as u32)) == storage::VarClass::Uniform {
            let name = c_family::var_name(k, VarId(i as u32));
            let zero = c_family::literal(&dialect, c_family::zero(v.ty));
            let _ = writeln!(out, "        {} {name} = {zero};", value_type(v.ty));
        }
    }
    for m in 0..masks {
        let _ = writeln!(out, "        bool m{m}[{wg}];");
    }
    out.push_str(&body);
    out.push_str(
        "        if (++wg_x == grid_x) {\n\
         \x20           wg_x = 0u;\n\
         \x20           if (++wg_y == grid_y) {\n\
         \x20               wg_y = 0u;\n\
         \x20               wg_z++;\n\
         \x20           }\n\
         \x20       }\n\
         \x20   }\n\
         }\n",
    );
    Ok(CSource {
        text: out,
        frame_bytes: frame,
    })
}

/// The element type of a per-invocation array of `ty` values: a condition as a byte, which
/// GCC loads as a vector (it finds none for `_Bool`, and left every loop over invocations that
/// reads one in scalar code).
fn lane_type(ty: Scalar) -> &'static str {
    match ty {
        Scalar::Bool => "uint8_t",
        _ => value_type(ty),
    }
}

/// Whether the kernel sums, or takes the least or greatest of, f32 values over subgroups.
fn reduces_f32(k: &Kernel, info: &trine_ir::Info) -> bool {
    use trine_ir::{Expr, SubgroupOp};
    k.exprs.iter().any(|e| match *e {
        Expr::Subgroup {
            op: SubgroupOp::Sum | SubgroupOp::Min | SubgroupOp::Max,
            arg,
        } => info.ty(arg) == Scalar::F32,
        _ => false,
    })
}
