//! Weight formats: f32, f16 and GGUF's quantized blocks, laid out as ggml's `ggml-common.h`
//! declares them and decoded bit for bit as the `gguf` Python package decodes them
//! (`tests/dequant_reference.rs`, fixtures in `tests/fixtures/dequant/`, which ggml's C
//! dequantizers also give: `scripts/reference/dequant_fixtures_ggml.c`). Multi-byte fields are
//! little-endian; f16 is IEEE half precision.
//!
//! The legacy types and IQ4_NL hold 32 elements a block ([`QK`]). n(j) is the low nibble of
//! qs[j] for j < 16 and the high nibble of qs[j − 16] otherwise; h(j) is bit j of qh:
//!
//! | type   | bytes | layout                          | element j (0..32)          |
//! | ------ | ----- | ------------------------------- | -------------------------- |
//! | Q8_0   | 34    | f16 d, i8 q[32]                 | d·q[j]                     |
//! | Q4_0   | 18    | f16 d, qs[16]                   | d·(n(j) − 8)               |
//! | Q4_1   | 20    | f16 d, f16 m, qs[16]            | d·n(j) + m                 |
//! | Q5_0   | 22    | f16 d, u32 qh, qs[16]           | d·(n(j) + 16·h(j) − 16)    |
//! | Q5_1   | 24    | f16 d, f16 m, u32 qh, qs[16]    | d·(n(j) + 16·h(j)) + m     |
//! | IQ4_NL | 18    | f16 d, qs[16]                   | d·kv[n(j)]                 |
//!
//! where kv = [−127, −104, −83, −65, −49, −35, −22, −10, 1, 13, 25, 38, 53, 69, 89, 113], a
//! grid denser near zero, where most weights lie.
//!
//! The K-quants and IQ4_XS hold 256 elements a super-block ([`QK_K`]), cut in sub-blocks of 16
//! or 32 that each have a scale s (and a min m) of a few bits, which scale the super-block's
//! f16 d (and dmin). Element e (0..256) of sub-block i:
//!
//! | type   | bytes | layout                                       | sub-blocks: s (m)     | element e                       |
//! | ------ | ----- | -------------------------------------------- | --------------------- | ------------------------------- |
//! | Q2_K   | 84    | scales[16], qs[64], f16 d, f16 dmin          | 16 × 16: 4-bit s, m   | d·s·c2(e) − dmin·m              |
//! | Q3_K   | 110   | hmask[32], qs[64], scales[12], f16 d         | 16 × 16: 6-bit s − 32 | d·s·(c2(e) + 4·hm(e) − 4)       |
//! | Q4_K   | 144   | f16 d, f16 dmin, scales[12], qs[128]         | 8 × 32: 6-bit s, m    | d·s·c4(e) − dmin·m              |
//! | Q5_K   | 176   | f16 d, f16 dmin, scales[12], qh[32], qs[128] | 8 × 32: 6-bit s, m    | d·s·(c4(e) + 16·h5(e)) − dmin·m |
//! | Q6_K   | 210   | ql[128], qh[64], i8 scales[16], f16 d        | 16 × 16: i8 s         | d·s·(c6(e) − 32)                |
//! | Q8_K   | 292   | f32 d, i8 q[256], i16 bsums[16]              | none                  | d·q[e]                          |
//! | IQ4_XS | 136   | f16 d, u16 scales_h, scales_l[4], qs[128]    | 8 × 32: 6-bit s − 32  | d·s·kv[c4x(e)]                  |
//!
//! - Q2_K, Q3_K: e = 128h + 32j + l (l < 32), i = e/16. c2(e) = bits 2j..2j+2 of qs[32h + l];
//!   hm(e) = bit 4h + j of hmask[l]. Q2_K's scales[i] holds s in its low nibble, m in its high.
//!   Q3_K's 6-bit s of sub-block i: its low 4 bits are the low nibble of scales[i] for i < 8 and
//!   the high nibble of scales[i − 8] otherwise, its high 2 bits are bits 2(i/4)..2(i/4)+2 of
//!   scales[8 + i%4].
//! - Q4_K, Q5_K: e = 64c + 32k + l (l < 32), i = e/32. c4(e) = nibble k (0 low, 1 high) of
//!   qs[32c + l]; h5(e) = bit i of qh[l]. The 12 bytes of scales hold 8 6-bit s and m: for i < 4,
//!   s = scales[i] & 63 and m = scales[i + 4] & 63; for i ≥ 4, their low 4 bits are the low
//!   (s) and high (m) nibble of scales[i + 4], their high 2 bits the top 2 bits of scales[i − 4]
//!   (s) and scales[i] (m).
//! - Q6_K: e = 128h + 32k + l (l < 32), i = e/16. c6(e)'s low 4 bits are nibble k/2 of
//!   ql[64h + 32(k%2) + l], its high 2 bits are bits 2k..2k+2 of qh[32h + l].
//! - Q8_K: bsums[i] is the sum of q[16i..16i + 16], which ggml's dot products with K-quants use;
//!   dequantizing ignores it.
//! - IQ4_XS: e = 32i + 16k + j (j < 16). c4x(e) = nibble k of qs[16i + j]; the 6-bit s of
//!   sub-block i has nibble i%2 of scales_l[i/2] as its low 4 bits and bits 2i..2i+2 of
//!   scales_h as its high 2.
//!
//! Here: the plain-Rust quantizers, which build test data and synthetic models, and the
//! dequantizers (exact, in f64), the reference every kernel that decodes blocks is checked
//! against. The legacy types' quantizers are ggml's reference ones (`legacy.rs`), so test data
//! looks like a GGUF file's; the K-quants' and IQ4's are simple ones of this crate (`k.rs`,
//! `iq4.rs` say how they choose scales), not ggml's search for the least error. The kernels
//! decode the types they run by their description in `trine_ops::blocks`.

