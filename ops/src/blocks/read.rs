//! Reading a packed format's bytes inside a kernel: single bytes, runs of bytes (a word at a
//! time from words), nibbles, and the f16 and integer fields of a block, from weights bound as
//! bytes or as words ([`Bytes`]).

use super::packed::Bytes;
use super::{f16_bits_to_f32, load_f16};
use trine_ir::{BufferId, KernelBuilder, Val};

/// Byte `at` of the weights, as `U32`.
pub(super) fn byte<'b>(k: &'b KernelBuilder, src: Bytes, at: Val<'b>) -> Val<'b> {
    match src {
        Bytes::U8(buf) => k.load(buf, at),
        Bytes::Words(w) => (k.load(w, at >> k.u32(2)) >> ((at & k.u32(3)) * k.u32(8))) & k.u32(255),
    }
}

/// Whether a format whose blocks are `bytes` long has its runs of 4 or more bytes on words:
/// its blocks are whole words (every such format's runs start at multiples of 4 in a block).
pub(super) const fn on_words(bytes: u32) -> bool {
    bytes.is_multiple_of(4)
}

/// The `n` bytes from byte `at`, as `U32`; `aligned` where the run starts on a word
/// ([`on_words`]).
pub(super) fn bytes<'b>(
    k: &'b KernelBuilder,
    src: Bytes,
    at: Val<'b>,
    n: u32,
    aligned: bool,
) -> Vec<Val<'b>> {
    match src {
        Bytes::Words(w) if n >= 4 => run_words(k, w, at, n, aligned)
            .into_iter()
            .flat_map(|word| (0..4).map(move |b| (word >> k.u32(8 * b)) & k.u32(255)))
            .collect(),
        _ => (0..n).map(|i| byte(k, src, at + k.u32(i))).collect(),
    }
}

/// The four words of the 16 bytes from byte `at` of words `w`, `at` a multiple of 16: one
/// quad ([`KernelBuilder::load_quad`]), which a GPU reads with one load.
pub(crate) fn quad_words<'b>(k: &'b KernelBuilder, w: BufferId, at: Val<'b>) -> [Val<'b>; 4] {
    k.load_quad(w, at >> k.u32(4))
}

/// The words holding the `n` bytes (4 or more) from byte `at` (even) of words `w`, byte `i`
/// of the run in byte `i % 4` of word `i / 4`. A run on a word (`aligned`) is its words; one
/// that may start mid-word (`shift` 16) joins the high half of each word to the low half of
/// the next, the word after the run's last loaded only where the run reaches into it (else its
/// last word again, so that the buffer's last block reads nothing past its end).
pub(super) fn run_words<'b>(
    k: &'b KernelBuilder,
    w: BufferId,
    at: Val<'b>,
    n: u32,
    aligned: bool,
) -> Vec<Val<'b>> {
    let words = n / 4;
    let first = at >> k.u32(2);
    let mut loaded: Vec<Val> = (0..words).map(|j| k.load(w, first + k.u32(j))).collect();
    if aligned {
        return loaded;
    }
    let shift = (at & k.u32(2)) * k.u32(8);
    loaded.push(k.load(w, first + k.u32(words - 1) + (shift >> k.u32(4))));
    loaded
        .windows(2)
        .map(|p| (p[0] >> shift) | ((p[1] << k.u32(16)) << (k.u32(16) - shift)))
        .collect()
}

/// The f16 at byte `at` (even), as `F32`: through the weights' `F16` view where one is bound.
pub(super) fn half<'b>(
    k: &'b KernelBuilder,
    (src, view): (Bytes, Option<BufferId>),
    at: Val<'b>,
) -> Val<'b> {
    match (src, view) {
        (Bytes::Words(_), None) => f16_bits_to_f32(k, u16_at(k, src, at)),
        // Through the view where there is one (the words then go unread), else from bytes.
        (Bytes::U8(buf) | Bytes::Words(buf), view) => load_f16(k, buf, view, at),
    }
}

/// The little-endian u16 at byte `at`, as `U32`.
pub(super) fn u16_at<'b>(k: &'b KernelBuilder, src: Bytes, at: Val<'b>) -> Val<'b> {
    byte(k, src, at) | (byte(k, src, at + k.u32(1)) << k.u32(8))
}

/// The codes of `n` consecutive elements whose nibbles are the low (`high` 0) or high
/// (`high` 1) halves of the `n` bytes from byte `at`, as `U32`.
pub(super) fn nibbles<'b>(
    k: &'b KernelBuilder,
    src: Bytes,
    at: Val<'b>,
    (high, n): (Val<'b>, u32),
    aligned: bool,
) -> Vec<Val<'b>> {
    let shift = high * k.u32(4);
    match src {
        // Each code straight from its word: one shift and one mask.
        Bytes::Words(w) if n >= 4 => run_words(k, w, at, n, aligned)
            .into_iter()
            .flat_map(|word| (0..4).map(move |b| (word >> (k.u32(8 * b) + shift)) & k.u32(15)))
            .collect(),
        _ => bytes(k, src, at, n, aligned)
            .into_iter()
            .map(|b| (b >> shift) & k.u32(15))
            .collect(),
    }
}

/// The codes (`U32`) of elements `first..first + n` (`first` below 32) of 32 elements held
/// as Q4_0 holds them in the 16 bytes at `at`: element j in nibble j/16 of byte j%16, so that
/// a run of 32 is the bytes' low nibbles, then their high ones.
pub(super) fn split_nibbles<'b>(
    k: &'b KernelBuilder,
    src: Bytes,
    at: Val<'b>,
    (first, n): (Val<'b>, u32),
    aligned: bool,
) -> Vec<Val<'b>> {
    (0..n.div_ceil(16))
        .flat_map(|half| {
            let e = first + k.u32(16 * half);
            nibbles(
                k,
                src,
                at + (e & k.u32(15)),
                (e >> k.u32(4), n.min(16)),
                aligned,
            )
        })
        .collect()
}

/// The little-endian u32 at byte `at`, assembled from bytes (a block's word need not be
/// aligned).
pub(super) fn u32_at<'b>(k: &'b KernelBuilder, src: Bytes, at: Val<'b>) -> Val<'b> {
    u16_at(k, src, at) | (u16_at(k, src, at + k.u32(2)) << k.u32(16))
}
