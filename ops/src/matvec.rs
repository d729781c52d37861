//! Matrix-vector product `y = W·x` for decode: W row-major `[rows × cols]` in f32, f16, Q8_0,
//! Q4_0 or Q4_1 (rows of 32-element blocks, dequantised in registers inside the kernel, never
//! beforehand), x and y f32.
//!
//! A workgroup computes `rows_per_workgroup` rows. Its invocations stride over the columns
//! (plain floats) or over 8-element segments of the blocks (quantized), loading each slice of x
//! once and using it for all its rows; then each row's partial sums are reduced across the
//! workgroup, with subgroup sums ([`Reduce::Subgroup`]) or a shared-memory tree
//! ([`Reduce::Shared`], the fallback for devices without subgroups). A spec may fuse the RMS
//! norm before the product and a residual add or SwiGLU after it: see [`super::matvec_fused`].
//!
//! Bound: every output is an f32 sum of `cols` products, which rounds to within about
//! `cols · 2^-24` of Σ|w·x| in the worst case and, with rounding errors of random sign, to
//! about `√cols · 2^-24` of it in practice; for the zero-mean data of the cases that is
//! NMSE ≈ `cols · 2^-48` ≤ 1.5e-11 for cols ≤ 4096, inside [`NMSE`] (1.4e-9, set from
//! measurement: see there). The reference uses the exact dequantised weights, so a kernel that decodes any block
//! differently (a swapped nibble, a wrong scale) is off by the weights' quantization step and
//! fails by orders of magnitude.

use super::matvec_attn::{Combined, Input, RopeOut};
use super::matvec_fused::{self as fused, Fused, Norm};
pub use super::matvec_fused::{Epilogue, Prologue};
use super::shape::ShapeError;
use super::support::{elements, nonzero, PREFETCH_LINE};
use crate::case::*;
use crate::dequant;
use trine_gguf::quant::{dequantize, quantize, WeightType, QK};
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar, Val, Var};

const OP: &str = "matvec";

/// NMSE bound of the products whose outputs are f32 (plain, fused with the norm, the residual
/// add, SwiGLU or the attention combine, and rope into f32 caches): 100 times the worst
/// measured, 1.4e-11 (the interpreter against the f64 reference, `matvec/q4_1/14x96/shared/swiglu`,
/// where SwiGLU multiplies two sums that cancellation left small: see [`super::matvec_fused`]).
/// Measured over every case against the interpreter: on an H100 on 2026-11-25 cuda at most
/// 3.2e-13, vulkan 4.9e-13, the cpu 1.6e-13 (`docs/conformance/suite-h100-2026-11-25*.json`
/// at caca8aa); vulkan and wgpu on lavapipe at most 2.6e-12 (2026-11-25, the 2-core CI VM;
/// 1.6e-13 over the cases of `suite-wgpu-lavapipe-2026-11-24.json`). The margin is for
/// devices not yet measured that sum in another order.
pub const NMSE: f64 = 1.4e-9;

/// NMSE bound of the QKV product whose rope epilogue stores k and v into f16 caches
/// ([`super::matvec_attn::rope_case`]): 10 times the worst measured, 3.55e-9 (vulkan on an
/// H100 against the interpreter, `matvec/q4_1/qkv9x3x64+576/t1+pos2047+ctx2048/…_f16kv`, in
/// each H100 suite of 2026-11-25). The caches are compared with the reference rounded to f16,
/// so what counts is a value that two devices' f32 results (there NVIDIA's sin and cos of an
/// angle near 2047 radians) round to neighbouring halves, each such flip one f16 ulp, a
/// relative error of 2^-11 to 2^-10. Elsewhere: the interpreter against the f64 reference
/// 3.3e-10, cuda 3.3e-12, the cpu 1.4e-11, vulkan and wgpu on lavapipe 5.1e-11 (2026-11-25).
/// The margin is 10, not 100: 100 times (3.6e-7) would pass caches converted toward zero
/// instead of to nearest, half their values an ulp off (an NMSE of about 2e-7).
pub const NMSE_F16_CACHE: f64 = 3.6e-8;

/// Elements of a quantized block one invocation handles per step, by default: a Q8_0 block's
/// 8 consecutive bytes, or 4 bytes of a Q4 block (elements i..i+4 and i+16..i+20).
const SEGMENT: u32 = 8;

/// How a row's partial sums are combined across the workgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reduce {
    /// Subgroup sums, then one partial per subgroup through shared memory. Needs the subgroup
    /// capability; correct for any subgroup width.
    Subgroup,
    /// A shared-memory tree, log2(workgroup) barriers.
    Shared,
}

impl Reduce {
    fn name(self) -> &'static str {
        match self {
            Reduce::Subgroup => "subgroup",
            Reduce::Shared => "shared",
        }
    }
}

/// Compile-time choices of a matvec kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatvecSpec {
    pub weights: WeightType,
    pub reduce: Reduce,
    /// Rows per workgroup: each slice of x is loaded once for all of them.
    pub rows_per_workgroup: u32,
    /// Invocations per workgroup: a power of two (the shared tree halves it), at least
    /// `rows_per_workgroup` (invocation r stores output r).
    pub workgroup: u32,
    /// Elements of a quantized block per step of an invocation: 8, 16 or 32. Each step decodes
    /// the block's scales once per row, so larger segments decode less per weight; smaller ones
    /// give more invocations work on short rows.
    pub segment: u32,
    /// Quantized weights only: read the blocks' f16 scales through a second, f16 view of the
    /// weight buffer (buffer `w16`, bound to the same memory as `w`), a native f16 load and
    /// conversion, instead of assembling them from bytes with integer operations. Needs 16-bit
    /// storage; where scales are decoded per segment this is most of a CPU's work per weight.
    pub f16_scales: bool,
    /// Q4_1 and Q8_0 with `f16_scales` only: read a segment's codes as whole 32-bit words (the
    /// buffer `w` is declared `U32`), the codes taken out with shifts. A Q4_1 block is 20 bytes
    /// with its codes at byte 4, so every word is aligned: one load per 8 codes instead of one
    /// per 2. A Q8_0 block is 34 bytes with its codes at byte 2, so every other block's codes
    /// start in the middle of a word: each word of codes is put together from two neighbours,
    /// `segment / 4 + 1` loads per `segment` codes instead of one per code. Q4_0 (18 bytes)
    /// keeps byte loads. The scales come from the f16 view, so nothing reads `w` as bytes.
    pub word_codes: bool,
    /// The workgroup walks a row's blocks together (for float weights, its columns in chunks
    /// of `workgroup`) in one loop with the same bounds for every invocation, invocation `l`
    /// taking elements `l`, `l + workgroup`, … of each block, whose codes it reads byte by byte:
    /// the shape for CPUs, whose C lowering turns a loop with workgroup-uniform bounds into
    /// one around the loop over invocations, which GCC then vectorises (consecutive
    /// invocations read consecutive codes and x values). Quantized weights need a workgroup of
    /// 8 or 16 (Q8_0 also 32), a divisor of a Q4 block's 16 bytes of codes; `segment` and
    /// `word_codes` do not apply.
    pub blocked: bool,
    /// Q4_0 and Q4_1 with `blocked` only, on 32 invocations: the weights are in
    /// [`dequant::pair_blocks`]' layout, and the walk takes a pair of blocks per step,
    /// invocation `l` reading byte `l` of the pair's 32 code bytes (elements `l` of both
    /// blocks). Consecutive invocations then read 32 consecutive bytes, which GCC loads and
    /// converts in 256-bit vectors, where a block's own 16 bytes of codes allow only 128.
    pub pairs: bool,
    /// Tokens of a prompt a workgroup multiplies at once (1 but with `pairs`): each pair of
    /// blocks is dequantised once for all of them. The kernel then takes the prompt's length
    /// as a last parameter `tokens`.
    pub tokens_per_workgroup: u32,
    /// The ops fused before and after the product, which save their dispatches and the round
    /// trips of the activations through memory ([`super::matvec_fused`]).
    pub prologue: Prologue,
    pub epilogue: Epilogue,
}

