//! Each expert's share of a prompt's routing, for the experts' products that serve an expert's
//! tokens together ([`crate::matvec_ids_sorted`]): from the chosen ids
//! ([`crate::moe_route`]'s, `[tokens × used]`), per expert the count of (token, slot) pairs
//! that chose it and their indices (`token × used + slot`) in order, as llama.cpp gathers them
//! before its `mul_mat_id` on CUDA.
//!
//! A workgroup per expert: its [`WG`] invocations each count the expert's pairs in a run of
//! the ids, a scan of those counts gives each run's first place in the list, and each
//! invocation lists its run's pairs from there. No atomics, so the lists' order is the ids'
//! and every backend writes the same bytes. A prompt's ids are a few thousand
//! (Qwen3-30B-A3B's pp512: 4096), each read by every expert's workgroup; one invocation
//! walking them all took a tenth of a millisecond a layer.
//!
//! Exact: the outputs are integers, judged as such.

use crate::case::*;
use crate::shape::ShapeError;
use crate::support::{elements, expect_len, nonzero, seed};
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar};

const OP: &str = "moe_sort";

/// One dispatch's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeSort {
    pub tokens: u32,
    pub experts: u32,
    /// Experts chosen per token.
    pub used: u32,
}

impl MoeSort {
    pub fn check(&self) -> Result<(), ShapeError> {
        nonzero(OP, "tokens", self.tokens)?;
        nonzero(OP, "experts", self.experts)?;
        nonzero(OP, "experts used", self.used)?;
        elements(OP, "ids", &[self.tokens, self.used])?;
        elements(OP, "lists", &[self.experts, self.tokens])?;
        Ok(())
    }

    /// A workgroup per expert.
    pub fn grid(&self) -> [u32; 3] {
        [self.experts, 1, 1]
    }

    /// tokens, used.
    pub fn params(&self) -> Vec<ParamValue> {
        vec![ParamValue::U32(self.tokens), ParamValue::U32(self.used)]
    }
}

/// Invocations of a workgroup: runs of the ids counted at once.
pub const WG: u32 = 64;

/// Buffers `ids` (U32 `[tokens × used]`), then `counts` (U32 `[experts]`) and `lists` (U32
/// `[experts × tokens]`: expert e's pairs from `e × tokens` on; an expert is chosen at most
/// once per token). Params: tokens, used.
pub fn kernel() -> Kernel {
    let k = KernelBuilder::new(OP, [WG, 1, 1]);
    let ids = k.buffer("ids", Scalar::U32, Access::Read);
    let counts = k.buffer("counts", Scalar::U32, Access::Write);
    let lists = k.buffer("lists", Scalar::U32, Access::Write);
    let tokens = k.param("tokens", Scalar::U32);
    let used = k.param("used", Scalar::U32);
    let e = k.workgroup_id(0);
    let lid = k.local_index();
    let n = tokens * used;
    let run = (n + k.u32(WG - 1)) / k.u32(WG);
    let lo = (lid * run).min(n);
    let hi = (lo + run).min(n);
    let mine = k.var("mine", Scalar::U32);
    mine.set(k.u32(0));
    k.for_range(lo, hi, 1, |i| {
        k.if_(k.load(ids, i).eq(e), || mine.set(mine.get() + k.u32(1)));
    });
    // Each run's first place in the expert's list: the scan of the runs' counts.
    let bufs = [
        k.shared("ping", Scalar::U32, WG),
        k.shared("pong", Scalar::U32, WG),
    ];
    let scanned = crate::support::workgroup_scan(&k, bufs, (lid, WG), mine.get());
    let at = k.var("at", Scalar::U32);
    at.set(k.load_shared(scanned, lid) - mine.get());
    k.for_range(lo, hi, 1, |i| {
        k.if_(k.load(ids, i).eq(e), || {
            k.store(lists, e * tokens + at.get(), i);
            at.set(at.get() + k.u32(1));
        });
    });
    k.if_(lid.eq(k.u32(0)), || {
        k.store(counts, e, k.load_shared(scanned, k.u32(WG - 1)))
    });
    k.finish()
}

