//! A matvec kernel's compile-time choices ([`MatvecSpec`]), their checks, its grid and
//! parameters, and the shape rules of a product.

use super::{Epilogue, Prologue, OP, SEGMENT};
use crate::blocks::{self, BlockFormat};
use crate::case::Case;
use crate::shape::ShapeError;
use crate::support::multiple_of;
use trine_gguf::quant::WeightType;
use trine_ir::{ParamValue, Scalar};

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
    pub(super) fn name(self) -> &'static str {
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
    /// 8, 16 or 32 that divides a block's bytes of codes; `segment` and `word_codes` do not
    /// apply.
    pub blocked: bool,
    /// Formats with two codes a byte, with `blocked` only, on a block's elements as
    /// invocations: the weights are in [`blocks::pair_blocks`]' layout, and the walk takes a
    /// pair of blocks per step, invocation `l` reading byte `l` of the pair's code bytes
    /// (elements `l` of both blocks). Consecutive invocations then read 32 consecutive bytes, which GCC loads and
    /// converts in 256-bit vectors, where a block's own 16 bytes of codes allow only 128.
    pub pairs: bool,
    /// Tokens of a prompt a workgroup multiplies at once (1 but with `pairs`): each pair of
    /// blocks is dequantised once for all of them. The kernel then takes the prompt's length
    /// as a last parameter `tokens`.
    pub tokens_per_workgroup: u32,
    /// The ops fused before and after the product, which save their dispatches and the round
    /// trips of the activations through memory ([`crate::matvec_fused`]).
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

    /// Whether the kernel binds an f16 view of the weights (`w16`) to read their scales:
    /// quantized weights with `f16_scales` (plain floats have no scales to read).
    pub fn binds_f16_view(&self) -> bool {
        self.f16_scales && self.weights.is_quantized()
    }

    /// Whether the kernel reads the codes as words ([`MatvecSpec::word_codes`]).
    pub(super) fn reads_words(&self) -> bool {
        self.word_codes
            && !self.blocked
            && self.f16_scales
            && match BlockFormat::of(self.weights) {
                Some(BlockFormat::Flat(f)) => super::dot::words_apply(f),
                // Packed formats' runs start on even bytes (`blocks::Bytes`).
                Some(BlockFormat::Packed(p)) => p.bytes.is_multiple_of(2),
                None => false,
            }
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
            blocks::buffer_elem(self.weights)
        }
    }

    /// Whether the kernel reads [`blocks::pair_blocks`]' layout ([`MatvecSpec::pairs`]).
    pub fn reads_pairs(&self) -> bool {
        self.pairs && self.blocked && blocks::pairs_apply(self.weights)
    }

    /// Adds to `case` the weight buffers this spec's kernel reads, all over the same bytes
    /// (rows of `cols` weights, in pairs where the spec reads them so): `w` and, with f16
    /// scales, its f16 view `w16`.
    pub fn weight_inputs(&self, case: Case, w: Vec<u8>, cols: u32) -> Case {
        let w = if self.reads_pairs() {
            blocks::pair_blocks(self.weights, &w, cols as usize)
        } else {
            w
        };
        let w = blocks::pad_to_words(w);
        if self.binds_f16_view() {
            case.input("w", self.weights_elem(), w.clone())
                .input("w16", Scalar::F16, w)
        } else {
            case.input("w", self.weights_elem(), w)
        }
    }

    pub(super) fn check(&self) -> Result<(), ShapeError> {
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
        // Invocations share a block's bytes of codes, or a packed format's sub-block.
        let fits = |f: BlockFormat| {
            let across = match f {
                _ if self.reads_pairs() => return self.workgroup == f.elems(),
                BlockFormat::Flat(f) => f.code_bytes(),
                BlockFormat::Packed(p) => p.sub,
            };
            [8, 16, 32].contains(&self.workgroup) && across.is_multiple_of(self.workgroup)
        };
        if self.blocked && BlockFormat::of(self.weights).is_some_and(|f| !fits(f)) {
            return Err(ShapeError::NotPowerOfTwo {
                op: OP,
                what: "workgroup size of a blocked quantized product (8, 16 or 32 dividing a \
                       block's bytes of codes or a packed format's sub-block; in pairs a \
                       block's elements)",
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
        if self.epilogue == Epilogue::Swiglu {
            multiple_of(
                OP,
                "rows per workgroup of a SwiGLU product (gate and up rows in pairs)",
                self.rows_per_workgroup,
                2,
            )?;
        }
        if let Epilogue::RopeStore(r) = self.epilogue {
            r.check()?;
            multiple_of(
                OP,
                "rows per workgroup of a QKV product with rope (pairs of rows)",
                self.rows_per_workgroup,
                2,
            )?;
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
    pub(super) fn outputs(&self) -> u32 {
        match self.epilogue {
            Epilogue::Swiglu | Epilogue::RopeStore(_) => self.rows_per_workgroup / 2,
            Epilogue::None | Epilogue::Add => self.rows_per_workgroup,
        }
    }

    /// Sums reduced across the workgroup per token: one per row, and the norm's sum of
    /// squares.
    pub(super) fn reduced_rows(&self) -> u32 {
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