impl MatvecSpec {
    /// Four rows per workgroup of 64 invocations: small enough for every device, and enough
    /// invocations per row for the 18 blocks of a 576-wide row.
    pub fn new(weights: WeightType, reduce: Reduce) -> MatvecSpec {
        MatvecSpec {
            weights,
            reduce,
            rows_per_workgroup: 4,
            workgroup: 64,
            segment: SEGMENT,
            f16_scales: false,
            word_codes: false,
            blocked: false,
            pairs: false,
            tokens_per_workgroup: 1,
            prologue: Prologue::None,
            epilogue: Epilogue::None,
        }
    }

    /// Whether the kernel reads the codes as words ([`MatvecSpec::word_codes`]).
    fn reads_words(&self) -> bool {
        self.word_codes
            && !self.blocked
            && self.f16_scales
            && matches!(self.weights, WeightType::Q4_1 | WeightType::Q8_0)
    }

    /// How case names show the shape: `r2w128s8h` (rows, invocations, segment, `h` for f16
    /// scales, `u` for word codes), `r8w8bh` for a blocked walk, `r8w32ph` in pairs, `…t4`
    /// for 4 tokens per workgroup.
    pub fn shape_name(&self) -> String {
        let walk = if self.reads_pairs() {
            "p".to_string()
        } else if self.blocked {
            "b".to_string()
        } else {
            format!("s{}", self.segment)
        };
        let tokens = match self.tokens_per_workgroup {
            1 => String::new(),
            t => format!("t{t}"),
        };
        format!(
            "r{}w{}{walk}{}{}{tokens}",
            self.rows_per_workgroup,
            self.workgroup,
            if self.f16_scales { "h" } else { "" },
            if self.reads_words() { "u" } else { "" }
        )
    }

    /// The element type the kernel declares for the weights' buffer `w`.
    pub fn weights_elem(&self) -> Scalar {
        if self.reads_words() {
            Scalar::U32
        } else {
            dequant::buffer_elem(self.weights)
        }
    }

    /// Whether the kernel reads [`dequant::pair_blocks`]' layout ([`MatvecSpec::pairs`]).
    pub fn reads_pairs(&self) -> bool {
        self.pairs && self.blocked && dequant::pairs_apply(self.weights)
    }

    /// Adds to `case` the weight buffers this spec's kernel reads, all over the same bytes
    /// (rows of `cols` weights, in pairs where the spec reads them so): `w` and, with f16
    /// scales, its f16 view `w16`.
    pub fn weight_inputs(&self, case: Case, w: Vec<u8>, cols: u32) -> Case {
        let w = if self.reads_pairs() {
            dequant::pair_blocks(self.weights, &w, cols as usize)
        } else {
            w
        };
        let w = dequant::pad_to_words(w);
        if self.weights.is_quantized() && self.f16_scales {
            case.input("w", self.weights_elem(), w.clone())
                .input("w16", Scalar::F16, w)
        } else {
            case.input("w", self.weights_elem(), w)
        }
    }

    fn check(&self) -> Result<(), ShapeError> {
        let wg = self.workgroup as usize;
        if !wg.is_power_of_two() || wg > 1024 {
            return Err(ShapeError::NotPowerOfTwo {
                op: OP,
                what: "workgroup size (at most 1024)",
                value: wg,
            });
        }
        if self.rows_per_workgroup == 0 {
            return Err(ShapeError::Zero {
                op: OP,
                what: "rows per workgroup",
            });
        }
        if self.rows_per_workgroup > self.workgroup {
            return Err(ShapeError::TooLarge {
                op: OP,
                what: "rows per workgroup (at most the workgroup size)",
                value: self.rows_per_workgroup as usize,
                limit: wg,
            });
        }
        let blocked_sizes: &[u32] = match self.weights {
            _ if self.reads_pairs() => &[32],
            WeightType::Q8_0 => &[8, 16, 32],
            _ => &[8, 16],
        };
        if self.blocked && self.weights.is_quantized() && !blocked_sizes.contains(&self.workgroup) {
            return Err(ShapeError::NotPowerOfTwo {
                op: OP,
                what: "workgroup size of a blocked quantized product (8 or 16; Q8_0 also \
                       32; in pairs 32)",
                value: wg,
            });
        }
        if ![8, 16, 32].contains(&self.segment) {
            return Err(ShapeError::NotPowerOfTwo {
                op: OP,
                what: "segment (8, 16 or 32 elements)",
                value: self.segment as usize,
            });
        }
        if self.epilogue == Epilogue::Swiglu && !self.rows_per_workgroup.is_multiple_of(2) {
            return Err(ShapeError::NotMultiple {
                op: OP,
                what: "rows per workgroup of a SwiGLU product (gate and up rows in pairs)",
                value: self.rows_per_workgroup as usize,
                multiple: 2,
            });
        }
        if let Epilogue::RopeStore(r) = self.epilogue {
            r.check()?;
            if !self.rows_per_workgroup.is_multiple_of(2) {
                return Err(ShapeError::NotMultiple {
                    op: OP,
                    what: "rows per workgroup of a QKV product with rope (pairs of rows)",
                    value: self.rows_per_workgroup as usize,
                    multiple: 2,
                });
            }
        }
        let tpw = self.tokens_per_workgroup;
        if tpw == 0 || (tpw > 1 && !self.reads_pairs()) {
            return Err(ShapeError::TooLarge {
                op: OP,
                what: "tokens per workgroup (1, or more for a product in pairs of Q4 blocks)",
                value: tpw as usize,
                limit: 1,
            });
        }
        if self.outputs() * tpw > self.workgroup {
            return Err(ShapeError::TooLarge {
                op: OP,
                what: "outputs per workgroup (outputs of its rows × tokens)",
                value: (self.outputs() * tpw) as usize,
                limit: wg,
            });
        }
        let combine = match self.prologue {
            Prologue::Combine(c) => {
                c.check(None)?;
                c.shared_floats() as usize
            }
            _ => 0,
        };
        // One f32 partial per row (and the norm's sum of squares), token and invocation, and
        // the combine's weights per token, within the smallest device's 32 KiB.
        let shared = (self.reduced_rows() as usize * wg + combine) * 4 * tpw as usize;
        if shared > 32 * 1024 {
            return Err(ShapeError::TooLarge {
                op: OP,
                what: "shared bytes ((rows per workgroup + 1 with the norm) × workgroup × 4, \
                       and the combine's weights)",
                value: shared,
                limit: 32 * 1024,
            });
        }
        Ok(())
    }

    /// Outputs per token of a workgroup: one per row, or per pair of rows (SwiGLU's gate and
    /// up, rope's pairs).
    fn outputs(&self) -> u32 {
        match self.epilogue {
            Epilogue::Swiglu | Epilogue::RopeStore(_) => self.rows_per_workgroup / 2,
            Epilogue::None | Epilogue::Add => self.rows_per_workgroup,
        }
    }

    /// Sums reduced across the workgroup per token: one per row, and the norm's sum of
    /// squares.
    fn reduced_rows(&self) -> u32 {
        self.rows_per_workgroup + u32::from(self.prologue == Prologue::RmsNorm)
    }

    /// The parameters after the fused ops' for a product of `tokens` vectors: the prompt's
    /// length where a workgroup takes several tokens.
    pub fn tokens_params(&self, tokens: u32) -> Vec<ParamValue> {
        match self.tokens_per_workgroup {
            1 => vec![],
            _ => vec![ParamValue::U32(tokens)],
        }
    }

    /// The grid for `rows` rows and `tokens` vectors x (prefill multiplies W with each
    /// token's row of X, `Y = X·Wᵀ`, X and Y row-major `[tokens × cols]`, `[tokens × rows]`).
    pub fn grid(&self, rows: u32, tokens: u32) -> [u32; 3] {
        [
            rows.div_ceil(self.rows_per_workgroup),
            tokens.div_ceil(self.tokens_per_workgroup),
            1,
        ]
    }
}

