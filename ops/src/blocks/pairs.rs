//! The CPU's pairing of blocks with two codes a byte ([`pair_blocks`]), for
//! [`crate::matvec::MatvecSpec::pairs`].

use super::{BlockFormat, Flat};
use trine_gguf::quant::WeightType;

/// Whether [`pair_blocks`] applies to weights of type `ty`: formats with two codes a byte.
pub fn pairs_apply(ty: WeightType) -> bool {
    BlockFormat::flat_of(ty).is_some_and(Flat::nibbles)
}

/// Bytes of a pair's scales in [`pair_blocks`]' layout: both blocks' scales, one after the
/// other.
pub fn pair_scale_bytes(f: Flat) -> u32 {
    2 * f.codes_at
}

/// Rearranges rows of blocks with two codes a byte (`cols` elements each) so that each pair
/// of blocks `2p`, `2p + 1` of a row is its two blocks' scales followed by a block's worth of
/// bytes whose byte `j` holds code `j` of block `2p` in its low nibble and code `j` of block
/// `2p + 1` in its high one. An odd last block of a row stays as it is. Sizes do not change.
/// CPUs read the codes of two blocks as consecutive bytes whose nibbles pair with consecutive
/// x values each, which the invocations load as vectors; a block's own layout pairs element
/// `i` with `i + span`, half a block at a time. Bytes past the last whole row (padding) are
/// copied as they are. Other types are returned unchanged.
pub fn pair_blocks(ty: WeightType, w: &[u8], cols: usize) -> Vec<u8> {
    let mut out = w.to_vec();
    let Some(f) = BlockFormat::flat_of(ty).filter(|f| f.nibbles()) else {
        return out;
    };
    if cols == 0 {
        return out;
    }
    let (bb, elems, off, span) = (
        f.bytes as usize,
        f.elems as usize,
        f.codes_at as usize,
        f.span() as usize,
    );
    let row_bytes = cols / elems * bb;
    let code = |block: &[u8], j: usize| {
        let byte = block[off + j % span];
        if j < span {
            byte & 15
        } else {
            byte >> 4
        }
    };
    for (src, dst) in w
        .chunks_exact(row_bytes)
        .zip(out.chunks_exact_mut(row_bytes))
    {
        for (a, pair) in src.chunks_exact(2 * bb).zip(dst.chunks_exact_mut(2 * bb)) {
            let (b0, b1) = a.split_at(bb);
            pair[..off].copy_from_slice(&b0[..off]);
            pair[off..2 * off].copy_from_slice(&b1[..off]);
            for j in 0..elems {
                pair[2 * off + j] = code(b0, j) | (code(b1, j) << 4);
            }
        }
    }
    out
}
