//! Weight formats: f32, f16 and GGUF's Q8_0, Q4_0 and Q4_1 blocks, checked against ggml's
//! `ggml-common.h` and `ggml-quants.c`. Every quantized block holds 32 elements:
//!
//! | format | bytes | layout                              | element j                         |
//! | ------ | ----- | ----------------------------------- | --------------------------------- |
//! | Q8_0   | 34    | f16 d, 32 × i8 q                    | d·q[j]                            |
//! | Q4_0   | 18    | f16 d, 16 bytes of nibbles          | d·(n(j) − 8)                      |
//! | Q4_1   | 20    | f16 d, f16 m, 16 bytes of nibbles   | d·n(j) + m                        |
//!
//! where n(j) is the low nibble of byte j for j < 16 and the high nibble of byte j − 16
//! otherwise. f16 values are little-endian.
//!
//! Here: the plain-Rust quantizers (ggml's reference ones, to build test data the way GGUF
//! files are made) and dequantizers (exact, in f64), the reference every kernel that decodes
//! blocks is checked against. The kernels decode blocks by their description in
//! `trine_ops::blocks`.

use half::f16;

/// Elements per quantized block (ggml's QK8_0, QK4_0, QK4_1).
pub const QK: usize = 32;

/// How a weight matrix is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WeightType {
    F32,
    F16,
    Q8_0,
    Q4_0,
    Q4_1,
}

impl WeightType {
    pub const ALL: [WeightType; 5] = [
        WeightType::F32,
        WeightType::F16,
        WeightType::Q8_0,
        WeightType::Q4_0,
        WeightType::Q4_1,
    ];

    /// The name used in case and kernel names (GGUF's spelling, lower case).
    pub fn name(self) -> &'static str {
        match self {
            WeightType::F32 => "f32",
            WeightType::F16 => "f16",
            WeightType::Q8_0 => "q8_0",
            WeightType::Q4_0 => "q4_0",
            WeightType::Q4_1 => "q4_1",
        }
    }

    pub fn is_quantized(self) -> bool {
        matches!(self, WeightType::Q8_0 | WeightType::Q4_0 | WeightType::Q4_1)
    }

    /// Elements per block: 1 for plain floats.
    pub fn block_elems(self) -> usize {
        if self.is_quantized() {
            QK
        } else {
            1
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            WeightType::F32 => 4,
            WeightType::F16 => 2,
            WeightType::Q8_0 => 2 + QK,
            WeightType::Q4_0 => 2 + QK / 2,
            WeightType::Q4_1 => 4 + QK / 2,
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

/// Encodes `x` in format `ty`. Quantized formats use ggml's reference quantizers
/// (`quantize_row_*_ref`), so test data looks like a GGUF file's: `x.len()` must be whole
/// blocks. Values are expected to be finite (a NaN gives an arbitrary block, never a panic).
pub fn quantize(ty: WeightType, x: &[f32]) -> Result<Vec<u8>, BlockError> {
    let mut out = Vec::with_capacity(ty.bytes("quantize", "element count", x.len())?);
    match ty {
        WeightType::F32 => x.iter().for_each(|v| out.extend(v.to_le_bytes())),
        WeightType::F16 => x
            .iter()
            .for_each(|&v| out.extend(f16::from_f32(v).to_le_bytes())),
        WeightType::Q8_0 => x.chunks_exact(QK).for_each(|b| quantize_q8_0(b, &mut out)),
        WeightType::Q4_0 => x.chunks_exact(QK).for_each(|b| quantize_q4_0(b, &mut out)),
        WeightType::Q4_1 => x.chunks_exact(QK).for_each(|b| quantize_q4_1(b, &mut out)),
    }
    Ok(out)
}

/// ggml's `quantize_row_q8_0_ref` for one block: d = amax/127, q = round(x/d).
fn quantize_q8_0(x: &[f32], out: &mut Vec<u8>) {
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend(f16::from_f32(d).to_le_bytes());
    // C's roundf rounds halves away from zero, as f32::round does.
    out.extend(x.iter().map(|v| (v * id).round() as i8 as u8));
}

/// ggml's `quantize_row_q4_0_ref` for one block: d = −(signed absolute max)/8, so the extreme
/// value maps to code 0 and the other side reaches at most 15.
fn quantize_q4_0(x: &[f32], out: &mut Vec<u8>) {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend(f16::from_f32(d).to_le_bytes());
    // `(int8_t)(v + 8.5f)` truncates toward zero, as `as i8` does.
    let code = |v: f32| ((v * id + 8.5) as i8).min(15) as u8;
    out.extend((0..QK / 2).map(|j| code(x[j]) | (code(x[j + QK / 2]) << 4)));
}

/// ggml's `quantize_row_q4_1_ref` for one block: d = (max − min)/15, m = min.
fn quantize_q4_1(x: &[f32], out: &mut Vec<u8>) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        min = if v < min { v } else { min };
        max = if v > max { v } else { max };
    }
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend(f16::from_f32(d).to_le_bytes());
    out.extend(f16::from_f32(min).to_le_bytes());
    let code = |v: f32| (((v - min) * id + 0.5) as i8).min(15) as u8;
    out.extend((0..QK / 2).map(|j| code(x[j]) | (code(x[j + QK / 2]) << 4)));
}