/// Checks that W (`w_bytes` bytes) holds `rows × cols` weights of type `ty`, that x has `cols`
/// elements, and that every index fits the kernel's u32 arithmetic.
pub fn check_shapes(
    ty: WeightType,
    rows: usize,
    cols: usize,
    w_bytes: usize,
    x_len: usize,
) -> Result<(), ShapeError> {
    for (what, v) in [("rows", rows), ("cols", cols)] {
        if v == 0 {
            return Err(ShapeError::Zero { op: OP, what });
        }
    }
    let row_bytes = ty.bytes(OP, "cols", cols)?;
    // Byte (and element) indices are u32 in the kernel.
    let needed = row_bytes as u128 * rows as u128;
    if needed > u128::from(u32::MAX) {
        return Err(ShapeError::TooLarge {
            op: OP,
            what: "weight bytes",
            value: usize::try_from(needed).unwrap_or(usize::MAX),
            limit: u32::MAX as usize,
        });
    }
    let needed = needed as usize;
    if w_bytes < needed {
        return Err(ShapeError::TooSmall {
            op: OP,
            what: "weight bytes",
            needed,
            found: w_bytes,
        });
    }
    if x_len != cols {
        return Err(ShapeError::Mismatch {
            op: OP,
            what: "x length",
            expected: cols,
            found: x_len,
        });
    }
    Ok(())
}

/// `y = W·x` in f64 from the exactly dequantised weights.
pub fn reference(
    ty: WeightType,
    w: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
) -> Result<Vec<f64>, ShapeError> {
    check_shapes(ty, rows, cols, w.len(), x.len())?;
    let row_bytes = ty.bytes(OP, "cols", cols)?;
    // Row by row, so that an output head's weights are never all held in f64 at once.
    w.chunks_exact(row_bytes)
        .take(rows)
        .map(|row| {
            let row = dequantize(ty, row, cols)?;
            Ok(row.iter().zip(x).map(|(&a, &b)| a * f64::from(b)).sum())
        })
        .collect()
}

/// The matvec kernel for `spec`. Buffers: `w` (the weights: bytes if quantized, words with
/// [`MatvecSpec::word_codes`]), `w16` (the
/// same memory as f16, with `f16_scales`), `x`, `g` (with [`Prologue::RmsNorm`]), `r` (with
/// [`Epilogue::Add`]), `y`;
/// parameters `rows`, `cols`, `eps` (with [`Prologue::RmsNorm`]); grid [`MatvecSpec::grid`].
pub fn kernel(spec: MatvecSpec) -> Result<Kernel, ShapeError> {
    spec.check()?;
    let (ty, nrows, wg) = (spec.weights, spec.rows_per_workgroup, spec.workgroup);
    let mut name = format!("matvec_{ty}_{}_r{nrows}_w{wg}", spec.reduce.name());
    if spec.reads_pairs() {
        name.push_str("_p");
    } else if spec.blocked {
        name.push_str("_b");
    } else if ty.is_quantized() && spec.segment != SEGMENT {
        name.push_str(&format!("_s{}", spec.segment));
    }
    let f16_scales = ty.is_quantized() && spec.f16_scales;
    if f16_scales {
        name.push_str("_h");
    }
    if spec.reads_words() {
        name.push('u');
    }
    let tpw = spec.tokens_per_workgroup;
    if tpw > 1 {
        name.push_str(&format!("_t{tpw}"));
    }
    name.push_str(&fused::suffix(spec.prologue, spec.epilogue, '_', '_'));
    let k = KernelBuilder::new(&name, [wg, 1, 1]);
    if spec.reduce == Reduce::Subgroup {
        k.require_subgroups();
    }
    let w = k.buffer("w", spec.weights_elem(), Access::Read);
    let w16 = f16_scales.then(|| k.buffer("w16", Scalar::F16, Access::Read));
    let combine = match spec.prologue {
        Prologue::Combine(c) => Some(c),
        _ => None,
    };
    let x_name = if combine.is_some() { "part" } else { "x" };
    let x = k.buffer(x_name, Scalar::F32, Access::Read);
    let g = (spec.prologue == Prologue::RmsNorm).then(|| k.buffer("g", Scalar::F32, Access::Read));
    let r = (spec.epilogue == Epilogue::Add).then(|| k.buffer("r", Scalar::F32, Access::Read));
    let rope_in =
        matches!(spec.epilogue, Epilogue::RopeStore(_)).then(|| RopeOut::declare_inputs(&k));
    let y = rope_in
        .is_none()
        .then(|| k.buffer("y", Scalar::F32, Access::Write));
    let rows = k.param("rows", Scalar::U32);
    let cols = k.param("cols", Scalar::U32);
    let eps = g.map(|_| k.param("eps", Scalar::F32));
    let rope = match (spec.epilogue, rope_in) {
        (Epilogue::RopeStore(shape), Some(bufs)) => Some(RopeOut::declare_outputs(&k, shape, bufs)),
        _ => None,
    };
    let n_tokens = (tpw > 1).then(|| k.param("tokens", Scalar::U32));
    let lid = k.local_index();
    let row0 = k.workgroup_id(0) * k.u32(nrows);
    let group = k.workgroup_id(1);
    // Rows past the end (in the last workgroup) read the last row again instead of branching,
    // so that every invocation reaches the reduction; their sums are never stored. Tokens
    // past the end of the prompt likewise.
    let last = rows - k.u32(1);
    let rows_at: Vec<Val> = (0..nrows).map(|r| (row0 + k.u32(r)).min(last)).collect();
    if ty.is_quantized() && !spec.blocked {
        prefetch_rows(&k, &spec, w, cols, (rows_at[0], rows_at[rows_at.len() - 1]));
        if let Some(g) = g {
            prefetch_norm(&k, g, cols);
        }
    }
    // One token's rotation, from settled buffers only, right after the prefetches: before the
    // wait for the kernel ahead on CUDA.
    let outputs = spec.outputs();
    let turn = rope.as_ref().filter(|_| tpw == 1).map(|rope| {
        let (_, o) = split_output(&k, lid, outputs, tpw);
        rope.turn(&k, group, row0 + o * k.u32(2))
    });
    let tokens: Vec<Token> = (0..tpw)
        .map(|t| {
            let token = match n_tokens {
                None => group,
                Some(n) => (group * k.u32(tpw) + k.u32(t)).min(n - k.u32(1)),
            };
            Token {
                input: match combine {
                    Some(c) => Input::Combined(Combined::prologue(&k, c, x, wg, (token, t))),
                    None => Input::Plain {
                        x,
                        x0: token * cols,
                    },
                },
                norm: g.zip(eps).map(|(g, eps)| Norm {
                    g,
                    eps,
                    sum_sq: k.var("sum_sq", Scalar::F32),
                }),
                accs: (0..nrows).map(|_| k.var("acc", Scalar::F32)).collect(),
            }
        })
        .collect();
    // Each row of the workgroup with its accumulator, for one token.
    let rows_accs: Vec<(Val, Var)> = rows_at
        .iter()
        .copied()
        .zip(tokens[0].accs.clone())
        .collect();
    let (input, norm) = (&tokens[0].input, &tokens[0].norm);
    if spec.reads_pairs() {
        dot_pairs(&k, ty, (w, w16), &tokens, cols, &rows_at);
    } else if spec.blocked && ty.is_quantized() {
        dot_blocked(
            &k,
            ty,
            (w, w16),
            (input, norm.as_ref()),
            cols,
            &rows_accs,
            wg,
        );
    } else if spec.blocked {
        let bases: Vec<Val> = rows_accs.iter().map(|&(r, _)| r * cols).collect();
        let step = |c: Val<'_>, xv: Val<'_>, keep: Option<Val<'_>>| {
            let xv = norm.as_ref().map_or(xv, |n| n.scale(&k, xv, c));
            for (base, (_, acc)) in bases.iter().zip(&rows_accs) {
                let wv = k.load(w, *base + c).cast(Scalar::F32);
                let sum = wv.fma(xv, acc.get());
                acc.set(keep.map_or(sum, |inside| k.select(inside, sum, acc.get())));
            }
        };
        // Whole chunks of columns, at `chunk·wg + lid`: consecutive invocations, consecutive
        // columns.
        let whole = cols / k.u32(wg);
        k.for_range(k.u32(0), whole, 1, |chunk| {
            let c = chunk * k.u32(wg) + lid;
            step(c, input.load(&k, c), None);
        });
        // The last, partial chunk: invocations past the end read the last column and keep
        // their sums (a select, not a branch).
        k.if_((cols % k.u32(wg)).ne(k.u32(0)), || {
            let at = whole * k.u32(wg) + lid;
            let inside = at.lt(cols);
            let c = at.min(cols - k.u32(1));
            step(
                c,
                k.select(inside, input.load(&k, c), k.f32(0.0)),
                Some(inside),
            );
        });
    } else if ty.is_quantized() {
        dot_quantized(
            &k,
            ty,
            (w, w16, spec.reads_words()),
            (input, norm.as_ref()),
            cols,
            &rows_accs,
            (wg, spec.segment),
        );
    } else {
        let bases: Vec<Val> = rows_accs.iter().map(|&(r, _)| r * cols).collect();
        k.for_range(lid, cols, wg, |c| {
            let xv = input.load(&k, c);
            let xv = norm.as_ref().map_or(xv, |n| n.scale(&k, xv, c));
            for (base, (_, acc)) in bases.iter().zip(&rows_accs) {
                let wv = k.load(w, *base + c).cast(Scalar::F32);
                acc.set(wv.fma(xv, acc.get()));
            }
        });
    }
    // Per token, its rows' sums and then the sum of squares, reduced as row `nrows`.
    let sums: Vec<Val> = tokens
        .iter()
        .flat_map(|t| {
            let accs = t.accs.iter().map(|a| a.get());
            accs.chain(t.norm.as_ref().map(|n| n.sum_sq.get()))
        })
        .collect();
    // Invocation i stores output i: row i's sum, or SwiGLU's of rows 2i and 2i + 1; with
    // several tokens, output i % outputs of token i / outputs.
    let per_token = spec.reduced_rows();
    let split = |i| split_output(&k, i, outputs, tpw);
    let reads = |i| {
        let (t, o) = split(i);
        let rows = read_rows(&k, &spec, o);
        match tpw {
            1 => rows,
            _ => rows.into_iter().map(|r| r + t * k.u32(per_token)).collect(),
        }
    };
    let totals = match spec.reduce {
        Reduce::Subgroup => reduce_subgroup(&k, &sums, wg, (outputs * tpw, reads)),
        Reduce::Shared => reduce_shared(&k, &sums, wg, (outputs * tpw, reads)),
    };
    let (t, o) = split(lid);
    let token = match tpw {
        1 => group,
        _ => group * k.u32(tpw) + t,
    };
    let inside = n_tokens.map_or(k.bool(true), |n| token.lt(n));
    k.if_(lid.lt(k.u32(outputs * tpw)) & inside, || {
        let totals: Vec<Val> = match (norm, totals.split_last()) {
            (Some(n), Some((&sum_sq, sums))) => {
                let inv_rms = n.inv_rms(sum_sq, cols);
                sums.iter().map(|&t| t * inv_rms).collect()
            }
            _ => totals,
        };
        match (spec.epilogue, y, &rope) {
            (Epilogue::Swiglu, Some(y), _) => {
                let n = rows / k.u32(2);
                let i = k.workgroup_id(0) * k.u32(outputs) + o;
                k.if_(i.lt(n), || {
                    let v = super::elementwise::silu_ir(&k, totals[0]) * totals[1];
                    k.store(y, token * n + i, v);
                });
            }
            (_, None, Some(rope)) => {
                let row = row0 + o * k.u32(2);
                k.if_(row.lt(rows), || {
                    let turn = turn.unwrap_or_else(|| rope.turn(&k, token, row));
                    rope.store_pair(&k, (token, row), &turn, (totals[0], totals[1]))
                });
            }
            (_, Some(y), _) => {
                let row = row0 + o;
                k.if_(row.lt(rows), || {
                    let at = token * rows + row;
                    k.store(y, at, r.map_or(totals[0], |r| totals[0] + k.load(r, at)));
                });
            }
            (_, None, None) => unreachable!("y is declared unless the rope epilogue stores"),
        }
    });
    Ok(k.finish())
}

