//! Index of the largest value of each row, for greedy decoding over the logits.
//!
//! Defined as: the smallest index `i` with `x[i] >= x[j]` for every `j` whose value is not NaN.
//! Ties go to the first index (as `torch.argmax` and llama.cpp's greedy sampler do), `-0.0`
//! and `+0.0` tie, NaN never wins, and a row with no value but NaN gives [`NONE`].
//!
//! One workgroup per row. Each invocation scans a strided slice, keeping its first maximum;
//! then the workgroup reduces (value, index) pairs: a larger value wins, an equal value with a
//! smaller index wins. The subgroup variant takes the subgroup's maximum, then the smallest
//! index among the lanes that hold it; the shared variant is a tree on the pairs.
//!
//! Bound: exact ([`NMSE_EXACT`]): comparisons involve no rounding.

use super::shape::ShapeError;
use super::support::{elements, expect_len, nonzero, seed, Reduction};
use crate::case::*;
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar, Val};

const OP: &str = "argmax";

/// Invocations per workgroup (one row each): a greedy step's one row of logits is scanned by
/// a single workgroup, so a wide one (on a GPU, 1024 invocations measured faster than 256 on
/// a vocabulary of 49152).
pub const WG: u32 = 1024;

/// The index of a row with no value but NaN.
pub const NONE: u32 = u32::MAX;

/// One argmax dispatch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Argmax {
    pub rows: u32,
    pub cols: u32,
}

impl Argmax {
    /// Checks the shape; returns the element count of `x`.
    pub fn check(&self) -> Result<u32, ShapeError> {
        nonzero(OP, "rows", self.rows)?;
        nonzero(OP, "cols", self.cols)?;
        elements(OP, "rows × cols", &[self.rows, self.cols])
    }

    pub fn grid(&self) -> [u32; 3] {
        [self.rows, 1, 1]
    }

    /// The kernel's parameters, in declaration order.
    pub fn params(&self) -> Vec<ParamValue> {
        vec![ParamValue::U32(self.cols)]
    }
}

/// Whether the pair (v, i) beats (best_v, best_i): a larger value, or the same with a smaller
/// index. NaN compares false, so it never beats anything.
fn beats<'b>(v: Val<'b>, i: Val<'b>, best_v: Val<'b>, best_i: Val<'b>) -> Val<'b> {
    v.gt(best_v) | (v.eq(best_v) & i.lt(best_i))
}

/// Quads of four columns an invocation loads at once in a run of [`kernel`]'s main loop.
const QUADS: u32 = 4;

