//! The KV cache's storage types: f32, f16, and q8_0, llama.cpp's `-ctk/-ctv q8_0`.
//!
//! q8_0 keeps each block of 32 consecutive elements of the cache (a position's row of
//! `kv_heads · head_dim` values, so a block lies within one head where the head size is a
//! multiple of 32) as ggml's Q8_0 quantizes it: `d = max|v| / 127`, codes `round(v · (1/d))`,
//! and `d` rounded to f16 as the block's scale, so that an element reads back as
//! `code · f16(d)`. The block is stored as nine 32-bit words, its 32 codes in four-code words
//! and then its scale as f32 bits (exactly the f16 value): every read is a word, and no block
//! straddles a word, where Q8_0's 34-byte block would. 36 bytes for 32 elements against f16's
//! 64: the cache and attention's reads of it shrink to 56%.

use crate::key_layout::KeyLayout;
use crate::shape::ShapeError;
use crate::support::{multiple_of, Float};
use half::f16;
use trine_ir::{BufferId, KernelBuilder, Scalar, Val};

/// Elements of a q8_0 block.
pub const Q8_BLOCK: u32 = 32;
/// 32-bit words of a stored q8_0 block: eight of codes, one of scale.
pub const Q8_WORDS: u32 = 9;

/// How the KV cache stores its elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KvType {
    F32,
    F16,
    Q8_0,
}

impl From<Float> for KvType {
    fn from(f: Float) -> KvType {
        match f {
            Float::F32 => KvType::F32,
            Float::F16 => KvType::F16,
        }
    }
}

impl KvType {
    pub const ALL: [KvType; 3] = [KvType::F32, KvType::F16, KvType::Q8_0];

    /// The float type of a cache that stores elements one by one; `None` for q8_0.
    pub fn float(self) -> Option<Float> {
        match self {
            KvType::F32 => Some(Float::F32),
            KvType::F16 => Some(Float::F16),
            KvType::Q8_0 => None,
        }
    }

    /// The element type kernels declare for the cache's buffers.
    pub fn scalar(self) -> Scalar {
        match self {
            KvType::F32 => Scalar::F32,
            KvType::F16 => Scalar::F16,
            KvType::Q8_0 => Scalar::U32,
        }
    }

    /// As llama.cpp's `-ctk` names it.
    pub fn name(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
            KvType::Q8_0 => "q8_0",
        }
    }

    pub fn from_name(name: &str) -> Option<KvType> {
        KvType::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Bytes of a cache of `elements` (for q8_0 a multiple of [`Q8_BLOCK`]).
    pub fn bytes_for(self, elements: u64) -> u64 {
        match self {
            KvType::F32 => 4 * elements,
            KvType::F16 => 2 * elements,
            KvType::Q8_0 => elements / Q8_BLOCK as u64 * Q8_WORDS as u64 * 4,
        }
    }

    /// Checks that caches of this type hold heads of `head_dim` with the K cache in `keys`:
    /// q8_0's blocks lie along a position's row, so its K cache is in rows and its heads are
    /// whole blocks.
    pub fn check(self, op: &'static str, keys: KeyLayout, head_dim: u32) -> Result<(), ShapeError> {
        if self != KvType::Q8_0 {
            return Ok(());
        }
        if keys != KeyLayout::Rows {
            return Err(ShapeError::Unsupported {
                op,
                what: "a q8_0 K cache in columns (q8_0 blocks lie along rows)".to_string(),
            });
        }
        multiple_of(op, "head_dim of a q8_0 cache", head_dim, Q8_BLOCK)?;
        Ok(())
    }

    /// The index in a cache buffer of this type of the element of the buffer's type that
    /// holds element `i`: for q8_0, the word of its code.
    pub(crate) fn held_at<'b>(self, k: &'b KernelBuilder, i: Val<'b>) -> Val<'b> {
        match self {
            KvType::F32 | KvType::F16 => i,
            KvType::Q8_0 => q8_words(k, i).1,
        }
    }

    /// Consecutive elements of a row that one prefetch of `line` bytes covers: a q8_0 block
    /// is prefetched as a whole.
    pub(crate) fn per_line(self, line: u32) -> u32 {
        match self {
            KvType::Q8_0 => Q8_BLOCK,
            _ => line / self.scalar().size() as u32,
        }
    }

    /// Element `i` of a cache buffer of this type, as f32.
    pub(crate) fn load<'b>(self, k: &'b KernelBuilder, buf: BufferId, i: Val<'b>) -> Val<'b> {
        match self {
            KvType::F32 => k.load(buf, i),
            KvType::F16 => k.load(buf, i).cast(Scalar::F32),
            KvType::Q8_0 => {
                let (block, code_word) = q8_words(k, i);
                let word = k.load(buf, code_word);
                let shift = (i % k.u32(4)) * k.u32(8);
                // The byte moved to the top and shifted back arithmetically: its sign extended.
                let code = (word << (k.u32(24) - shift)).bitcast(Scalar::I32) >> k.u32(24);
                let scale = k.load(buf, block + k.u32(8)).bitcast(Scalar::F32);
                code.cast(Scalar::F32) * scale
            }
        }
    }

    /// The cache's bytes holding `v` (for q8_0, whole blocks).
    pub fn bytes(self, v: &[f32]) -> Vec<u8> {
        match self.float() {
            Some(f) => f.bytes(v),
            None => v
                .chunks(Q8_BLOCK as usize)
                .flat_map(|b| {
                    let (codes, scale) = q8_block(b);
                    let words = codes.chunks(4).map(|c| {
                        u32::from_le_bytes([c[0] as u8, c[1] as u8, c[2] as u8, c[3] as u8])
                    });
                    words
                        .chain([scale.to_bits()])
                        .flat_map(u32::to_le_bytes)
                        .collect::<Vec<u8>>()
                })
                .collect(),
        }
    }

    /// Elements per unit of storage: 32 for q8_0's blocks, else 1.
    pub fn block(self) -> u32 {
        match self {
            KvType::Q8_0 => Q8_BLOCK,
            _ => 1,
        }
    }

    /// The elements a cache's bytes hold (whole blocks).
    pub fn decode(self, bytes: &[u8]) -> Vec<f32> {
        let word = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        match self {
            KvType::F32 => bytes
                .chunks_exact(4)
                .map(|b| f32::from_bits(word(b)))
                .collect(),
            KvType::F16 => bytes
                .chunks_exact(2)
                .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            KvType::Q8_0 => bytes
                .chunks_exact(4 * Q8_WORDS as usize)
                .flat_map(|b| {
                    let scale = f32::from_bits(word(&b[32..]));
                    b[..32].iter().map(move |&c| c as i8 as f32 * scale)
                })
                .collect(),
        }
    }

    /// `v` as a cache of this type holds it: what its reads give back.
    pub fn stored(self, v: &[f32]) -> Vec<f32> {
        match self.float() {
            Some(f) => f.stored(v),
            None => v
                .chunks(Q8_BLOCK as usize)
                .flat_map(|b| {
                    let (codes, scale) = q8_block(b);
                    codes.into_iter().map(move |c| c as f32 * scale)
                })
                .collect(),
        }
    }
}