mod groups;
mod iq4;
mod k;
mod legacy;
#[cfg(test)]
mod tests;

pub use groups::{regroup, GROUP};
use half::f16;

/// Elements per block of the legacy 32-element types (ggml's QK4_0, QK4_1, QK5_0, QK5_1,
/// QK8_0) and IQ4_NL, for code that names the legacy block itself; a type's own block is
/// [`WeightType::block_elems`].
pub const QK: usize = 32;

/// Elements per super-block of the K-quants and IQ4_XS (ggml's QK_K).
pub const QK_K: usize = 256;

/// How a weight matrix is stored.
#[allow(non_camel_case_types)] // ggml's names, as every GGUF tool spells them
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WeightType {
    F32,
    F16,
    Q8_0,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    IQ4_NL,
    IQ4_XS,
    /// Q4_0, Q4_1 and Q8_0 in groups of eight blocks ([`regroup`]): a device's layout, not a
    /// file's, and so not in [`WeightType::ALL`].
    Q4_0x8,
    Q4_1x8,
    Q8_0x8,
}

impl WeightType {
    pub const ALL: [WeightType; 15] = [
        WeightType::F32,
        WeightType::F16,
        WeightType::Q8_0,
        WeightType::Q4_0,
        WeightType::Q4_1,
        WeightType::Q5_0,
        WeightType::Q5_1,
        WeightType::Q2_K,
        WeightType::Q3_K,
        WeightType::Q4_K,
        WeightType::Q5_K,
        WeightType::Q6_K,
        WeightType::Q8_K,
        WeightType::IQ4_NL,
        WeightType::IQ4_XS,
    ];