/// Buffers: `x` [rows × cols] f32 (bound as its bits, `U32`, so that four columns load as one
/// quad), `index` [rows] u32. Params: cols.
pub fn kernel(how: Reduction) -> Kernel {
    let k = KernelBuilder::new(&format!("argmax_{}", how.name()), [WG, 1, 1]);
    let x = k.buffer("x", Scalar::U32, Access::Read);
    let out = k.buffer("index", Scalar::U32, Access::Write);
    let cols = k.param("cols", Scalar::U32);
    let sv = k.shared("best_value", Scalar::F32, WG);
    let si = k.shared("best_index", Scalar::U32, WG);
    let lid = k.local_index();
    let row = k.workgroup_id(0);
    let base = row * cols;
    let none = k.u32(NONE);

    // This invocation's first maximum over its columns; an invocation with no non-NaN value
    // keeps (−inf, NONE), which loses to every real pair, −inf ones included.
    let best_v = k.var("best_v", Scalar::F32);
    let best_i = k.var("best_i", Scalar::U32);
    best_v.set(k.f32(f32::NEG_INFINITY));
    best_i.set(none);
    // Each invocation's columns arrive in increasing order, so `beats` keeps the first of
    // equal values.
    let scan = |c: Val<'_>, v: Val<'_>| {
        let take = beats(v, c, best_v.get(), best_i.get());
        best_i.set(k.select(take, c, best_i.get()));
        best_v.set(k.select(take, v, best_v.get()));
    };
    // Runs of QUADS · 4 · WG columns where rows are whole quads: invocation `lid` loads quads
    // lid, lid + WG, … of a run together (one load a column left a single workgroup waiting
    // on memory once per column it scanned).
    let per_run = QUADS * 4 * WG;
    let whole_quads = (cols % k.u32(4)).eq(k.u32(0));
    let runs = k.select(whole_quads, cols / k.u32(per_run), k.u32(0));
    k.for_range(k.u32(0), runs, 1, |r| {
        let first = r * k.u32(per_run);
        let loaded: Vec<_> = (0..QUADS)
            .map(|u| {
                let at = k.u32(u * WG) + lid;
                let words = k.load_quad(x, (base + first) / k.u32(4) + at);
                (first + at * k.u32(4), words)
            })
            .collect();
        for (c, words) in loaded {
            for (j, w) in words.into_iter().enumerate() {
                let c = if j == 0 { c } else { c + k.u32(j as u32) };
                scan(c, w.bitcast(Scalar::F32));
            }
        }
    });
    // The columns after the runs: whole chunks of WG columns in a loop whose bounds every
    // invocation shares, which the C lowering runs with the invocations as vector lanes (a
    // loop from `lid` ran each invocation's columns in scalar code, far slower on a CPU:
    // argmax's decode time on the CPU backend is in docs/bench/cpu.md); then the last,
    // partial chunk, where an invocation past the row reads the row's last column: a
    // candidate with its own index, which the invocation that owns it holds too.
    let load = |c: Val<'_>| k.load(x, base + c).bitcast(Scalar::F32);
    let done = runs * k.u32(per_run);
    let whole = done + (cols - done) / k.u32(WG) * k.u32(WG);
    k.for_range(done, whole, WG, |c0| scan(c0 + lid, load(c0 + lid)));
    k.if_(whole.lt(cols), || {
        let c = (whole + lid).min(cols - k.u32(1));
        scan(c, load(c))
    });

    match how {
        Reduction::Subgroup => {
            k.require_subgroups();
            let m = best_v.get().subgroup_max();
            let cand = k.select(best_v.get().eq(m), best_i.get(), none);
            let idx = cand.subgroup_min();
            k.if_(k.subgroup_invocation_id().eq(k.u32(0)), || {
                k.store_shared(sv, k.subgroup_id(), m);
                k.store_shared(si, k.subgroup_id(), idx);
            });
            k.barrier();
            k.if_(lid.eq(k.u32(0)), || {
                let sg = k.subgroup_size();
                let groups = (k.u32(WG) + sg - k.u32(1)) / sg;
                best_v.set(k.load_shared(sv, k.u32(0)));
                best_i.set(k.load_shared(si, k.u32(0)));
                k.for_range(k.u32(1), groups, 1, |g| {
                    let (v, i) = (k.load_shared(sv, g), k.load_shared(si, g));
                    let take = beats(v, i, best_v.get(), best_i.get());
                    best_i.set(k.select(take, i, best_i.get()));
                    best_v.set(k.select(take, v, best_v.get()));
                });
                k.store(out, row, best_i.get());
            });
        }
        Reduction::Shared => {
            k.store_shared(sv, lid, best_v.get());
            k.store_shared(si, lid, best_i.get());
            k.barrier();
            let mut stride = WG / 2;
            while stride > 0 {
                let s = k.u32(stride);
                k.if_(lid.lt(s), || {
                    let (av, ai) = (k.load_shared(sv, lid), k.load_shared(si, lid));
                    let (bv, bi) = (k.load_shared(sv, lid + s), k.load_shared(si, lid + s));
                    let take = beats(bv, bi, av, ai);
                    k.store_shared(sv, lid, k.select(take, bv, av));
                    k.store_shared(si, lid, k.select(take, bi, ai));
                });
                k.barrier();
                stride /= 2;
            }
            k.if_(lid.eq(k.u32(0)), || {
                k.store(out, row, k.load_shared(si, k.u32(0)))
            });
        }
    }
    k.finish()
}

/// The plain-Rust reference: each row's index as defined in the module documentation.
pub fn reference(shape: &Argmax, x: &[f32]) -> Result<Vec<u32>, ShapeError> {
    let n = shape.check()?;
    expect_len(OP, "x", n as usize, x.len())?;
    Ok(x.chunks(shape.cols as usize)
        .map(|row| {
            let mut best: Option<(usize, f32)> = None;
            for (i, &v) in row.iter().enumerate() {
                if !v.is_nan() && best.is_none_or(|(_, b)| v > b) {
                    best = Some((i, v));
                }
            }
            best.map_or(NONE, |(i, _)| i as u32)
        })
        .collect())
}

/// How a case's rows are filled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    /// Uniform values: one maximum per row.
    Uniform,
    /// Small integers, so most rows have several maxima; the last rows are the edges: all
    /// equal, the maximum last, −inf only, with NaN, NaN only.
    Ties,
}