/// The plain-Rust reference: each expert's count and its pairs in order, the rest of its list
/// 0. An id past the experts is a typed error.
pub fn reference(s: &MoeSort, ids: &[u32]) -> Result<(Vec<u32>, Vec<u32>), ShapeError> {
    s.check()?;
    let (t, e) = (s.tokens as usize, s.experts as usize);
    expect_len(OP, "ids", t * s.used as usize, ids.len())?;
    let mut counts = vec![0u32; e];
    let mut lists = vec![0u32; e * t];
    for (i, &id) in ids.iter().enumerate() {
        let id = expert(OP, id, s.experts)?;
        lists[id * t + counts[id] as usize] = i as u32;
        counts[id] += 1;
    }
    Ok((counts, lists))
}

/// Expert id `id` as an index, or `op`'s typed error where it is past the `experts`.
pub(crate) fn expert(op: &'static str, id: u32, experts: u32) -> Result<usize, ShapeError> {
    if id < experts {
        Ok(id as usize)
    } else {
        Err(ShapeError::OutOfRange {
            op,
            what: "expert id",
            value: id as usize,
            bound: experts as usize,
        })
    }
}

/// A prompt's routing and its sort by expert, as [`reference`] gives them.
pub(crate) struct Sorted {
    /// The chosen experts, `[tokens × used]`.
    pub ids: Vec<u32>,
    pub counts: Vec<u32>,
    pub lists: Vec<u32>,
}

/// A routing drawn from `rng` for the experts' products' cases, each token's `used` experts
/// distinct ([`crate::matvec_ids::draw_ids`]), and its sort.
pub(crate) fn drawn(rng: &mut Rng, s: &MoeSort) -> Result<Sorted, ShapeError> {
    let ids = crate::matvec_ids::draw_ids(rng, s.tokens, s.experts, s.used);
    let (counts, lists) = reference(s, &ids)?;
    Ok(Sorted { ids, counts, lists })
}

/// A conformance case: each token's `used` experts distinct, drawn as
/// [`crate::matvec_ids::case`] draws them.
pub fn case(s: MoeSort) -> Result<Case, ShapeError> {
    s.check()?;
    let name = format!("{OP}/t{}e{}k{}", s.tokens, s.experts, s.used);
    let mut rng = Rng::new(seed(&name));
    let ids = crate::matvec_ids::draw_ids(&mut rng, s.tokens, s.experts, s.used);
    let (counts, lists) = reference(&s, &ids)?;
    let as_f64 = |v: &[u32]| v.iter().map(|&x| f64::from(x)).collect();
    Ok(Case::new(name, kernel(), s.grid())
        .input("ids", Scalar::U32, u32_bytes(&ids))
        .output_exact(
            "counts",
            Scalar::U32,
            vec![0; counts.len() * 4],
            as_f64(&counts),
        )
        .output_exact(
            "lists",
            Scalar::U32,
            vec![0; lists.len() * 4],
            as_f64(&lists),
        )
        .params(s.params()))
}

/// The tiny test model's prompt (8 experts, 2 used), one expert chosen by every token,
/// Qwen3-30B-A3B's routing (8 of 128) over a prompt of 64 tokens, and over one of 520 (ids
/// not a whole number of runs).
pub fn cases() -> Vec<Case> {
    let shape = |tokens, experts, used| MoeSort {
        tokens,
        experts,
        used,
    };
    [
        shape(5, 8, 2),
        shape(7, 1, 1),
        shape(64, 128, 8),
        shape(520, 128, 8),
    ]
    .into_iter()
    .map(case)
    .collect::<Result<_, _>>()
    .expect("the fixed shapes are valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two tokens choosing experts [2, 0] and [0, 1]: expert 0 gets pairs 1 and 2, expert 1
    /// pair 3, expert 2 pair 0.
    #[test]
    fn reference_matches_hand_computation() {
        let s = MoeSort {
            tokens: 2,
            experts: 3,
            used: 2,
        };
        let (counts, lists) = reference(&s, &[2, 0, 0, 1]).unwrap();
        assert_eq!(counts, [2, 1, 1]);
        assert_eq!(lists, [1, 2, 3, 0, 0, 0]);
        let e = reference(&s, &[3, 0, 0, 1]);
        assert!(matches!(e, Err(ShapeError::OutOfRange { value: 3, .. })));
    }

    #[test]
    fn every_case_matches_its_reference_on_the_interpreter() {
        for c in cases() {
            if let Err(e) = c.check_reference() {
                panic!("{}: {e}", c.name);
            }
        }
    }
}