/// Prefetches the quantized rows `first..=last` ([`trine_ir::Stmt::Prefetch`]), a cache line
/// of 128 bytes per invocation and step. It is the kernel's first statement, so a GPU that
/// launches the kernel while the one before it still runs (CUDA on sm_90) fetches the weights,
/// which no earlier dispatch writes, in that time: in a decode step every product waits for its
/// x, and would then wait for its weights from memory too.
fn prefetch_rows<'b>(
    k: &'b KernelBuilder,
    spec: &MatvecSpec,
    w: trine_ir::BufferId,
    cols: Val<'b>,
    (first, last): (Val<'b>, Val<'b>),
) {
    const LINE: u32 = PREFETCH_LINE;
    let row_bytes = (cols / k.u32(QK as u32)) * k.u32(spec.weights.block_bytes() as u32);
    let start = first * row_bytes;
    let end = (last + k.u32(1)) * row_bytes;
    let lines = (end - start + k.u32(LINE - 1)) / k.u32(LINE);
    let elem = k.u32(spec.weights_elem().size() as u32);
    k.for_range(k.local_index(), lines, spec.workgroup, |i| {
        let byte = (start + i * k.u32(LINE)).min(end - k.u32(1));
        k.prefetch(w, byte / elem);
    });
}

/// Prefetches the norm's weights `g` (`cols` f32) beside the rows ([`prefetch_rows`]): no
/// dispatch writes them either, and they are read once a step, so the stream of a step's
/// weights has pushed them out of L2 by the time the product needs them. Workgroup `i` takes
/// line `i` only: every workgroup prefetching every line (the output head has 12,288
/// workgroups) made decode 30% slower on an H200.
fn prefetch_norm<'b>(k: &'b KernelBuilder, g: trine_ir::BufferId, cols: Val<'b>) {
    const LINE: u32 = PREFETCH_LINE / 4;
    let lines = (cols + k.u32(LINE - 1)) / k.u32(LINE);
    let wg = k.workgroup_id(0);
    k.if_(k.local_index().eq(k.u32(0)) & wg.lt(lines), || {
        k.prefetch(g, wg * k.u32(LINE))
    });
}

/// Invocation `i`'s (token, output) in a workgroup of `tpw` tokens with `outputs` per token.
fn split_output<'b>(
    k: &'b KernelBuilder,
    i: Val<'b>,
    outputs: u32,
    tpw: u32,
) -> (Val<'b>, Val<'b>) {
    match tpw {
        1 => (k.u32(0), i),
        _ => (i / k.u32(outputs), i % k.u32(outputs)),
    }
}

/// One token of a workgroup: its input, its norm (with its own sum of squares) and its rows'
/// accumulators.
struct Token<'b> {
    input: Input<'b>,
    norm: Option<Norm<'b>>,
    accs: Vec<Var<'b>>,
}

/// The rows whose sums the invocation storing output `i` reads: `i`, or SwiGLU's gate and up
/// rows `2i` and `2i + 1`; then the norm's sum of squares, row `rows_per_workgroup`.
fn read_rows<'b>(k: &'b KernelBuilder, spec: &MatvecSpec, i: Val<'b>) -> Vec<Val<'b>> {
    let mut rows = match spec.epilogue {
        Epilogue::Swiglu | Epilogue::RopeStore(_) => {
            let gate = i * k.u32(2);
            vec![gate, gate + k.u32(1)]
        }
        Epilogue::None | Epilogue::Add => vec![i],
    };
    if spec.prologue == Prologue::RmsNorm {
        rows.push(k.u32(spec.rows_per_workgroup));
    }
    rows
}