    /// The name used in case and kernel names (GGUF's spelling, lower case).
    pub fn name(self) -> &'static str {
        match self {
            WeightType::F32 => "f32",
            WeightType::F16 => "f16",
            WeightType::Q8_0 => "q8_0",
            WeightType::Q4_0 => "q4_0",
            WeightType::Q4_1 => "q4_1",
            WeightType::Q5_0 => "q5_0",
            WeightType::Q5_1 => "q5_1",
            WeightType::Q2_K => "q2_k",
            WeightType::Q3_K => "q3_k",
            WeightType::Q4_K => "q4_k",
            WeightType::Q5_K => "q5_k",
            WeightType::Q6_K => "q6_k",
            WeightType::Q8_K => "q8_k",
            WeightType::IQ4_NL => "iq4_nl",
            WeightType::IQ4_XS => "iq4_xs",
            WeightType::Q4_0x8 => "q4_0x8",
            WeightType::Q4_1x8 => "q4_1x8",
            WeightType::Q8_0x8 => "q8_0x8",
        }
    }

    pub fn is_quantized(self) -> bool {
        !matches!(self, WeightType::F32 | WeightType::F16)
    }

    /// Elements per block: 1 for plain floats.
    pub fn block_elems(self) -> usize {
        match self {
            WeightType::F32 | WeightType::F16 => 1,
            WeightType::Q8_0
            | WeightType::Q4_0
            | WeightType::Q4_1
            | WeightType::Q5_0
            | WeightType::Q5_1
            | WeightType::IQ4_NL => QK,
            WeightType::Q2_K
            | WeightType::Q3_K
            | WeightType::Q4_K
            | WeightType::Q5_K
            | WeightType::Q6_K
            | WeightType::Q8_K
            | WeightType::IQ4_XS => QK_K,
            WeightType::Q4_0x8 | WeightType::Q4_1x8 | WeightType::Q8_0x8 => {
                GROUP * self.file_type().block_elems()
            }
        }
    }

    /// Bytes per block (ggml's `type_size`), the sum of the fields the module's tables list.
    pub fn block_bytes(self) -> usize {
        match self {
            WeightType::F32 => 4,
            WeightType::F16 => 2,
            WeightType::Q8_0 => 2 + QK,
            WeightType::Q4_0 => 2 + QK / 2,
            WeightType::Q4_1 => 4 + QK / 2,
            WeightType::Q5_0 => 2 + 4 + QK / 2,
            WeightType::Q5_1 => 4 + 4 + QK / 2,
            WeightType::IQ4_NL => 2 + QK / 2,
            WeightType::Q2_K => QK_K / 16 + QK_K / 4 + 4,
            WeightType::Q3_K => QK_K / 8 + QK_K / 4 + 12 + 2,
            WeightType::Q4_K => 4 + 12 + QK_K / 2,
            WeightType::Q5_K => 4 + 12 + QK_K / 8 + QK_K / 2,
            WeightType::Q6_K => QK_K / 2 + QK_K / 4 + QK_K / 16 + 2,
            WeightType::Q8_K => 4 + QK_K + 2 * (QK_K / 16),
            WeightType::IQ4_XS => 4 + QK_K / 64 + QK_K / 2,
            WeightType::Q4_0x8 | WeightType::Q4_1x8 | WeightType::Q8_0x8 => {
                GROUP * self.file_type().block_bytes()
            }
        }
    }

    /// Bytes of `n` elements, which must be whole blocks.
    pub fn bytes(
        self,
        op: &'static str,
        what: &'static str,
        n: usize,
    ) -> Result<usize, BlockError> {
        let per = self.block_elems();
        if !n.is_multiple_of(per) {
            return Err(BlockError::NotMultiple {
                op,
                what,
                value: n,
                multiple: per,
            });
        }
        (n / per)
            .checked_mul(self.block_bytes())
            .ok_or_else(|| BlockError::TooLarge {
                op,
                what,
                value: n,
                limit: (usize::MAX / self.block_bytes()).saturating_mul(per),
            })
    }
}

