//! A case: one kernel, its inputs, which buffers it writes with their plain-Rust expected
//! values, and how close a backend must come to the reference. The interpreter's run of a case
//! is the reference every backend is compared with (the conformance harness, in
//! `trine-conformance`, does that on each backend); here the interpreter itself is checked
//! against the plain-Rust values.

use crate::compare::{judge, Verdict};
use half::{bf16, f16};
use trine_ir::interp::interpret;
use trine_ir::{Kernel, ParamValue, Scalar};

/// Subgroup width the reference runs with: one no device uses, so that a kernel that assumes
/// its device's width disagrees with the reference.
pub const REFERENCE_SUBGROUP: u32 = 16;

/// NMSE bound for element-wise f32 work: ggml's test-backend-ops default.
pub const NMSE_DEFAULT: f64 = 1e-7;
/// Softmax and anything with exp/log in a reduction.
pub const NMSE_SOFTMAX: f64 = 1e-6;
/// NMSE bound of the foundation suite's tiled matmul ([`crate::kernels::matmul`]): 100 times
/// the worst measured over the matrix products, 5.0e-13 (the interpreter against the f64
/// reference, `matmul/f32,f16/16x576x1536/bT`, a case of the op library's matmul since
/// deleted: K = 1536 f32 roundings per output). Measured over every
/// case, f32 and f16 inputs alike: cuda and vulkan on the GPUs, and the cpu, bit for bit with
/// the interpreter; vulkan and wgpu on lavapipe at most 6.5e-14 (the conformance records,
/// docs/conformance/README.md). f16 inputs need no bound of their own (at most 3.4e-14): their
/// products are exact in f32. The margin is for devices not yet measured that sum in another
/// order; a lost tile of K (16 of 1536 terms) still costs about 1e-2. Not ggml's 5e-4, which
/// would pass an output 2% off everywhere.
pub const NMSE_MATMUL: f64 = 5e-11;
/// Integer and bit kernels must match exactly.
pub const NMSE_EXACT: f64 = 0.0;

/// The NMSE bound of values computed in f32 within `bound` of a reference (or of another
/// device's) and then rounded to f16, against that reference rounded alike. Where two f32
/// results differ by a relative `e`, they round to different f16 neighbours only within `e`
/// of a halfway point between them, whose relative spacing is 2⁻¹¹ to 2⁻¹⁰: a share of at
/// most `2e·2¹¹` of the values, each then off by one spacing, at most 2⁻¹⁰ of it, an NMSE of
/// at most `e·2⁻⁸`, with `e` the square root of `bound`. A wrong value is off by far more.
pub fn rounded_to_half(bound: f64) -> f64 {
    bound + bound.sqrt() / 256.0
}

/// One buffer of a case.
#[derive(Clone, Debug)]
pub struct CaseBuffer {
    pub name: String,
    pub elem: Scalar,
    /// Initial contents.
    pub data: Vec<u8>,
    /// Whether the kernel writes it (then it is compared and guarded).
    pub output: bool,
    /// The plain-Rust reference for an output, in f64, to check the interpreter itself.
    pub expected: Option<Vec<f64>>,
    /// An output judged exactly whatever the case's bound: packed codes, whose NMSE as
    /// numbers would hide a wrong low byte.
    pub exact: bool,
}

impl CaseBuffer {
    /// The NMSE bound this buffer is judged with in a case of bound `bound`.
    pub fn bound(&self, bound: f64) -> f64 {
        if self.exact {
            NMSE_EXACT
        } else {
            bound
        }
    }
}

#[derive(Clone, Debug)]
pub struct Case {
    /// `kernel/dtype/shape`, unique in the suite.
    pub name: String,
    pub kernel: Kernel,
    /// Used on backends without a capability `kernel` declares (subgroups).
    pub fallback: Option<Kernel>,
    pub grid: [u32; 3],
    /// The fallback's grid where it differs from `grid` (its workgroups take other blocks).
    pub fallback_grid: Option<[u32; 3]>,
    pub buffers: Vec<CaseBuffer>,
    pub params: Vec<ParamValue>,
    pub bound: f64,
}

impl Case {
    pub fn new(name: impl Into<String>, kernel: Kernel, grid: [u32; 3]) -> Case {
        Case {
            name: name.into(),
            kernel,
            fallback: None,
            grid,
            fallback_grid: None,
            buffers: vec![],
            params: vec![],
            bound: NMSE_DEFAULT,
        }
    }

    pub fn input(mut self, name: &str, elem: Scalar, data: Vec<u8>) -> Case {
        self.buffers.push(CaseBuffer {
            name: name.into(),
            elem,
            data,
            output: false,
            expected: None,
            exact: false,
        });
        self
    }

    /// An output buffer with initial contents and its plain-Rust expected values.
    pub fn output(mut self, name: &str, elem: Scalar, data: Vec<u8>, expected: Vec<f64>) -> Case {
        self.buffers.push(CaseBuffer {
            name: name.into(),
            elem,
            data,
            output: true,
            expected: Some(expected),
            exact: false,
        });
        self
    }

