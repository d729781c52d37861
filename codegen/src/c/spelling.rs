//! How plain C spells what the shared printer asks of a dialect.

use crate::c_family::{Intrinsic, Spelling};
use trine_ir::{Builtin, Scalar};

/// The C dialect, for a subgroup width chosen by the backend.
pub(super) struct C {
    pub subgroup_size: u32,
}

const AXES: [&str; 3] = ["x", "y", "z"];

/// The axes of a workgroup size with more than one invocation.
pub(super) fn lane_axes(wg: [u32; 3]) -> Vec<usize> {
    (0..3).filter(|&a| wg[a] > 1).collect()
}

/// The local id on `axis` inside a region's loop over invocations: `lid` when the workgroup
/// has one axis (the region loops over `lid` itself), `lx`/`ly`/`lz` when it has several
/// (nested loops), `0u` on an axis of size 1.
pub(super) fn local_id(axis: usize, wg: [u32; 3]) -> String {
    let axes = lane_axes(wg);
    if wg[axis] == 1 {
        "0u".to_string()
    } else if axes.len() == 1 {
        "lid".to_string()
    } else {
        format!("l{}", AXES[axis])
    }
}

pub(super) fn axis_name(axis: usize) -> &'static str {
    AXES[axis]
}

impl Spelling for C {
    fn builtin(&self, b: Builtin, wg: [u32; 3]) -> String {
        let sg = self.subgroup_size;
        match b {
            Builtin::GlobalId(a) => {
                let a = a as usize;
                if wg[a] == 1 {
                    format!("wg_{}", AXES[a])
                } else {
                    format!("wg_{} * {}u + {}", AXES[a], wg[a], local_id(a, wg))
                }
            }
            Builtin::LocalId(a) => local_id(a as usize, wg),
            Builtin::LocalIndex => "lid".to_string(),
            Builtin::WorkgroupId(a) => format!("wg_{}", AXES[a as usize]),
            Builtin::NumWorkgroups(a) => format!("grid_{}", AXES[a as usize]),
            Builtin::SubgroupSize => format!("{sg}u"),
            // Subgroups are consecutive runs of `sg` linear indices, as on GPUs and in the
            // interpreter.
            Builtin::SubgroupInvocationId => format!("lid % {sg}u"),
            Builtin::SubgroupId => format!("lid / {sg}u"),
        }
    }

    /// Fission splits regions at barriers, so the printer never meets one. Were it to, the
    /// text would fail to compile with this message rather than run without the barrier.
    fn barrier(&self) -> &'static str {
        "_Static_assert(0, \"trine: a barrier inside a fission region\")"
    }

    fn intrinsic(&self, f: Intrinsic) -> &'static str {
        match f {
            Intrinsic::Rsqrt => "trine_rsqrtf",
            Intrinsic::PopCount => "__builtin_popcount",
            Intrinsic::FloatAsUint => "trine_f_as_u",
            Intrinsic::UintAsFloat => "trine_u_as_f",
            Intrinsic::FloatAsInt => "trine_f_as_i",
            Intrinsic::IntAsFloat => "trine_i_as_f",
            Intrinsic::FMin => "trine_fminf",
            Intrinsic::FMax => "trine_fmaxf",
            Intrinsic::Exp => "trine_expf",
            Intrinsic::Log => "trine_logf",
            Intrinsic::Sin => "trine_sinf",
            Intrinsic::Cos => "trine_cosf",
            Intrinsic::Tanh => "trine_tanhf",
            Intrinsic::Pow => "trine_powf",
        }
    }

    /// Out of range saturates and NaN gives 0 (Rust's `as`), where C leaves it undefined.
    fn float_to_int(&self, to: Scalar, x: &str) -> String {
        match to {
            Scalar::I32 => format!("trine_cvt_i32({x})"),
            _ => format!("trine_cvt_u32({x})"),
        }
    }

    /// With a step above 1 the variable could wrap past `u32::MAX` and loop forever (the
    /// interpreter reports the overflow): the loop stops before the iteration whose increment
    /// would wrap instead.
    fn wide_indices(&self) -> bool {
        true
    }

    /// The prelude's `trine_dot4u8i8` is one `vpdpbusd` where the CPU has AVX512-VNNI, a
    /// third of the signed product's instructions.
    fn mixed_dot4(&self) -> bool {
        true
    }

    /// A global id is `wg * size + lid`: as a 32-bit sum that may wrap, GCC will not vectorise
    /// a loop that indexes with it and calls a function's vector version (it picks 64-bit
    /// lanes and finds no version of that width).
    fn wide_builtin(&self, b: Builtin, wg: [u32; 3]) -> Option<String> {
        match b {
            Builtin::GlobalId(a) if wg[a as usize] > 1 => {
                let a = a as usize;
                Some(format!(
                    "(uint64_t)wg_{} * {}u + {}",
                    AXES[a],
                    wg[a],
                    local_id(a, wg)
                ))
            }
            _ => None,
        }
    }

    fn loop_end(&self, end: &str, step: u32) -> String {
        if step > 1 {
            format!("trine_loop_end({end}, {step}u)")
        } else {
            end.to_string()
        }
    }
}
