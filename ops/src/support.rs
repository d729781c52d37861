//! What the row and element-wise ops share: the float types they run in, workgroup-wide
//! reductions (shared-memory tree or subgroups), shape checks and case seeds.

use super::shape::ShapeError;
use half::f16;
use trine_ir::{BufferId, KernelBuilder, Scalar, SharedId, Val};

/// Most elements one buffer of these ops may hold. Kernels index with u32 and their strided
/// loops add a workgroup size past the end, so the limit leaves headroom below `u32::MAX`.
pub const MAX_ELEMENTS: usize = 1 << 31;

/// Bytes a prefetch ([`trine_ir::Stmt::Prefetch`]) brings in: one line of NVIDIA's L2, the
/// only target that keeps prefetches.
pub const PREFETCH_LINE: u32 = 128;

/// Prefetches bytes `start..end` of `buf` (elements of `elem` bytes), a line of
/// [`PREFETCH_LINE`] bytes per invocation and step: the invocation at `first` of the `step`
/// that share the range takes lines `first`, `first + step`, …. As a
/// kernel's first statement it runs before a CUDA kernel waits for the dispatch before it
/// ([`trine_ir::Kernel::prefetch_prologue`]): weights no dispatch writes stream into L2 while
/// that dispatch still runs.
pub fn prefetch_bytes<'b>(
    k: &'b KernelBuilder,
    (buf, elem): (BufferId, u32),
    (first, step): (Val<'b>, u32),
    (start, end): (Val<'b>, Val<'b>),
) {
    let lines = (end - start + k.u32(PREFETCH_LINE - 1)) / k.u32(PREFETCH_LINE);
    k.for_range(first, lines, step, |i| {
        let byte = (start + i * k.u32(PREFETCH_LINE)).min(end - k.u32(1));
        k.prefetch(buf, byte / k.u32(elem));
    });
}

/// The float type an op stores its activations in; arithmetic is always f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Float {
    F32,
    F16,
}

impl Float {
    pub fn scalar(self) -> Scalar {
        match self {
            Float::F32 => Scalar::F32,
            Float::F16 => Scalar::F16,
        }
    }

    pub fn name(self) -> &'static str {
        self.scalar().name()
    }

    /// `v` as stored in this type, back in f64: what a plain-Rust reference expects of an
    /// output that the kernel rounds to this type.
    pub fn round(self, v: f64) -> f64 {
        match self {
            Float::F32 => v as f32 as f64,
            Float::F16 => f16::from_f64(v).to_f64(),
        }
    }

    /// `v` rounded to this type, as buffer bytes.
    pub fn bytes(self, v: &[f32]) -> Vec<u8> {
        match self {
            Float::F32 => bytemuck::cast_slice(v).to_vec(),
            Float::F16 => {
                let h: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
                bytemuck::cast_slice(&h).to_vec()
            }
        }
    }

    /// `v` rounded to this type and back: the values a kernel reads from a buffer of it.
    pub fn stored(self, v: &[f32]) -> Vec<f32> {
        match self {
            Float::F32 => v.to_vec(),
            Float::F16 => v.iter().map(|&x| f16::from_f32(x).to_f32()).collect(),
        }
    }
}

/// `(cos θ, sin θ)` of an f32 angle, taken of θ less the nearest multiple of 2π, which keeps
/// the argument within [−π, π]. NVIDIA's Vulkan `sin`/`cos` lose accuracy with the argument's
/// size: rope at positions up to 1,319 differed from the CPU's by 1.5e-9 NMSE, five times the
/// cross-check's bound. 2π is taken off in four parts (Cody–Waite):
/// the first three have few enough bits that their products with the turn count are exact
/// below 8192 turns, and the fourth's product is too small to round, so every device reduces
/// θ to the same argument whether or not it fuses a multiply into the subtraction (lavapipe
/// does not, GPUs may).
pub(crate) fn cos_sin<'b>(k: &'b KernelBuilder, theta: Val<'b>) -> (Val<'b>, Val<'b>) {
    const TAU: f64 = std::f64::consts::TAU;
    const PARTS: [f32; 4] = [
        6.28125,
        2029.0 / 1_048_576.0,
        1297.0 / 4_294_967_296.0,
        (TAU - 6.28125 - 2029.0 / 1_048_576.0 - 1297.0 / 4_294_967_296.0) as f32,
    ];
    let turns = (theta * k.f32(1.0 / TAU as f32) + k.f32(0.5)).floor();
    let r = PARTS.iter().fold(theta, |r, &part| r - turns * k.f32(part));
    (r.cos(), r.sin())
}

/// Stores the f32 value `v` into a buffer of `t` (rounding to nearest even for f16).
pub(crate) fn store_f32<'b>(
    k: &'b KernelBuilder,
    t: Float,
    buf: trine_ir::BufferId,
    i: Val<'b>,
    v: Val<'b>,
) {
    match t {
        Float::F32 => k.store(buf, i, v),
        Float::F16 => k.store(buf, i, v.cast(Scalar::F16)),
    }
}