    /// [`Case::output`] judged exactly (see [`CaseBuffer::exact`]).
    pub fn output_exact(
        mut self,
        name: &str,
        elem: Scalar,
        data: Vec<u8>,
        expected: Vec<f64>,
    ) -> Case {
        self = self.output(name, elem, data, expected);
        if let Some(b) = self.buffers.last_mut() {
            b.exact = true;
        }
        self
    }

    pub fn params(mut self, params: Vec<ParamValue>) -> Case {
        self.params = params;
        self
    }

    pub fn bound(mut self, bound: f64) -> Case {
        self.bound = bound;
        self
    }

    pub fn fallback(mut self, kernel: Kernel) -> Case {
        self.fallback = Some(kernel);
        self
    }

    /// [`Case::fallback`] dispatched over a grid of its own.
    pub fn fallback_on(mut self, kernel: Kernel, grid: [u32; 3]) -> Case {
        self.fallback = Some(kernel);
        self.fallback_grid = Some(grid);
        self
    }

    /// The grid to dispatch `kernel` (the case's kernel or its fallback) over.
    pub fn grid_for(&self, kernel: &Kernel) -> [u32; 3] {
        match (&self.fallback, self.fallback_grid) {
            (Some(f), Some(grid)) if f.name == kernel.name && f.name != self.kernel.name => grid,
            _ => self.grid,
        }
    }

    /// Runs the kernel on the reference interpreter (subgroups [`REFERENCE_SUBGROUP`] wide, or
    /// the width the kernel requires) over the case's buffers, and returns every buffer after
    /// the run.
    pub fn interpret(&self) -> Result<Vec<Vec<u8>>, String> {
        let width = self.kernel.capabilities.subgroup_width;
        self.interpret_at(width.unwrap_or(REFERENCE_SUBGROUP))
    }

    /// [`Case::interpret`] with subgroups `subgroup_size` wide: a device's own width, to
    /// compare with it bit for bit.
    pub fn interpret_at(&self, subgroup_size: u32) -> Result<Vec<Vec<u8>>, String> {
        let mut bufs: Vec<Vec<u8>> = self.buffers.iter().map(|b| b.data.clone()).collect();
        interpret(
            &self.kernel,
            self.grid,
            &mut bufs,
            &self.params,
            subgroup_size,
        )
        .map_err(|e| e.to_string())?;
        Ok(bufs)
    }

    /// Judges the buffers after a run (`buffers`, in the case's order) against the plain-Rust
    /// expected values: one verdict per output that has them.
    pub fn judge_expected(&self, buffers: &[Vec<u8>]) -> Vec<Verdict> {
        self.buffers
            .iter()
            .zip(buffers)
            .filter_map(|(b, out)| {
                let want = b.expected.as_ref()?;
                Some(judge(
                    &b.name,
                    want,
                    &decode(b.elem, out),
                    b.bound(self.bound),
                ))
            })
            .collect()
    }

    /// The interpreter against the plain-Rust references: the worst NMSE over the outputs
    /// that have expected values (`None` when none has), or the first failure's reason.
    pub fn check_reference(&self) -> Result<Option<f64>, String> {
        let mut worst: Option<f64> = None;
        for v in self.judge_expected(&self.interpret()?) {
            match v {
                Verdict::Pass { nmse } => worst = Some(worst.map_or(nmse, |w| w.max(nmse))),
                Verdict::Fail { reason, .. } => return Err(reason),
            }
        }
        Ok(worst)
    }
}

/// Deterministic pseudo-random numbers (splitmix64), so every run tests the same inputs.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// Uniform in [lo, hi).
    pub fn f32(&mut self, lo: f32, hi: f32) -> f32 {
        let unit = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * unit
    }

    pub fn f32s(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.f32(lo, hi)).collect()
    }
}

pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    bytemuck::cast_slice(v).to_vec()
}

pub fn u32_bytes(v: &[u32]) -> Vec<u8> {
    bytemuck::cast_slice(v).to_vec()
}

pub fn i32_bytes(v: &[i32]) -> Vec<u8> {
    bytemuck::cast_slice(v).to_vec()
}

pub fn f16_bytes(v: &[f16]) -> Vec<u8> {
    bytemuck::cast_slice(v).to_vec()
}

/// Decodes a buffer of `elem` into f64 values for comparison.
pub fn decode(elem: Scalar, bytes: &[u8]) -> Vec<f64> {
    let n = elem.size();
    bytes
        .chunks_exact(n)
        .map(|c| match elem {
            Scalar::F32 => f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64,
            Scalar::F16 => f16::from_le_bytes([c[0], c[1]]).to_f64(),
            Scalar::BF16 => bf16::from_le_bytes([c[0], c[1]]).to_f64(),
            Scalar::I32 => i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64,
            Scalar::U32 | Scalar::Bool => u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64,
            Scalar::U8 => c[0] as f64,
            Scalar::I8 => c[0] as i8 as f64,
        })
        .collect()
}