/// Accumulates the quantized rows' dot products: each step takes one segment of a block, loads
/// its x values once, and for every row multiplies the codes by x and scales the segment's sum
/// by d (adding m·Σx for Q4_1), so that the scales cost one multiply per segment. With the
/// norm, x is multiplied by g as it is loaded. With `words`, `w` is a `U32` view.
fn dot_quantized<'b>(
    k: &'b KernelBuilder,
    ty: WeightType,
    (w, w16, words): (trine_ir::BufferId, Option<trine_ir::BufferId>, bool),
    (input, norm): (&Input<'b>, Option<&Norm<'b>>),
    cols: Val<'b>,
    rows_accs: &[(Val<'b>, Var<'b>)],
    (wg, segment): (u32, u32),
) {
    let block_bytes = k.u32(ty.block_bytes() as u32);
    let row_bytes = (cols / k.u32(QK as u32)) * block_bytes;
    let bases: Vec<Val> = rows_accs.iter().map(|&(r, _)| r * row_bytes).collect();
    let segments = cols / k.u32(segment);
    let lid = k.local_index();
    k.for_range(lid, segments, wg, |s| {
        let per_block = k.u32(QK as u32 / segment);
        let block = s / per_block;
        let part = s % per_block;
        let xb = block * k.u32(QK as u32);
        // Element offsets (within the block) of this segment, paired with their x values.
        let offsets: Vec<Val> = match ty {
            WeightType::Q8_0 => (0..segment)
                .map(|i| part * k.u32(segment) + k.u32(i))
                .collect(),
            _ => (0..segment / 2)
                .map(|i| part * k.u32(segment / 2) + k.u32(i))
                .collect(),
        };
        // Every row's scales and codes are loaded before x: the weights come from memory, x
        // from a cache, and a GPU compiler keeps independent loads in the order they are
        // written, so the slower loads go first and both wait out one latency, not two in turn
        // (on an H100, NVRTC issued the weights' loads only after x's first use).
        let weights: Vec<(dequant::Scales, Vec<Val>)> = bases
            .iter()
            .map(|base| {
                let blk = *base + block * block_bytes;
                let scales = dequant::load_scales(k, ty, (w, w16), blk);
                let codes: Vec<Val> = match ty {
                    _ if words => word_codes(k, (ty, w), blk, part, segment),
                    WeightType::Q8_0 => offsets
                        .iter()
                        .map(|&o| dequant::q8_code(k, w, blk, o))
                        .collect(),
                    _ => {
                        let pairs: Vec<_> = offsets
                            .iter()
                            .map(|&o| dequant::q4_codes(k, ty, w, blk, o))
                            .collect();
                        pairs
                            .iter()
                            .map(|p| p.0)
                            .chain(pairs.iter().map(|p| p.1))
                            .collect()
                    }
                };
                (scales, codes)
            })
            .collect();
        let xs: Vec<Val> = match ty {
            WeightType::Q8_0 => offsets.iter().map(|&o| input.load(k, xb + o)).collect(),
            _ => offsets
                .iter()
                .map(|&o| input.load(k, xb + o))
                .chain(
                    offsets
                        .iter()
                        .map(|&o| input.load(k, xb + o + k.u32(QK as u32 / 2))),
                )
                .collect(),
        };
        let xs: Vec<Val> = match norm {
            None => xs,
            Some(n) => {
                let first = block * k.u32(QK as u32);
                let at: Vec<Val> = match ty {
                    WeightType::Q8_0 => offsets.clone(),
                    _ => {
                        let half = k.u32(QK as u32 / 2);
                        let high = offsets.iter().map(|&o| o + half);
                        offsets.iter().copied().chain(high).collect()
                    }
                };
                xs.iter()
                    .zip(at)
                    .map(|(&v, c)| n.scale(k, v, first + c))
                    .collect()
            }
        };
        let xsum = (ty == WeightType::Q4_1).then(|| xs[1..].iter().fold(xs[0], |a, &v| a + v));
        for ((_, acc), (scales, codes)) in rows_accs.iter().zip(weights) {
            accumulate(*acc, scales, (&codes, &xs), xsum);
        }
    });
}

/// Adds a block's share to a row's sum: the codes' dot product with their x values, scaled by
/// d, and m·Σx for Q4_1 (`xsum`), so that the scales cost one multiply per block or segment.
fn accumulate<'b>(
    acc: Var<'b>,
    scales: dequant::Scales<'b>,
    (codes, xs): (&[Val<'b>], &[Val<'b>]),
    xsum: Option<Val<'b>>,
) {
    let dot = codes
        .iter()
        .zip(xs)
        .skip(1)
        .fold(codes[0] * xs[0], |a, (&q, &v)| q.fma(v, a));
    let mut sum = scales.d.fma(dot, acc.get());
    if let (Some(m), Some(xsum)) = (scales.m, xsum) {
        sum = m.fma(xsum, sum);
    }
    acc.set(sum);
}

/// [`MatvecSpec::blocked`]'s walk: a loop over the row's blocks with uniform bounds, in which
/// invocation `lid` takes elements `lid + j·wg` of each block, loading their x values once for
/// all rows; each row's codes come byte by byte (a Q4 byte holds elements `i` and `i + 16`),
/// its scales from the f16 view where there is one.
fn dot_blocked<'b>(
    k: &'b KernelBuilder,
    ty: WeightType,
    (w, w16): (trine_ir::BufferId, Option<trine_ir::BufferId>),
    (input, norm): (&Input<'b>, Option<&Norm<'b>>),
    cols: Val<'b>,
    rows_accs: &[(Val<'b>, Var<'b>)],
    wg: u32,
) {
    let qk = QK as u32;
    let block_bytes = k.u32(ty.block_bytes() as u32);
    let row_bytes = (cols / k.u32(qk)) * block_bytes;
    let bases: Vec<Val> = rows_accs.iter().map(|&(r, _)| r * row_bytes).collect();
    let lid = k.local_index();
    // Element offsets within a block: for Q4, the low nibbles' first, then the same bytes'
    // high nibbles (16 further on), so that codes and x values pair up in order.
    let offsets: Vec<Val> = match ty {
        WeightType::Q8_0 => (0..qk / wg).map(|j| lid + k.u32(j * wg)).collect(),
        _ => {
            let low: Vec<Val> = (0..qk / 2 / wg).map(|j| lid + k.u32(j * wg)).collect();
            let high: Vec<Val> = low.iter().map(|&o| o + k.u32(qk / 2)).collect();
            low.into_iter().chain(high).collect()
        }
    };
    k.for_range(k.u32(0), cols / k.u32(qk), 1, |block| {
        let xb = block * k.u32(qk);
        let xs: Vec<Val> = offsets
            .iter()
            .map(|&o| {
                let v = input.load_aligned(k, (xb, o), qk);
                norm.map_or(v, |n| n.scale(k, v, xb + o))
            })
            .collect();
        let xsum = (ty == WeightType::Q4_1).then(|| xs[1..].iter().fold(xs[0], |a, &v| a + v));
        for (base, (_, acc)) in bases.iter().zip(rows_accs) {
            let blk = *base + block * block_bytes;
            let scales = dequant::load_scales(k, ty, (w, w16), blk);
            let codes: Vec<Val> = match ty {
                WeightType::Q8_0 => offsets
                    .iter()
                    .map(|&o| dequant::q8_code(k, w, blk, o))
                    .collect(),
                _ => {
                    // Codes convert through I32: x86 vectors convert signed integers to floats
                    // natively (AVX2 has no unsigned conversion), and a code is at most 15.
                    let first = blk + k.u32(dequant::codes_offset(ty));
                    let bytes: Vec<Val> = offsets[..offsets.len() / 2]
                        .iter()
                        .map(|&o| k.load(w, first + o))
                        .collect();
                    let code = |v: Val<'b>| {
                        let q = v.cast(Scalar::I32).cast(Scalar::F32);
                        if ty == WeightType::Q4_0 {
                            q - k.f32(8.0)
                        } else {
                            q
                        }
                    };
                    let low = bytes.iter().map(|&b| code(b & k.u32(15)));
                    low.chain(bytes.iter().map(|&b| code(b >> k.u32(4))))
                        .collect()
                }
            };
            accumulate(*acc, scales, (&codes, &xs), xsum);
        }
    });
}