/// How a kernel reduces across its workgroup; part of its compile-time specialisation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reduction {
    /// A tree in workgroup-shared memory, log2(workgroup) barrier steps: works on every device,
    /// so it is the fallback.
    Shared,
    /// One subgroup reduction per subgroup, then the per-subgroup partials through shared
    /// memory: two barriers instead of log2(workgroup). Needs the subgroup capability.
    Subgroup,
}

impl Reduction {
    pub fn name(self) -> &'static str {
        match self {
            Reduction::Shared => "shared",
            Reduction::Subgroup => "subgroup",
        }
    }
}

/// The associative operation of a reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Combine {
    Sum,
    Max,
}

impl Combine {
    fn apply<'b>(self, a: Val<'b>, b: Val<'b>) -> Val<'b> {
        match self {
            Combine::Sum => a + b,
            Combine::Max => a.max(b),
        }
    }
}

/// An f32 reduction over a one-dimensional workgroup whose size is a power of two. Every
/// invocation contributes one value and receives the result; calls must be in uniform control
/// flow (they contain barriers), and one reducer can be called any number of times.
pub(crate) struct Reducer {
    scratch: SharedId,
    how: Reduction,
    wg: u32,
    /// Invocations that reduce together: the workgroup, or each aligned team of this many
    /// ([`Reducer::teams`]).
    team: u32,
}

impl Reducer {
    /// Declares the scratch array (and the subgroup capability where `how` needs it).
    pub(crate) fn new(k: &KernelBuilder, how: Reduction) -> Reducer {
        Reducer::teams(k, how, k.workgroup_size()[0])
    }

    /// A reducer whose every aligned `team` of invocations (a power of two dividing the
    /// workgroup) reduces its own values: invocation `i` receives its team's result. On
    /// subgroups, a team narrower than the workgroup is one subgroup: the kernel then runs
    /// only where subgroups are `team` wide.
    pub(crate) fn teams(k: &KernelBuilder, how: Reduction, team: u32) -> Reducer {
        let wg = k.workgroup_size()[0];
        debug_assert!(wg.is_power_of_two(), "the tree halves the workgroup");
        debug_assert!(team.is_power_of_two() && wg.is_multiple_of(team));
        match how {
            Reduction::Subgroup if team < wg => k.require_subgroup_width(team),
            Reduction::Subgroup => k.require_subgroups(),
            Reduction::Shared => {}
        }
        // A subgroup of one lane would leave one partial per invocation: size for that.
        let scratch = k.shared("reduce_scratch", Scalar::F32, wg);
        Reducer {
            scratch,
            how,
            wg,
            team,
        }
    }

    pub(crate) fn reduce<'b>(
        &self,
        k: &'b KernelBuilder,
        lid: Val<'b>,
        v: Val<'b>,
        op: Combine,
    ) -> Val<'b> {
        if self.how == Reduction::Subgroup && self.team < self.wg {
            return self.team_lanes(k, v, op);
        }
        let sh = self.scratch;
        let total = match self.how {
            Reduction::Shared => {
                k.store_shared(sh, lid, v);
                k.barrier();
                // A workgroup-wide tree keeps its plain indices.
                let (in_team, first) = if self.team == self.wg {
                    (lid, k.u32(0))
                } else {
                    let in_team = lid % k.u32(self.team);
                    (in_team, lid - in_team)
                };
                let mut stride = self.team / 2;
                while stride > 0 {
                    let s = k.u32(stride);
                    k.if_(in_team.lt(s), || {
                        let c = op.apply(k.load_shared(sh, lid), k.load_shared(sh, lid + s));
                        k.store_shared(sh, lid, c);
                    });
                    k.barrier();
                    stride /= 2;
                }
                k.load_shared(sh, first)
            }
            Reduction::Subgroup => {
                let part = match op {
                    Combine::Sum => v.subgroup_sum(),
                    Combine::Max => v.subgroup_max(),
                };
                k.if_(k.subgroup_invocation_id().eq(k.u32(0)), || {
                    k.store_shared(sh, k.subgroup_id(), part)
                });
                k.barrier();
                // Every invocation folds the partials itself: no third barrier to broadcast.
                // Rounding up covers a subgroup wider than the workgroup.
                let sg = k.subgroup_size();
                let groups = (k.u32(self.wg) + sg - k.u32(1)) / sg;
                let acc = k.var("reduced", Scalar::F32);
                acc.set(k.load_shared(sh, k.u32(0)));
                k.for_range(k.u32(1), groups, 1, |g| {
                    acc.set(op.apply(acc.get(), k.load_shared(sh, g)))
                });
                acc.get()
            }
        };
        // The next call overwrites the scratch array: every invocation must have read it.
        k.barrier();
        total
    }

    /// A team's reduction on its subgroup (the kernel runs only where subgroups are a team
    /// wide): lane shuffles, no shared memory and no barrier.
    fn team_lanes<'b>(&self, k: &'b KernelBuilder, v: Val<'b>, op: Combine) -> Val<'b> {
        let mut acc = v;
        let mut mask = self.team / 2;
        while mask > 0 {
            acc = op.apply(acc, acc.shuffle_xor(k.u32(mask)));
            mask /= 2;
        }
        acc
    }
}

