//! A split attention's shape ([`SplitAttention`]): its checks, grids and parameters.

use super::OP;
use crate::attention::Attention;
use crate::shape::ShapeError;
use crate::support::{elements, nonzero};
use trine_ir::ParamValue;

/// One split attention: the shape of both dispatches. The cache length and the position are
/// not part of it: the kernels take the cache as it is bound and the position from `step`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitAttention {
    /// Query tokens.
    pub tokens: u32,
    pub heads: u32,
    pub kv_heads: u32,
    pub head_dim: u32,
    /// Chunks the visible keys are cut into, one workgroup each.
    pub splits: u32,
}

impl SplitAttention {
    /// Checks the shape; returns the element count of `part`.
    pub fn check(&self) -> Result<u32, ShapeError> {
        // The head counts, the head dimension and `q` are checked as the unsplit op checks
        // them, on a cache that holds just the query tokens.
        self.attention(self.tokens, 0).check()?;
        nonzero(OP, "splits", self.splits)?;
        elements(
            OP,
            "part",
            &[self.tokens, self.heads, self.splits, self.head_dim + 2],
        )
    }

    /// The unsplit attention this computes on a cache of `kv_len` positions at position `pos`.
    pub fn attention(&self, kv_len: u32, pos: u32) -> Attention {
        Attention {
            tokens: self.tokens,
            kv_len,
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            offset: pos,
        }
    }

    /// The grid of [`split_kernel`](super::split_kernel).
    pub fn grid(&self) -> [u32; 3] {
        [self.splits, self.heads, self.tokens]
    }

    /// The grid of [`grouped_kernel`](super::grouped_kernel): a workgroup per KV head.
    pub fn grouped_grid(&self) -> [u32; 3] {
        [self.splits, self.kv_heads, self.tokens]
    }

    /// The grid of [`combine_kernel`](super::combine_kernel).
    pub fn combine_grid(&self) -> [u32; 3] {
        [self.heads, self.tokens, 1]
    }

    pub fn scale(&self) -> f32 {
        1.0 / (self.head_dim as f32).sqrt()
    }

    /// [`split_kernel`](super::split_kernel)'s parameters, in declaration order.
    pub fn params(&self) -> Vec<ParamValue> {
        vec![
            ParamValue::U32(self.tokens),
            ParamValue::U32(self.heads),
            ParamValue::U32(self.kv_heads),
            ParamValue::U32(self.splits),
            ParamValue::F32(self.scale()),
        ]
    }

    /// [`combine_kernel`](super::combine_kernel)'s parameters, in declaration order.
    pub fn combine_params(&self) -> Vec<ParamValue> {
        vec![ParamValue::U32(self.heads)]
    }
}

pub(super) fn check_head_dim(head_dim: u32) -> Result<(), ShapeError> {
    let one = SplitAttention {
        tokens: 1,
        heads: 1,
        kv_heads: 1,
        head_dim,
        splits: 1,
    };
    one.check().map(drop)
}