/// [`MatvecSpec::pairs`]' walk over a row's pairs of blocks, 32 invocations, invocation `lid`
/// taking element `lid` of both blocks of each pair; then an odd last block, in its own
/// layout, on the first 16 invocations (elements `lid` and `lid + 16`).
fn dot_pairs<'b>(
    k: &'b KernelBuilder,
    ty: WeightType,
    (w, w16): (trine_ir::BufferId, Option<trine_ir::BufferId>),
    tokens: &[Token<'b>],
    cols: Val<'b>,
    rows: &[Val<'b>],
) {
    let qk = QK as u32;
    let bb = ty.block_bytes() as u32;
    let blocks = cols / k.u32(qk);
    let row_bytes = blocks * k.u32(bb);
    let bases: Vec<Val> = rows.iter().map(|&r| r * row_bytes).collect();
    let lid = k.local_index();
    // Each token's x value at column `c0 + o`.
    let x_at = |c0: Val<'b>, o: Val<'b>| -> Vec<Val<'b>> {
        tokens
            .iter()
            .map(|t| {
                let v = t.input.load_aligned(k, (c0, o), qk);
                t.norm.as_ref().map_or(v, |n| n.scale(k, v, c0 + o))
            })
            .collect()
    };
    // The f16 scale `i` (0..4) of the pair or block at byte `at`.
    let scale = |at: Val<'b>, i: u32| dequant::load_f16(k, w, w16, at + k.u32(2 * i));
    // Each weight is dequantised with one fma, d·q + m, m = -8·d for Q4_0 (exactly d·(q - 8)),
    // then multiplied into the sum with another: two vector operations per 8 weights, where
    // scaling a dot product by d and adding m·Σx takes three.
    let code = |byte: Val<'b>| byte.cast(Scalar::I32).cast(Scalar::F32);
    let q4_1 = ty == WeightType::Q4_1;
    // The scales of block `block` (0 or 1) of the pair, or of the lone block, at byte `at`.
    let scales = |at: Val<'b>, block: u32| {
        let d = scale(at, if q4_1 { 2 * block } else { block });
        let m = if q4_1 {
            scale(at, 2 * block + 1)
        } else {
            d * k.f32(-8.0)
        };
        (d, m)
    };
    k.for_range(k.u32(0), blocks / k.u32(2), 1, |p| {
        let c0 = p * k.u32(2 * qk);
        let x0 = x_at(c0, lid);
        let x1 = x_at(c0 + k.u32(qk), lid);
        for (r, base) in bases.iter().enumerate() {
            let at = *base + p * k.u32(2 * bb);
            let (d0, m0) = scales(at, 0);
            let (d1, m1) = scales(at, 1);
            let byte = k.load(w, at + k.u32(dequant::pair_scale_bytes(ty)) + lid);
            let w0 = d0.fma(code(byte & k.u32(15)), m0);
            let w1 = d1.fma(code(byte >> k.u32(4)), m1);
            for (t, token) in tokens.iter().enumerate() {
                let acc = token.accs[r];
                acc.set(w1.fma(x1[t], w0.fma(x0[t], acc.get())));
            }
        }
    });
    let last = blocks - k.u32(1);
    k.if_((blocks % k.u32(2)).eq(k.u32(1)), || {
        k.if_(lid.lt(k.u32(qk / 2)), || {
            let c0 = last * k.u32(qk);
            let x0 = x_at(c0, lid);
            let x1 = x_at(c0, lid + k.u32(qk / 2));
            for (r, base) in bases.iter().enumerate() {
                let at = *base + last * k.u32(bb);
                let (d, m) = scales(at, 0);
                let byte = k.load(w, at + k.u32(dequant::codes_offset(ty)) + lid);
                let w0 = d.fma(code(byte & k.u32(15)), m);
                let w1 = d.fma(code(byte >> k.u32(4)), m);
                for (t, token) in tokens.iter().enumerate() {
                    let acc = token.accs[r];
                    acc.set(w1.fma(x1[t], w0.fma(x0[t], acc.get())));
                }
            }
        });
    });
}

/// The codes of segment `part` of the Q4_1 or Q8_0 block at byte `blk`, from a `U32` view,
/// as [`dequant::q4_codes`] and [`dequant::q8_code`] give them byte by byte. Bytes are
/// little-endian in their word, as the GGUF file and every target store them.
///
/// Q4_1: `segment / 8` aligned words; the low nibbles of their bytes in order, then the high
/// ones. Q8_0: the codes start at an even byte, at a word (`shift` 0) or in its middle (`shift`
/// 16), where each word of codes is the high half of one word and the low half of the next.
/// The word after the segment's last is loaded only where the codes reach into it; an aligned
/// segment loads its last word again instead, which keeps the last block of the buffer from
/// reading past its end.
fn word_codes<'b>(
    k: &'b KernelBuilder,
    (ty, w): (WeightType, trine_ir::BufferId),
    blk: Val<'b>,
    part: Val<'b>,
    segment: u32,
) -> Vec<Val<'b>> {
    let offset = dequant::codes_offset(ty);
    if ty != WeightType::Q8_0 {
        let first = blk / k.u32(4) + k.u32(offset / 4);
        let words: Vec<Val> = (0..segment / 8)
            .map(|j| k.load(w, first + part * k.u32(segment / 8) + k.u32(j)))
            .collect();
        let nibbles = |shift: u32| {
            words.iter().flat_map(move |&word| {
                (0..4).map(move |b| ((word >> k.u32(8 * b + shift)) & k.u32(15)).cast(Scalar::F32))
            })
        };
        return nibbles(0).chain(nibbles(4)).collect();
    }
    let n = segment / 4;
    let at = blk + k.u32(offset) + part * k.u32(segment);
    let first = at / k.u32(4);
    let shift = (at & k.u32(2)) * k.u32(8);
    let mut loaded: Vec<Val> = (0..n).map(|j| k.load(w, first + k.u32(j))).collect();
    loaded.push(k.load(w, first + k.u32(n - 1) + (shift >> k.u32(4))));
    let words: Vec<Val> = loaded
        .windows(2)
        .map(|p| (p[0] >> shift) | ((p[1] << k.u32(16)) << (k.u32(16) - shift)))
        .collect();
    words
        .into_iter()
        .flat_map(|word| {
            // Each byte moved to the top and shifted back arithmetically: its signed value.
            (0..4).map(move |b| {
                ((word << k.u32(24 - 8 * b)).bitcast(Scalar::I32) >> k.u32(24)).cast(Scalar::F32)
            })
        })
        .collect()
}

/// Row sums through subgroup sums: each subgroup's lane 0 leaves one partial per row in
/// shared memory; each invocation below `outputs` adds the partials of the rows `reads` names
/// for it, and gets their sums.
pub(crate) fn reduce_subgroup<'b>(
    k: &'b KernelBuilder,
    sums: &[Val<'b>],
    wg: u32,
    (outputs, reads): (u32, impl FnOnce(Val<'b>) -> Vec<Val<'b>>),
) -> Vec<Val<'b>> {
    let sh = k.shared("partials", Scalar::F32, sums.len() as u32 * wg);
    let lid = k.local_index();
    let totals: Vec<Val> = sums.iter().map(|s| s.subgroup_sum()).collect();
    let sg = k.subgroup_id();
    k.if_(k.subgroup_invocation_id().eq(k.u32(0)), || {
        for (r, t) in totals.iter().enumerate() {
            k.store_shared(sh, k.u32(r as u32 * wg) + sg, *t);
        }
    });
    k.barrier();
    read_totals(k, lid, (outputs, reads), |row, total| {
        // A subgroup wider than the workgroup is one partial subgroup, hence the rounding up.
        let width = k.subgroup_size();
        let groups = (k.u32(wg) + width - k.u32(1)) / width;
        let base = row * k.u32(wg);
        k.for_range(k.u32(0), groups, 1, |g| {
            total.set(total.get() + k.load_shared(sh, base + g))
        });
    })
}

/// Row sums through a shared-memory tree: log2(wg) halving steps over all rows at once, which
/// leave row r's sum at `r·wg`; invocations below `outputs` get the sums of the rows `reads`
/// names for them.
fn reduce_shared<'b>(
    k: &'b KernelBuilder,
    sums: &[Val<'b>],
    wg: u32,
    (outputs, reads): (u32, impl FnOnce(Val<'b>) -> Vec<Val<'b>>),
) -> Vec<Val<'b>> {
    let sh = k.shared("partials", Scalar::F32, sums.len() as u32 * wg);
    let lid = k.local_index();
    for (r, s) in sums.iter().enumerate() {
        k.store_shared(sh, k.u32(r as u32 * wg) + lid, *s);
    }
    k.barrier();
    let mut stride = wg / 2;
    while stride > 0 {
        k.if_(lid.lt(k.u32(stride)), || {
            for r in 0..sums.len() as u32 {
                let at = k.u32(r * wg) + lid;
                let v = k.load_shared(sh, at) + k.load_shared(sh, at + k.u32(stride));
                k.store_shared(sh, at, v);
            }
        });
        k.barrier();
        stride /= 2;
    }
    read_totals(k, lid, (outputs, reads), |row, total| {
        total.set(k.load_shared(sh, row * k.u32(wg)))
    })
}