/// The values of the first `n` elements of `bytes` in format `ty`, exactly: every product
/// d·q and sum d·q + m of f16 values is representable in f64.
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
    let bytes = &bytes[..needed];
    let half_at = |b: &[u8], at: usize| f16::from_le_bytes([b[at], b[at + 1]]).to_f64();
    let nibble = |qs: &[u8], j: usize| f64::from((qs[j % 16] >> (4 * (j / 16))) & 15);
    let mut out = Vec::with_capacity(n);
    for b in bytes.chunks_exact(ty.block_bytes()) {
        match ty {
            WeightType::F32 => out.push(f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
            WeightType::F16 => out.push(half_at(b, 0)),
            WeightType::Q8_0 => {
                let d = half_at(b, 0);
                out.extend(b[2..].iter().map(|&q| d * f64::from(q as i8)));
            }
            WeightType::Q4_0 => {
                let d = half_at(b, 0);
                out.extend((0..QK).map(|j| d * (nibble(&b[2..], j) - 8.0)));
            }
            WeightType::Q4_1 => {
                let (d, m) = (half_at(b, 0), half_at(b, 2));
                out.extend((0..QK).map(|j| d * nibble(&b[4..], j) + m));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// splitmix64's uniform f32s in [lo, hi), as the synthetic models draw them.
    fn uniform(seed: u64, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        let mut rng = crate::synth::Rng::new(seed);
        (0..n).map(|_| rng.f32(lo, hi)).collect()
    }

    #[test]
    fn block_sizes_match_ggml() {
        let sizes: Vec<_> = WeightType::ALL.iter().map(|t| t.block_bytes()).collect();
        assert_eq!(sizes, [4, 2, 34, 18, 20]);
        assert_eq!(WeightType::Q4_1.bytes("t", "n", 64), Ok(40));
        assert_eq!(
            WeightType::Q8_0.bytes("t", "n", 33),
            Err(BlockError::NotMultiple {
                op: "t",
                what: "n",
                value: 33,
                multiple: 32
            })
        );
    }

    #[test]
    fn quantizers_reproduce_ggml_blocks() {
        // A block whose values are exact multiples of its step quantizes losslessly.
        let x: Vec<f32> = (0..32).map(|i| (i as f32 - 16.0) * 0.5).collect();
        let q8 = quantize(WeightType::Q8_0, &x).unwrap();
        assert_eq!(q8.len(), 34);
        // amax = 8, d = 8/127.
        assert_eq!(&q8[..2], &f16::from_f32(8.0 / 127.0).to_le_bytes());
        assert_eq!(q8[2] as i8, -127);
        assert_eq!(q8[2 + 16] as i8, 0);
        let q4 = quantize(WeightType::Q4_0, &x).unwrap();
        // The value of largest magnitude is −8, so d = −8/−8 = 1: x = −8 gets code 0 and
        // x = 7.5 gets trunc(16) clamped to 15.
        assert_eq!(&q4[..2], &f16::from_f32(1.0).to_le_bytes());
        assert_eq!(q4[2] & 15, 0);
        assert_eq!(q4[2 + 15] >> 4, 15);
        let q41 = quantize(WeightType::Q4_1, &x).unwrap();
        let back = dequantize(WeightType::Q4_1, &q41, 32).unwrap();
        // d = 15.5/15 rounds to f16; every value is within half a step of the input.
        let d = f16::from_f32(15.5 / 15.0).to_f64();
        for (a, b) in x.iter().zip(&back) {
            assert!((*a as f64 - b).abs() <= d / 2.0 + 1e-3, "{a} vs {b}");
        }
        assert_eq!(back[0], -8.0);
    }

    #[test]
    fn dequantize_decodes_nibble_order_and_signs() {
        // Q4_0 with d = 2: byte j holds element j (low) and j + 16 (high).
        let mut block = f16::from_f32(2.0).to_le_bytes().to_vec();
        block.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let v = dequantize(WeightType::Q4_0, &block, 32).unwrap();
        assert_eq!(v[0], -16.0);
        assert_eq!(v[15], 14.0);
        assert_eq!(v[16], 14.0);
        assert_eq!(v[31], -16.0);
        // Q8_0: bytes are two's complement.
        let mut block = f16::from_f32(0.5).to_le_bytes().to_vec();
        block.extend((0..32u8).map(|j| j.wrapping_mul(9)));
        let v = dequantize(WeightType::Q8_0, &block, 32).unwrap();
        assert_eq!(v[15], 0.5 * f64::from((15u8 * 9) as i8));
        assert_eq!(v[31], 0.5 * f64::from((31u8.wrapping_mul(9)) as i8));
        assert!(matches!(
            dequantize(WeightType::Q4_1, &[0; 19], 32),
            Err(BlockError::TooSmall { needed: 20, .. })
        ));
    }

    #[test]
    fn quantization_error_is_within_half_a_step() {
        let x = uniform(3, 32 * 64, -3.0, 3.0);
        for ty in [WeightType::Q8_0, WeightType::Q4_0, WeightType::Q4_1] {
            let q = quantize(ty, &x).unwrap();
            let back = dequantize(ty, &q, x.len()).unwrap();
            for (blk, (xs, bs)) in x.chunks(32).zip(back.chunks(32)).enumerate() {
                let amax = xs.iter().fold(0f32, |a, v| a.max(v.abs())) as f64;
                let (lo, hi) = xs
                    .iter()
                    .fold((f32::MAX, f32::MIN), |(l, h), &v| (l.min(v), h.max(v)));
                // Rounding costs half a step, except Q4_0's clamp of code 16 to 15, which
                // costs a whole one at the end opposite the extreme value; the f16 scales add
                // a few units of 2^-11 of amax.
                let tol = match ty {
                    WeightType::Q8_0 => amax / 127.0 / 2.0,
                    WeightType::Q4_0 => amax / 8.0,
                    _ => f64::from(hi - lo) / 15.0 / 2.0,
                } + amax * 2f64.powi(-8);
                for (a, b) in xs.iter().zip(bs) {
                    assert!((*a as f64 - b).abs() <= tol, "{ty} block {blk}: {a} vs {b}");
                }
            }
        }
    }
}