fn inputs(shape: &Argmax, fill: Fill, r: &mut Rng) -> Vec<f32> {
    let n = (shape.rows * shape.cols) as usize;
    match fill {
        Fill::Uniform => r.f32s(n, -30.0, 30.0),
        Fill::Ties => {
            let cols = shape.cols as usize;
            let mut x: Vec<f32> = (0..n).map(|_| (r.u32() % 5) as f32 - 2.0).collect();
            let edges: [&dyn Fn(usize) -> f32; 5] = [
                &|_| 1.5,
                &|c| if c + 1 == cols { 9.0 } else { -0.0 },
                &|_| f32::NEG_INFINITY,
                &|c| if c % 3 == 0 { f32::NAN } else { c as f32 },
                &|_| f32::NAN,
            ];
            for (row, f) in x.chunks_mut(cols).rev().zip(edges) {
                for (c, v) in row.iter_mut().enumerate() {
                    *v = f(c);
                }
            }
            x
        }
    }
}

/// A conformance case for `shape`. The subgroup kernel carries the shared one as its fallback.
pub fn case(shape: Argmax, how: Reduction, fill: Fill) -> Result<Case, ShapeError> {
    shape.check()?;
    let label = match how {
        Reduction::Subgroup => "",
        Reduction::Shared => "shared/",
    };
    let ties = match fill {
        Fill::Uniform => "",
        Fill::Ties => "+ties",
    };
    let name = format!("{OP}/{label}f32/{}x{}{ties}", shape.rows, shape.cols);
    let mut r = Rng::new(seed(&name));
    let x = inputs(&shape, fill, &mut r);
    let want = reference(&shape, &x)?.iter().map(|&i| i as f64).collect();
    let mut c = Case::new(name, kernel(how), shape.grid())
        .input("x", Scalar::U32, f32_bytes(&x))
        .output("index", Scalar::U32, vec![0; shape.rows as usize * 4], want)
        .params(shape.params())
        .bound(NMSE_EXACT);
    if how == Reduction::Subgroup {
        c = c.fallback(kernel(Reduction::Shared));
    }
    Ok(c)
}

pub fn cases() -> Vec<Case> {
    use Reduction::{Shared, Subgroup};
    [
        (1, 49152, Subgroup, Fill::Uniform), // greedy decoding over SmolLM2's vocabulary
        (3, 49152, Subgroup, Fill::Uniform),
        // Runs of quads and then columns after them; rows of odd length, columns only.
        (2, 16384 + 4100, Subgroup, Fill::Uniform),
        (2, 16384 + 4100, Shared, Fill::Ties),
        (2, 16385, Subgroup, Fill::Uniform),
        (1, 1, Subgroup, Fill::Uniform),
        (5, 1000, Subgroup, Fill::Uniform),
        (9, 300, Subgroup, Fill::Ties),
        (3, 49152, Shared, Fill::Uniform),
        (9, 300, Shared, Fill::Ties),
    ]
    .iter()
    .map(|&(rows, cols, how, fill)| case(Argmax { rows, cols }, how, fill))
    .collect::<Result<_, _>>()
    .expect("the fixed shapes are valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_maximum_wins_and_nan_never_does() {
        let s = Argmax { rows: 5, cols: 4 };
        let nan = f32::NAN;
        let x = [
            1.0,
            3.0,
            3.0,
            2.0, // tie: the first
            -0.0,
            0.0,
            -1.0,
            -2.0, // signed zeros tie
            nan,
            -5.0,
            nan,
            -6.0, // NaN ignored
            f32::NEG_INFINITY,
            f32::NEG_INFINITY,
            f32::NEG_INFINITY,
            f32::NEG_INFINITY,
            nan,
            nan,
            nan,
            nan,
        ];
        assert_eq!(reference(&s, &x).unwrap(), vec![1, 0, 1, 0, NONE]);
    }

    #[test]
    fn tie_rows_hold_the_edges() {
        let s = Argmax { rows: 9, cols: 300 };
        let x = inputs(&s, Fill::Ties, &mut Rng::new(1));
        let want = reference(&s, &x).unwrap();
        // Rows 4..9 are: NaN only, NaN every third, −inf only, maximum last, all equal.
        assert_eq!(want[4..], [NONE, 299, 0, 299, 0]);
        assert!(matches!(
            reference(&Argmax { rows: 0, cols: 3 }, &[]),
            Err(ShapeError::Zero { .. })
        ));
    }
}