/// After a reduction's last barrier, where any invocation can read any row's sum: the sums
/// of the rows `reads` names for invocation `lid`, if it is below `outputs`, each set into a
/// fresh (zero) variable by `read`.
fn read_totals<'b>(
    k: &'b KernelBuilder,
    lid: Val<'b>,
    (outputs, reads): (u32, impl FnOnce(Val<'b>) -> Vec<Val<'b>>),
    read: impl Fn(Val<'b>, Var<'b>),
) -> Vec<Val<'b>> {
    let mut totals = vec![];
    k.if_(lid.lt(k.u32(outputs)), || {
        for row in reads(lid) {
            let total = k.var("total", Scalar::F32);
            read(row, total);
            totals.push(total);
        }
    });
    totals.into_iter().map(|t| t.get()).collect()
}

/// A conformance case: random W (quantized with ggml's reference quantizers) and x.
pub fn case(
    ty: WeightType,
    rows: u32,
    cols: u32,
    reduce: Reduce,
    seed: u64,
) -> Result<Case, ShapeError> {
    batched_case(ty, rows, cols, 1, reduce, seed)
}

/// A conformance case multiplying W with `tokens` vectors at once, as prefill does.
pub fn batched_case(
    ty: WeightType,
    rows: u32,
    cols: u32,
    tokens: u32,
    reduce: Reduce,
    seed: u64,
) -> Result<Case, ShapeError> {
    spec_case(MatvecSpec::new(ty, reduce), rows, cols, tokens, seed)
}

/// A conformance case of any [`MatvecSpec`]; its name shows the spec where it is not
/// [`MatvecSpec::new`]'s, then what it fuses (`/norm+swiglu`). The fused inputs: g in
/// [0.5, 1.5) as rms_norm's cases, eps [`super::matvec_fused::EPS`], r in [-2, 2).
pub fn spec_case(
    spec: MatvecSpec,
    rows: u32,
    cols: u32,
    tokens: u32,
    seed: u64,
) -> Result<Case, ShapeError> {
    let (ty, reduce) = (spec.weights, spec.reduce);
    let (r, c) = (rows as usize, cols as usize);
    // Fail before generating data for a shape the op rejects.
    check_shapes(ty, r, c, ty.bytes(OP, "cols", c)?.saturating_mul(r), c)?;
    nonzero(OP, "tokens", tokens)?;
    elements(OP, "x", &[tokens, cols])?;
    elements(OP, "y", &[tokens, rows])?;
    // SwiGLU's rows come in pairs.
    spec.epilogue.outputs(rows)?;
    let mut rng = Rng::new(seed);
    let w = quantize(ty, &rng.f32s(r * c, -1.0, 1.0))?;
    let x = rng.f32s(c * tokens as usize, -1.0, 1.0);
    // Drawn after W and x, so that the plain cases keep their data.
    let g = (spec.prologue == Prologue::RmsNorm).then(|| rng.f32s(c, 0.5, 1.5));
    let res = (spec.epilogue == Epilogue::Add).then(|| rng.f32s(r * tokens as usize, -2.0, 2.0));
    let want = fused::reference(
        ty,
        &w,
        r,
        c,
        &x,
        &Fused {
            norm: g.as_deref().map(|g| (g, fused::EPS)),
            epilogue: spec.epilogue,
            residual: res.as_deref().unwrap_or_default(),
        },
    )?;
    let mut name = format!("{OP}/{ty}/{rows}x{cols}");
    if tokens > 1 {
        name.push_str(&format!("/t{tokens}"));
    }
    if reduce == Reduce::Shared {
        name.push_str("/shared");
    }
    let unfused = MatvecSpec {
        prologue: Prologue::None,
        epilogue: Epilogue::None,
        ..spec
    };
    if unfused != MatvecSpec::new(ty, reduce) {
        name.push('/');
        name.push_str(&spec.shape_name());
    }
    name.push_str(&fused::suffix(spec.prologue, spec.epilogue, '/', '+'));
    let mut case = spec.weight_inputs(
        Case::new(name, kernel(spec)?, spec.grid(rows, tokens)),
        w,
        cols,
    );
    let mut params = vec![ParamValue::U32(rows), ParamValue::U32(cols)];
    case = case.input("x", Scalar::F32, f32_bytes(&x));
    if let Some(g) = g {
        case = case.input("g", Scalar::F32, f32_bytes(&g));
        params.push(ParamValue::F32(fused::EPS));
    }
    if let Some(res) = res {
        case = case.input("r", Scalar::F32, f32_bytes(&res));
    }
    params.extend(spec.tokens_params(tokens));
    let mut case = case
        .output("y", Scalar::F32, vec![0; want.len() * 4], want)
        .params(params)
        .bound(NMSE);
    if reduce == Reduce::Subgroup {
        case = case.fallback(kernel(MatvecSpec {
            reduce: Reduce::Shared,
            ..spec
        })?);
    }
    Ok(case)
}