impl std::str::FromStr for KvType {
    type Err = String;

    fn from_str(s: &str) -> Result<KvType, String> {
        KvType::from_name(s).ok_or_else(|| {
            let names: Vec<&str> = KvType::ALL.iter().map(|t| t.name()).collect();
            format!(
                "unknown KV cache type {s:?} (trine keeps {})",
                names.join(", ")
            )
        })
    }
}

/// The first word of element `i`'s q8_0 block and the word of its code.
fn q8_words<'b>(k: &'b KernelBuilder, i: Val<'b>) -> (Val<'b>, Val<'b>) {
    let block = (i / k.u32(Q8_BLOCK)) * k.u32(Q8_WORDS);
    (block, block + (i % k.u32(Q8_BLOCK)) / k.u32(4))
}

/// One block's codes and scale as ggml's `quantize_row_q8_0` computes them: the reciprocal of
/// the unrounded `d` scales the values, codes round half away from zero.
fn q8_block(b: &[f32]) -> (Vec<i8>, f32) {
    let amax = b.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let codes = b.iter().map(|&v| (v * id).round() as i8).collect();
    (codes, f16::from_f32(d).to_f32())
}

/// Quantizes the `Q8_BLOCK` values of shared array `vals` from `at` into the stored block at
/// word `word` of `buf`, one invocation for the block: [`q8_block`]'s arithmetic.
pub(crate) fn store_q8_block<'b>(
    k: &'b KernelBuilder,
    (vals, at): (trine_ir::SharedId, Val<'b>),
    buf: BufferId,
    word: Val<'b>,
) {
    let values: Vec<Val> = (0..Q8_BLOCK)
        .map(|e| k.load_shared(vals, at + k.u32(e)))
        .collect();
    let amax = values.iter().fold(k.f32(0.0), |m, v| m.max(v.abs()));
    let d = amax / k.f32(127.0);
    let id = k.select(d.gt(k.f32(0.0)), k.f32(1.0) / d, k.f32(0.0));
    for (w, four) in values.chunks(4).enumerate() {
        let packed = four.iter().enumerate().fold(k.u32(0), |acc, (byte, &v)| {
            // Half away from zero: |v·id| + ½ truncated, the sign put back.
            let m = ((v * id).abs() + k.f32(0.5)).cast(Scalar::I32);
            let c = k.select(v.lt(k.f32(0.0)), -m, m).bitcast(Scalar::U32);
            acc | ((c & k.u32(255)) << k.u32(8 * byte as u32))
        });
        k.store(buf, word + k.u32(w as u32), packed);
    }
    let scale = crate::blocks::round_to_f16(k, d);
    k.store(buf, word + k.u32(8), scale.bitcast(Scalar::U32));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q8_blocks_are_ggml_q8_0() {
        // One block: max |v| = 2.54, so d = 0.02 and the codes are v / 0.02 rounded.
        let mut v = vec![0f32; 32];
        v[0] = 2.54;
        v[1] = -1.0;
        v[2] = 0.061;
        let stored = KvType::Q8_0.stored(&v);
        let d = f16::from_f32(2.54 / 127.0).to_f32();
        assert_eq!(stored[0], 127.0 * d);
        assert_eq!(stored[1], -50.0 * d);
        assert_eq!(stored[2], 3.0 * d);
        assert_eq!(stored[3], 0.0);
        let bytes = KvType::Q8_0.bytes(&v);
        assert_eq!(bytes.len() as u64, KvType::Q8_0.bytes_for(32));
        assert_eq!(&bytes[..4], &[127, (-50i8) as u8, 3, 0]);
        assert_eq!(f32::from_le_bytes(bytes[32..36].try_into().unwrap()), d);
        // Scales in f16's subnormal range round as f16 does.
        let tiny: Vec<f32> = (0..32).map(|i| i as f32 * 1e-6).collect();
        let d = f16::from_f32(31e-6 / 127.0).to_f32();
        assert_eq!(KvType::Q8_0.stored(&tiny)[31], 127.0 * d);
        // A block of zeros has scale 0 and reads back as zeros.
        assert!(KvType::Q8_0.stored(&[0.0; 32]).iter().all(|&x| x == 0.0));
    }
}