/// `v`, or `ShapeError::Zero` when it is zero.
/// An inclusive scan (Hillis–Steele) of one u32 `value` per invocation of a workgroup of
/// `wg` (a power of two), invocation `lid`: the values go into `bufs[0]`, then each of the
/// log2(`wg`) steps adds the value `offset` places back into the other buffer, behind a
/// barrier. Returns the buffer that holds, at `lid`, the sum of invocations 0..=lid's values.
pub(crate) fn workgroup_scan<'b>(
    k: &'b KernelBuilder,
    bufs: [SharedId; 2],
    (lid, wg): (Val<'b>, u32),
    value: Val<'b>,
) -> SharedId {
    k.store_shared(bufs[0], lid, value);
    k.barrier();
    let mut cur = 0;
    let mut offset = 1;
    while offset < wg {
        let o = k.u32(offset);
        let mine = k.load_shared(bufs[cur], lid);
        let s = k.var("s", Scalar::U32);
        s.set(mine);
        k.if_(lid.ge(o), || {
            s.set(mine + k.load_shared(bufs[cur], lid - o))
        });
        k.store_shared(bufs[1 - cur], lid, s.get());
        k.barrier();
        cur = 1 - cur;
        offset *= 2;
    }
    bufs[cur]
}

pub(crate) fn nonzero(op: &'static str, what: &'static str, v: u32) -> Result<u32, ShapeError> {
    if v == 0 {
        Err(ShapeError::Zero { op, what })
    } else {
        Ok(v)
    }
}

/// `v`, where it is a multiple of `m` (the quads a kernel reads its rows in).
pub(crate) fn multiple_of(
    op: &'static str,
    what: &'static str,
    v: u32,
    m: u32,
) -> Result<u32, ShapeError> {
    if v.is_multiple_of(m) {
        Ok(v)
    } else {
        Err(ShapeError::NotMultiple {
            op,
            what,
            value: v as usize,
            multiple: m as usize,
        })
    }
}

/// The product of `dims` as an element count that kernels can index (at most
/// [`MAX_ELEMENTS`]).
pub(crate) fn elements(
    op: &'static str,
    what: &'static str,
    dims: &[u32],
) -> Result<u32, ShapeError> {
    let n = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d as usize));
    match n {
        Some(n) if n <= MAX_ELEMENTS => Ok(n as u32),
        _ => Err(ShapeError::TooLarge {
            op,
            what,
            value: dims
                .iter()
                .map(|&d| d as usize)
                .fold(1, usize::saturating_mul),
            limit: MAX_ELEMENTS,
        }),
    }
}

/// A slice given to a reference must have the length its shape implies.
pub(crate) fn expect_len(
    op: &'static str,
    what: &'static str,
    expected: usize,
    found: usize,
) -> Result<(), ShapeError> {
    if found == expected {
        Ok(())
    } else {
        Err(ShapeError::Mismatch {
            op,
            what,
            expected,
            found,
        })
    }
}

/// A seed for a case's inputs, from its name: every case gets its own data, and the same data
/// on every run.
pub(crate) fn seed(name: &str) -> u64 {
    // FNV-1a: stable across Rust versions, unlike `DefaultHasher`.
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_counts_are_checked() {
        assert_eq!(elements("op", "x", &[7, 9, 64]), Ok(4032));
        assert_eq!(
            elements("op", "x", &[1 << 16, 1 << 16]),
            Err(ShapeError::TooLarge {
                op: "op",
                what: "x",
                value: 1 << 32,
                limit: MAX_ELEMENTS
            })
        );
        assert_eq!(
            nonzero("op", "cols", 0),
            Err(ShapeError::Zero {
                op: "op",
                what: "cols"
            })
        );
        assert!(expect_len("op", "x", 3, 4).is_err());
        assert!(expect_len("op", "x", 3, 3).is_ok());
    }

    #[test]
    fn f16_rounding_is_to_nearest_even() {
        // 1 + 2^-11 lies halfway between 1 and the next f16 (1 + 2^-10): ties go to even.
        assert_eq!(Float::F16.round(1.0 + 2f64.powi(-11)), 1.0);
        assert_eq!(
            Float::F16.round(1.0 + 3.0 * 2f64.powi(-11)),
            1.0 + 2f64.powi(-9)
        );
        assert_eq!(Float::F32.round(0.1), 0.1f32 as f64);
        assert_eq!(seed("a"), seed("a"));
        assert_ne!(seed("a"), seed("b"));
    }
}
