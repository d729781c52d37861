//! Q4_0, Q4_1 and Q8_0 in groups of [`GROUP`] blocks (256 elements): the layout a GPU holds
//! the weights its products read in. Each run of eight consecutive blocks is regrouped scales
//! first (each block's f16 d, and its f16 m for Q4_1, in block order), then the blocks' codes
//! in block order: Q4_0 16 + 128 bytes, Q4_1 32 + 128, Q8_0 16 + 256. The file's 18-, 20- and
//! 34-byte blocks start their codes 2 or 4 bytes in, so a kernel loads them a byte or a word at
//! a time; grouped, every block's codes start on 16 bytes and load as whole quads. The bytes
//! are the file's, moved: a device holding them holds no second copy.

use super::{f16_at, nibble, BlockError, Run, WeightType, QK};

/// Blocks in a group.
pub const GROUP: usize = 8;

impl WeightType {
    /// The types of the grouped layouts.
    pub const GROUPED: [WeightType; 3] =
        [WeightType::Q4_0x8, WeightType::Q4_1x8, WeightType::Q8_0x8];

    /// `self` in groups of blocks, where it has that layout.
    pub fn grouped(self) -> Option<WeightType> {
        match self {
            WeightType::Q4_0 => Some(WeightType::Q4_0x8),
            WeightType::Q4_1 => Some(WeightType::Q4_1x8),
            WeightType::Q8_0 => Some(WeightType::Q8_0x8),
            _ => None,
        }
    }

    /// The file's type whose blocks a grouped type holds; `self` for the others.
    pub fn file_type(self) -> WeightType {
        match self {
            WeightType::Q4_0x8 => WeightType::Q4_0,
            WeightType::Q4_1x8 => WeightType::Q4_1,
            WeightType::Q8_0x8 => WeightType::Q8_0,
            t => t,
        }
    }
}

/// Bytes of a file block's fields before its codes: d, and m for Q4_1.
pub(super) fn scale_bytes(file: WeightType) -> usize {
    match file {
        WeightType::Q4_1 => 4,
        _ => 2,
    }
}

/// `bytes`, whole blocks of `file` (Q4_0, Q4_1 or Q8_0) in whole groups, in its grouped
/// layout: what a row of a multiple of 256 elements becomes.
pub fn regroup(file: WeightType, bytes: &[u8]) -> Result<Vec<u8>, BlockError> {
    let grouped = file.grouped().ok_or(BlockError::NoGroups { ty: file })?;
    let group = grouped.block_bytes();
    if !bytes.len().is_multiple_of(group) {
        return Err(BlockError::NotMultiple {
            op: "regroup",
            what: "bytes",
            value: bytes.len(),
            multiple: group,
        });
    }
    let at = scale_bytes(file);
    let mut out = Vec::with_capacity(bytes.len());
    for blocks in bytes.chunks_exact(group) {
        let blocks = || blocks.chunks_exact(file.block_bytes());
        blocks().for_each(|b| out.extend_from_slice(&b[..at]));
        blocks().for_each(|b| out.extend_from_slice(&b[at..]));
    }
    Ok(out)
}

/// One group's blocks in the file's layout, for the file type's own decoders.
pub(super) fn file_blocks(file: WeightType, group: &[u8]) -> impl Iterator<Item = Vec<u8>> + '_ {
    let at = scale_bytes(file);
    let codes = file.block_bytes() - at;
    let (scales, all_codes) = group.split_at(GROUP * at);
    scales
        .chunks_exact(at)
        .zip(all_codes.chunks_exact(codes))
        .map(|(s, c)| [s, c].concat())
}

/// One group's runs: a block each, its codes as the file type's dequantizer takes them (Q4_0's
/// nibbles less 8, Q4_1's nibbles, Q8_0's signed bytes).
pub(super) fn runs(file: WeightType, group: &[u8]) -> Vec<Run> {
    let at = scale_bytes(file);
    file_blocks(file, group)
        .map(|b| {
            let codes = &b[at..];
            Run {
                scale: f16_at(&b, 0) as f32,
                min: if file == WeightType::Q4_1 {
                    f16_at(&b, 2) as f32
                } else {
                    0.0
                },
                codes: match file {
                    WeightType::Q8_0 => codes.iter().map(|&q| q as i8).collect(),
                    WeightType::Q4_0 => (0..QK).map(|j| nibble(codes, j) as i8 - 8).collect(),
                    _ => (0..QK).map(|j| nibble(codes, j) as i8).collect(),
                },
            }
        })
        .collect()
}
