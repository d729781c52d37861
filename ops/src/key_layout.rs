//! How a K cache lays out its keys, for every kernel that writes or reads it (the rope-and-store
//! kernel, the QKV product's rope epilogue, split and flash attention).
//!
//! - [`KeyLayout::Rows`]: `[context × kv_heads × head_dim]`, a key's elements side by side, as
//!   the V cache always is. A GPU's invocations each read a whole key row, or a tile of them.
//! - [`KeyLayout::Columns`]: `[kv_heads × head_dim × stride]`, element `i` of every position
//!   side by side. The C lowering runs a workgroup's invocations, one key each, as the lanes of
//!   one loop, and the scores' loop over `i` then reads consecutive keys, which GCC loads as
//!   vectors; in rows they are `kv_heads · head_dim` elements apart, and x86 gathers them one
//!   element at a time. On an AVX2 CPU the attention of a 512-token SmolLM2-135M prompt
//!   measured far faster in columns than in rows (docs/bench/cpu.md).
//!
//! A row of the columns layout holds `stride = context + KEY_PAD` positions: attention reads
//! its last block of keys up to [`KEY_PAD`] − 1 positions past the last visible one without
//! clamping the index (a clamp would make the index non-contiguous again), and masks their
//! scores. The positions past the context are never written; what they hold never reaches a
//! result.

use super::attention::WG;
use trine_ir::{KernelBuilder, Scalar, Val};

/// Positions a columns row holds past the context: one block of attention's keys.
pub const KEY_PAD: u32 = WG;

/// The K cache's layout (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyLayout {
    Rows,
    Columns,
}

impl KeyLayout {
    /// The suffix kernel names carry: none for rows, `_kcol` for columns.
    pub fn suffix(self) -> &'static str {
        match self {
            KeyLayout::Rows => "",
            KeyLayout::Columns => "_kcol",
        }
    }

    /// Positions between consecutive elements of a key row in the columns layout.
    pub fn stride(context: u32) -> u32 {
        context.saturating_add(KEY_PAD)
    }

    /// Elements of a K cache of `context` positions of `kv_heads × head_dim`.
    pub fn k_elements(self, context: u32, kv_heads: u32, head_dim: u32) -> u64 {
        let positions = match self {
            KeyLayout::Rows => context,
            KeyLayout::Columns => Self::stride(context),
        };
        positions as u64 * kv_heads as u64 * head_dim as u64
    }

    /// The kernel parameters this layout adds, after the kernel's own: the columns' stride.
    pub fn params(self, context: u32) -> Vec<trine_ir::ParamValue> {
        match self {
            KeyLayout::Rows => vec![],
            KeyLayout::Columns => vec![trine_ir::ParamValue::U32(Self::stride(context))],
        }
    }

    /// `rows` (a rows-layout cache of `context` positions) in this layout, positions past the
    /// context `fill`: for references and cases.
    pub fn arrange<T: Copy>(
        self,
        rows: &[T],
        (context, kv_heads, head_dim): (u32, u32, u32),
        fill: T,
    ) -> Vec<T> {
        match self {
            KeyLayout::Rows => rows.to_vec(),
            KeyLayout::Columns => {
                let (ctx, stride) = (context as usize, Self::stride(context) as usize);
                let width = kv_heads as usize * head_dim as usize;
                let mut out = vec![fill; width * stride];
                for (j, row) in rows.chunks_exact(width).take(ctx).enumerate() {
                    for (e, &v) in row.iter().enumerate() {
                        out[e * stride + j] = v;
                    }
                }
                out
            }
        }
    }
}

/// A kernel's view of its K cache: where element `i` of position `j` of a KV head lives.
#[derive(Clone, Copy)]
pub struct KeyIndex<'b> {
    kv_heads: Val<'b>,
    head_dim: u32,
    /// The columns' stride (parameter `k_stride`); none for rows.
    stride: Option<Val<'b>>,
}

impl<'b> KeyIndex<'b> {
    /// Declares what `layout` needs (for columns the parameter `k_stride`, after the kernel's
    /// own parameters) for a cache of `kv_heads` heads of `head_dim`.
    pub fn declare(
        k: &'b KernelBuilder,
        layout: KeyLayout,
        kv_heads: Val<'b>,
        head_dim: u32,
    ) -> KeyIndex<'b> {
        let stride = (layout == KeyLayout::Columns).then(|| k.param("k_stride", Scalar::U32));
        KeyIndex {
            kv_heads,
            head_dim,
            stride,
        }
    }

    pub fn layout(&self) -> KeyLayout {
        match self.stride {
            None => KeyLayout::Rows,
            Some(_) => KeyLayout::Columns,
        }
    }

    /// The index of element `e` (`kv_head · head_dim + i`) of position `j`'s key row.
    pub fn at(&self, k: &'b KernelBuilder, e: Val<'b>, j: Val<'b>) -> Val<'b> {
        match self.stride {
            None => j * (self.kv_heads * k.u32(self.head_dim)) + e,
            Some(stride) => e * stride + j,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Columns put element `e` of position `j` at `e·stride + j`, the fill past the context;
    /// rows are left as they are.
    #[test]
    fn arrange_transposes_rows() {
        let rows: Vec<u32> = (1..=2 * 6).collect(); // 2 positions of 2 heads × 3
        assert_eq!(KeyLayout::Rows.arrange(&rows, (2, 2, 3), 0), rows);
        let cols = KeyLayout::Columns.arrange(&rows, (2, 2, 3), 0);
        let stride = KeyLayout::stride(2) as usize;
        assert_eq!(cols.len(), 6 * stride);
        assert_eq!(KeyLayout::Columns.k_elements(2, 2, 3), cols.len() as u64);
        for e in 0..6 {
            assert_eq!(cols[e * stride], 1 + e as u32);
            assert_eq!(cols[e * stride + 1], 7 + e as u32);
            assert!(cols[e * stride + 2..(e + 1) * stride]
                .iter()
                .all(|&v| v == 0));
        }
    }
}
