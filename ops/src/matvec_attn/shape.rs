//! The compile-time shapes of the fused ops ([`CombineShape`], [`RopeShape`]) with their
//! checks and names, and the shape of a QKV product with rope ([`QkvRope`]).

use super::OP;
use crate::attention_split::SplitAttention;
use crate::key_layout::KeyLayout;
use crate::rope_store::RopeStore;
use crate::shape::ShapeError;
use crate::support::{multiple_of, nonzero, Float};
use trine_gguf::quant::WeightType;
use trine_ir::ParamValue;

/// The combine fused before a product: x is `heads` heads of `head_dim`, each combined from
/// `splits` partials. All three are compile-time constants (the loops over the splits unroll,
/// the head of a column is a division by a constant, the weights' shared array has a size).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CombineShape {
    pub heads: u32,
    pub head_dim: u32,
    pub splits: u32,
}

impl CombineShape {
    pub(crate) fn check(&self, cols: Option<u32>) -> Result<(), ShapeError> {
        nonzero(OP, "combined heads", self.heads)?;
        nonzero(OP, "combined head_dim", self.head_dim)?;
        nonzero(OP, "combined splits", self.splits)?;
        let n = self.heads as u64 * self.head_dim as u64;
        match cols {
            Some(c) if u64::from(c) != n => Err(ShapeError::Mismatch {
                op: OP,
                what: "cols of a combined product (heads · head_dim)",
                expected: n as usize,
                found: c as usize,
            }),
            _ => Ok(()),
        }
    }

    /// f32 values of shared memory the weights take.
    pub(crate) fn shared_floats(&self) -> u32 {
        self.heads * (self.splits + 1)
    }

    pub(crate) fn name(&self) -> String {
        format!("combine_h{}d{}s{}", self.heads, self.head_dim, self.splits)
    }

    /// The split attention whose partials this combines, for `tokens` query tokens.
    pub(super) fn attention(&self, tokens: u32) -> SplitAttention {
        SplitAttention {
            tokens,
            heads: self.heads,
            kv_heads: self.heads,
            head_dim: self.head_dim,
            splits: self.splits,
        }
    }
}

/// The rope and cache store fused after a QKV product: the head dimension and the values of a
/// head rope turns (compile-time constants), the caches' storage type and the K cache's
/// layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RopeShape {
    pub head_dim: u32,
    pub rot_dim: u32,
    pub kv: Float,
    pub keys: KeyLayout,
}

impl RopeShape {
    pub(crate) fn check(&self) -> Result<(), ShapeError> {
        nonzero(OP, "rope head_dim", self.head_dim)?;
        multiple_of(OP, "rope head_dim", self.head_dim, 2)?;
        crate::rope::check_rot_dim(OP, self.head_dim, self.rot_dim)
    }

    pub(crate) fn name(&self) -> String {
        format!(
            "rope_d{}{}_{}kv{}",
            self.head_dim,
            crate::rope::rot_label(self.head_dim, self.rot_dim),
            self.kv.name(),
            self.keys.suffix()
        )
    }
}

/// A QKV product of `heads` query and `kv_heads` key/value heads with the rope epilogue, at
/// position `pos` of caches of `context` positions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QkvRope {
    pub weights: WeightType,
    pub cols: u32,
    pub store: RopeStore,
}

impl QkvRope {
    /// The product's rows: the heads it holds ([`RopeStore::span`]).
    pub fn rows(&self) -> u32 {
        self.store.span().map_or(0, |s| s.count) * self.store.head_dim
    }

    /// The kernel's parameters after the product's (`rows`, `cols`, `eps`).
    pub fn params(&self) -> Vec<ParamValue> {
        self.store.epilogue_params()
    }
}