/// A size that is not whole blocks of a format, or bytes too few for the elements asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlockError {
    /// An element count that is not whole blocks.
    #[error("{op}: {what} = {value} is not a multiple of {multiple}")]
    NotMultiple {
        op: &'static str,
        what: &'static str,
        value: usize,
        multiple: usize,
    },
    /// An element count whose bytes overflow `usize`.
    #[error("{op}: {what} = {value} exceeds the limit {limit}")]
    TooLarge {
        op: &'static str,
        what: &'static str,
        value: usize,
        limit: usize,
    },
    /// A type without a grouped layout asked to regroup ([`regroup`]).
    #[error("regroup: {ty} has no grouped layout (q4_0, q4_1 and q8_0 have)")]
    NoGroups { ty: WeightType },
    /// Fewer bytes than the elements asked for need.
    #[error("{op}: {what} holds {found}, needs at least {needed}")]
    TooSmall {
        op: &'static str,
        what: &'static str,
        needed: usize,
        found: usize,
    },
}

impl std::fmt::Display for WeightType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Encodes `x` in format `ty`; `x.len()` must be whole blocks. The legacy types use ggml's
/// reference quantizers (`quantize_row_*_ref`), so test data looks like a GGUF file's; the
/// K-quants and IQ4 types use this crate's simpler ones. Values are expected to be finite and
/// small enough for their scales to fit in f16 (a scale is about the block's largest magnitude
/// over its largest code); a NaN or an overflow gives an arbitrary block, never a panic.
pub fn quantize(ty: WeightType, x: &[f32]) -> Result<Vec<u8>, BlockError> {
    let mut out = Vec::with_capacity(ty.bytes("quantize", "element count", x.len())?);
    let encode: fn(&[f32], &mut Vec<u8>) = match ty {
        WeightType::F32 => |x, out| out.extend(x[0].to_le_bytes()),
        WeightType::F16 => |x, out| out.extend(f16::from_f32(x[0]).to_le_bytes()),
        WeightType::Q8_0 => legacy::quantize_q8_0,
        WeightType::Q4_0 => legacy::quantize_q4_0,
        WeightType::Q4_1 => legacy::quantize_q4_1,
        WeightType::Q5_0 => legacy::quantize_q5_0,
        WeightType::Q5_1 => legacy::quantize_q5_1,
        WeightType::Q2_K => k::quantize_q2_k,
        WeightType::Q3_K => k::quantize_q3_k,
        WeightType::Q4_K => k::quantize_q4_k,
        WeightType::Q5_K => k::quantize_q5_k,
        WeightType::Q6_K => k::quantize_q6_k,
        WeightType::Q8_K => k::quantize_q8_k,
        WeightType::IQ4_NL => iq4::quantize_iq4_nl,
        WeightType::IQ4_XS => iq4::quantize_iq4_xs,
        WeightType::Q4_0x8 => |x, out| grouped(WeightType::Q4_0, x, out),
        WeightType::Q4_1x8 => |x, out| grouped(WeightType::Q4_1, x, out),
        WeightType::Q8_0x8 => |x, out| grouped(WeightType::Q8_0, x, out),
    };
    x.chunks_exact(ty.block_elems())
        .for_each(|b| encode(b, &mut out));
    Ok(out)
}