/// For every weight type: small odd shapes, one row, and SmolLM2-135M's projections (576
/// model width, 1536 FFN), the shared fallback on two of them (every backend here has
/// subgroups, so it would not run otherwise). Then SmolLM2's output head, 49152 × 576 in Q8_0
/// as its GGUF stores it, and a 4096 × 4096 Q4_0 matrix (a 7B model's projection): the two
/// largest cases, about 11 s and 4 s in the interpreter of a debug build.
pub fn cases() -> Vec<Case> {
    let listed = |spec, rows, cols, tokens, seed| {
        spec_case(spec, rows, cols, tokens, seed).expect("the listed shapes are valid")
    };
    let mut shapes: Vec<(WeightType, u32, u32, Reduce)> = vec![];
    for ty in WeightType::ALL {
        let odd = if ty.is_quantized() { 96 } else { 45 };
        for (rows, cols) in [(7, odd), (1, odd), (576, 576), (1536, 576), (576, 1536)] {
            shapes.push((ty, rows, cols, Reduce::Subgroup));
        }
        shapes.push((ty, 7, odd, Reduce::Shared));
        shapes.push((ty, 576, 1536, Reduce::Shared));
    }
    shapes.push((WeightType::Q8_0, 49152, 576, Reduce::Subgroup));
    shapes.push((WeightType::Q4_0, 4096, 4096, Reduce::Subgroup));
    let mut v: Vec<Case> = shapes
        .into_iter()
        .enumerate()
        .map(|(i, (ty, rows, cols, reduce))| {
            case(ty, rows, cols, reduce, 1000 + i as u64).expect("the listed shapes are valid")
        })
        .collect();
    // Prefill: a 7-token prompt through SmolLM2's K projection and a small odd one.
    for (ty, rows, cols, tokens, reduce) in [
        (WeightType::Q4_1, 192, 576, 7, Reduce::Subgroup),
        (WeightType::Q8_0, 7, 96, 3, Reduce::Shared),
        (WeightType::F32, 7, 45, 5, Reduce::Subgroup),
    ] {
        v.push(
            batched_case(ty, rows, cols, tokens, reduce, 2000 + rows as u64)
                .expect("the listed shapes are valid"),
        );
    }
    // The executor's shapes: the CPU's (8 rows on 8 invocations; 16-element segments; scales
    // through an f16 view) and the GPUs' (8 rows on 128 invocations, f16 scales), prefill
    // included.
    for (ty, rows, cols, tokens, reduce) in [
        (WeightType::Q4_1, 1536, 576, 1, Reduce::Subgroup),
        (WeightType::Q4_1, 192, 576, 3, Reduce::Shared),
        (WeightType::Q8_0, 13, 96, 1, Reduce::Subgroup),
        (WeightType::Q4_0, 13, 96, 2, Reduce::Subgroup),
        (WeightType::F16, 13, 45, 1, Reduce::Subgroup),
    ] {
        for (workgroup, segment, f16_scales) in
            [(8, 16, false), (8, 8, true), (8, 16, true), (128, 8, true)]
        {
            let spec = MatvecSpec {
                rows_per_workgroup: 8,
                workgroup,
                segment,
                f16_scales,
                ..MatvecSpec::new(ty, reduce)
            };
            v.push(listed(spec, rows, cols, tokens, 3000 + rows as u64));
        }
    }
    // Codes read as words, in the GPUs' shapes: Q4_1's aligned words, Q8_0's put together
    // from two (96 columns: every other row starts mid-word; 13 rows end mid-word).
    for (ty, rows, cols, tokens, (rpw, workgroup, segment)) in [
        (WeightType::Q4_1, 192, 576, 1, (2, 128, 8)),
        (WeightType::Q8_0, 13, 96, 1, (4, 32, 8)),
        (WeightType::Q8_0, 13, 96, 2, (2, 128, 16)),
        (WeightType::Q8_0, 49, 576, 1, (8, 128, 32)),
    ] {
        let spec = MatvecSpec {
            rows_per_workgroup: rpw,
            workgroup,
            segment,
            f16_scales: true,
            word_codes: true,
            ..MatvecSpec::new(ty, Reduce::Subgroup)
        };
        v.push(listed(spec, rows, cols, tokens, 3300 + rows as u64));
    }
    // The CPUs' blocked walk: 16 invocations for Q4 (8 too), 32 for Q8_0, 8 for floats (whose
    // last chunk of columns is partly past the end, or whole); scales through the f16 view or
    // from bytes.
    for (ty, rows, cols, tokens, workgroup, f16_scales) in [
        (WeightType::Q4_1, 1536, 576, 1, 16, true),
        (WeightType::Q4_1, 13, 96, 2, 8, false),
        (WeightType::Q4_0, 13, 96, 1, 16, true),
        (WeightType::Q4_0, 7, 64, 3, 8, true),
        (WeightType::Q8_0, 13, 96, 2, 32, true),
        (WeightType::Q8_0, 7, 64, 1, 16, false),
        (WeightType::F16, 13, 45, 2, 8, false),
        (WeightType::F32, 7, 45, 1, 8, false),
        (WeightType::F32, 5, 64, 2, 8, false),
    ] {
        let spec = MatvecSpec {
            rows_per_workgroup: 8,
            workgroup,
            f16_scales,
            blocked: true,
            ..MatvecSpec::new(ty, Reduce::Subgroup)
        };
        v.push(listed(spec, rows, cols, tokens, 3500 + rows as u64));
    }
    // Q4 in pairs of blocks on 32 invocations: even rows of blocks (SmolLM2's 18), odd ones
    // (the last block in its own layout), scales through the f16 view or from bytes.
    for (ty, rows, cols, tokens, f16_scales) in [
        (WeightType::Q4_1, 1536, 576, 1, true),
        (WeightType::Q4_1, 13, 96, 2, true),
        (WeightType::Q4_1, 7, 160, 1, false),
        (WeightType::Q4_0, 13, 160, 1, true),
        (WeightType::Q4_0, 7, 64, 3, false),
        (WeightType::Q4_0, 5, 32, 1, true),
    ] {
        let spec = MatvecSpec {
            rows_per_workgroup: 4,
            workgroup: 32,
            f16_scales,
            blocked: true,
            pairs: true,
            ..MatvecSpec::new(ty, Reduce::Subgroup)
        };
        v.push(listed(spec, rows, cols, tokens, 3600 + cols as u64));
    }
    // Prompts on several tokens per workgroup, the last group partly past the last token.
    for (ty, rows, cols, tokens, tpw) in [
        (WeightType::Q4_1, 192, 576, 7, 4),
        (WeightType::Q4_1, 192, 576, 11, 8),
        (WeightType::Q4_1, 13, 96, 8, 4),
        (WeightType::Q4_0, 7, 160, 5, 2),
    ] {
        let spec = MatvecSpec {
            rows_per_workgroup: 4,
            workgroup: 32,
            f16_scales: true,
            blocked: true,
            pairs: true,
            tokens_per_workgroup: tpw,
            ..MatvecSpec::new(ty, Reduce::Subgroup)
        };
        v.push(listed(spec, rows, cols, tokens, 3700 + cols as u64));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_checked() {
        assert_eq!(
            check_shapes(WeightType::Q4_0, 2, 48, 1000, 48),
            Err(ShapeError::NotMultiple {
                op: OP,
                what: "cols",
                value: 48,
                multiple: 32
            })
        );
        assert_eq!(
            check_shapes(WeightType::Q4_1, 2, 64, 79, 64),
            Err(ShapeError::TooSmall {
                op: OP,
                what: "weight bytes",
                needed: 80,
                found: 79
            })
        );
        assert!(matches!(
            check_shapes(WeightType::F32, 3, 5, 60, 4),
            Err(ShapeError::Mismatch {
                expected: 5,
                found: 4,
                ..
            })
        ));
        assert!(matches!(
            check_shapes(WeightType::F32, 0, 5, 60, 5),
            Err(ShapeError::Zero { what: "rows", .. })
        ));
        assert!(matches!(
            check_shapes(WeightType::F32, 1 << 16, 1 << 15, usize::MAX, 1 << 15),
            Err(ShapeError::TooLarge { .. })
        ));
        assert!(matches!(
            case(WeightType::Q8_0, 3, 40, Reduce::Shared, 1),
            Err(ShapeError::NotMultiple { .. })
        ));
        let blocked = MatvecSpec {
            workgroup: 32,
            blocked: true,
            ..MatvecSpec::new(WeightType::Q4_1, Reduce::Subgroup)
        };
        assert!(matches!(
            kernel(blocked),
            Err(ShapeError::NotPowerOfTwo { value: 32, .. })
        ));
        let mut spec = MatvecSpec::new(WeightType::F32, Reduce::Shared);
        spec.workgroup = 48;
        assert!(matches!(
            kernel(spec),
            Err(ShapeError::NotPowerOfTwo { value: 48, .. })
        ));
    }

    /// Codes read as words give the bits of codes read byte by byte, for every segment length
    /// (one, two and four words), fused or not, Q8_0's at both alignments (96 columns make
    /// 102-byte rows, so every other row starts in the middle of a word) and up to the
    /// buffer's last byte (9 rows of 102 bytes end mid-word); and a word view is only declared
    /// where the scales have their f16 view (Q4_1 and Q8_0).
    #[test]
    fn word_codes_equal_byte_codes() {
        for (ty, cols, rows) in [
            (WeightType::Q4_1, 128, 10),
            (WeightType::Q8_0, 128, 10),
            (WeightType::Q8_0, 96, 9),
        ] {
            for (segment, prologue, epilogue) in [
                (8, Prologue::RmsNorm, Epilogue::Swiglu),
                (16, Prologue::None, Epilogue::Add),
                (32, Prologue::None, Epilogue::None),
            ] {
                let rows = if epilogue == Epilogue::Swiglu {
                    10
                } else {
                    rows
                };
                let bytes = MatvecSpec {
                    rows_per_workgroup: 2,
                    workgroup: 32,
                    segment,
                    f16_scales: true,
                    prologue,
                    epilogue,
                    ..MatvecSpec::new(ty, Reduce::Subgroup)
                };
                let words = MatvecSpec {
                    word_codes: true,
                    ..bytes
                };
                assert_eq!(words.weights_elem(), Scalar::U32);
                let run = |spec| {
                    let case = spec_case(spec, rows, cols, 2, 7).unwrap();
                    let at = case.buffers.iter().position(|b| b.name == "y").unwrap();
                    case.interpret().unwrap().swap_remove(at)
                };
                assert_eq!(run(words), run(bytes), "{ty} {cols} segment {segment}");
            }
        }
        for (ty, f16_scales) in [
            (WeightType::Q4_1, false),
            (WeightType::Q8_0, false),
            (WeightType::Q4_0, true),
        ] {
            let spec = MatvecSpec {
                word_codes: true,
                f16_scales,
                ..MatvecSpec::new(ty, Reduce::Subgroup)
            };
            assert_eq!(spec.weights_elem(), Scalar::U8, "{ty}");
        }
    }

    #[test]
    fn reference_is_a_plain_dot_product() {
        // W = [[1, 2], [3, 4], [-1, 0.5]] in f16, x = [0.5, -1].
        let w = quantize(WeightType::F16, &[1.0, 2.0, 3.0, 4.0, -1.0, 0.5]).unwrap();
        let y = reference(WeightType::F16, &w, 3, 2, &[0.5, -1.0]).unwrap();
        assert_eq!(y, vec![-1.5, -2.5, -1.0]);
    }
}