/// The values of the first `n` elements of `bytes` in format `ty`, exactly. Every value is a
/// product of an f16 (or Q8_K's f32) scale and integers of at most 14 bits, less such a product
/// for the types with a min: the products need at most 11 + 14 significant bits (24 + 8 for
/// Q8_K), and a sum of two multiples of 2^-24 (f16's smallest step) below 2^27 each needs at
/// most 52, so f64 holds each one exactly. Products are taken in ggml's order, (d·s)·q, so
/// that a zero carries the sign ggml's (and gguf-py's) gives it.
pub fn dequantize(ty: WeightType, bytes: &[u8], n: usize) -> Result<Vec<f64>, BlockError> {
    let needed = ty.bytes("dequantize", "element count", n)?;
    if bytes.len() < needed {
        return Err(BlockError::TooSmall {
            op: "dequantize",
            what: "bytes",
            needed,
            found: bytes.len(),
        });
    }
    let decode: fn(&[u8], &mut Vec<f64>) = match ty {
        WeightType::F32 => {
            |b, out| out.push(f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])))
        }
        WeightType::F16 => |b, out| out.push(f16_at(b, 0)),
        WeightType::Q8_0 => legacy::dequantize_q8_0,
        WeightType::Q4_0 => legacy::dequantize_q4_0,
        WeightType::Q4_1 => legacy::dequantize_q4_1,
        WeightType::Q5_0 => legacy::dequantize_q5_0,
        WeightType::Q5_1 => legacy::dequantize_q5_1,
        WeightType::Q2_K => k::dequantize_q2_k,
        WeightType::Q3_K => k::dequantize_q3_k,
        WeightType::Q4_K => k::dequantize_q4_k,
        WeightType::Q5_K => k::dequantize_q5_k,
        WeightType::Q6_K => k::dequantize_q6_k,
        WeightType::Q8_K => k::dequantize_q8_k,
        WeightType::IQ4_NL => iq4::dequantize_iq4_nl,
        WeightType::IQ4_XS => iq4::dequantize_iq4_xs,
        WeightType::Q4_0x8 => |b, out| ungrouped(WeightType::Q4_0, b, out),
        WeightType::Q4_1x8 => |b, out| ungrouped(WeightType::Q4_1, b, out),
        WeightType::Q8_0x8 => |b, out| ungrouped(WeightType::Q8_0, b, out),
    };
    let mut out = Vec::with_capacity(n);
    bytes[..needed]
        .chunks_exact(ty.block_bytes())
        .for_each(|b| decode(b, &mut out));
    Ok(out)
}

/// Consecutive elements of a block that share a scale (and a minimum): element `i` of the
/// run is `scale · codes[i] + min`, exactly [`dequantize`]'s value, as a product with integer
/// activations takes it (the integer dot of the codes, then the scales).
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// Exact in f32: an f16 times an integer of at most 7 bits.
    pub scale: f32,
    /// 0 for the formats without a minimum.
    pub min: f32,
    pub codes: Vec<i8>,
}

/// The runs of one block of `ty` (`block` its bytes) for the formats whose sub-blocks carry
/// their own scales or whose codes lie in several bit arrays: Q5_0, Q5_1, IQ4_NL (one run a
/// block), the K-quants and IQ4_XS (runs of 16 or 32) and the grouped types (a run a block
/// of the group); `None` for the others.
pub fn runs(ty: WeightType, block: &[u8]) -> Option<Vec<Run>> {
    let decode: fn(&[u8]) -> Vec<Run> = match ty {
        WeightType::Q5_0 => legacy::runs_q5_0,
        WeightType::Q5_1 => legacy::runs_q5_1,
        WeightType::IQ4_NL => iq4::runs_iq4_nl,
        WeightType::IQ4_XS => iq4::runs_iq4_xs,
        WeightType::Q2_K => k::runs_q2_k,
        WeightType::Q3_K => k::runs_q3_k,
        WeightType::Q4_K => k::runs_q4_k,
        WeightType::Q5_K => k::runs_q5_k,
        WeightType::Q6_K => k::runs_q6_k,
        WeightType::Q4_0x8 => |g| groups::runs(WeightType::Q4_0, g),
        WeightType::Q4_1x8 => |g| groups::runs(WeightType::Q4_1, g),
        WeightType::Q8_0x8 => |g| groups::runs(WeightType::Q8_0, g),
        _ => return None,
    };
    (block.len() == ty.block_bytes()).then(|| decode(block))
}

/// The factors a super-block's runs share, for the formats whose runs' scales are one f16 of
/// the block times a small integer each (Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS): `(d, m)`, where
/// each run's [`Run::scale`] is `d` times an integer of −128..=127 and its [`Run::min`] `m`
/// times another (`m` is 0 for the formats without a minimum), both products exact in f32.
/// `None` for the other types or a block of the wrong length.
pub fn run_bases(ty: WeightType, block: &[u8]) -> Option<(f32, f32)> {
    let (d, min) = base_offsets(ty)?;
    if block.len() != ty.block_bytes() {
        return None;
    }
    let f = |at: usize| f16_at(block, at) as f32;
    Some((f(d), min.map_or(0.0, |m| -f(m))))
}

/// Whether `ty`'s blocks have [`run_bases`].
pub fn has_run_bases(ty: WeightType) -> bool {
    base_offsets(ty).is_some()
}

/// Where a block of `ty` holds the f16 factors of [`run_bases`]: `d`'s byte, and the
/// minimum's (negated in the runs) where the format has one.
fn base_offsets(ty: WeightType) -> Option<(usize, Option<usize>)> {
    match ty {
        WeightType::Q4_K | WeightType::Q5_K => Some((0, Some(2))),
        WeightType::Q6_K => Some((208, None)),
        WeightType::Q3_K => Some((108, None)),
        WeightType::IQ4_XS => Some((0, None)),
        _ => None,
    }
}

/// A group of `file`'s blocks quantized, regrouped.
fn grouped(file: WeightType, x: &[f32], out: &mut Vec<u8>) {
    let blocks = quantize(file, x).expect("a group is whole blocks");
    out.extend(regroup(file, &blocks).expect("one whole group"));
}

/// A group of `file`'s blocks dequantized by the file type's decoder, block by block.
fn ungrouped(file: WeightType, group: &[u8], out: &mut Vec<f64>) {
    for block in groups::file_blocks(file, group) {
        out.extend(dequantize(file, &block, QK).expect("one whole block"));
    }
}

/// The f16 at byte `at` of `b`, widened.
fn f16_at(b: &[u8], at: usize) -> f64 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f64()
}

/// The integer nearest `v` (halves up), clamped to `lo..=hi`, for `lo ≤ 0`. It truncates
/// `v − lo + ½`, which is never negative in range, because `f32::round` is a libm call on
/// baseline x86-64 and this runs once per element; a NaN gives `lo`.
fn nearest(v: f32, lo: i32, hi: i32) -> i32 {
    ((v - lo as f32 + 0.5) as i32)
        .saturating_add(lo)
        .clamp(lo, hi)
}

/// 1/d, or 0 where d is 0 (a block of zeros, whose codes are then all the zero code).
fn inverse(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

/// The first value of largest magnitude, sign kept: the symmetric quantizers map it to their
/// most negative code, which is the one with no positive twin.
fn signed_absmax(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

/// n(j) of 16 bytes of nibbles: element j < 16 is the low nibble of byte j, element j + 16 its
/// high nibble.
fn nibble(qs: &[u8], j: usize) -> u8 {
    (qs[j % 16] >> (4 * (j / 16))) & 15
}

/// 32 codes of 4 bits (or the low 4 bits of wider ones) as the 16 bytes [`nibble`] reads.
fn pack_nibbles(codes: &[u8]) -> impl Iterator<Item = u8> + '_ {
    (0..16).map(|j| (codes[j] & 15) | ((codes[j + 16] & 15) << 4))
}

/// Scales for the `S` equal sub-blocks of `x` that each map the sub-block's value of largest
/// magnitude to `extreme` (the most negative code, or grid value), stored as signed integers of
/// magnitude at most `smax` times an f16 d that the largest of them reaches. The range is kept
/// symmetric (no −smax − 1) so that no scale is clamped.
fn symmetric_scales<const S: usize>(x: &[f32], extreme: f32, smax: i32) -> (f16, [i8; S]) {
    let len = x.len() / S;
    let scale: [f32; S] = std::array::from_fn(|i| signed_absmax(&x[i * len..][..len]) / extreme);
    let d = f16::from_f32(scale.iter().fold(0f32, |a, s| a.max(s.abs())) / smax as f32);
    let id = inverse(d.to_f32());
    (d, scale.map(|s| nearest(s * id, -smax, smax) as i8))
}
