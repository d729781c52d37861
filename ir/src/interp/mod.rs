//! The reference interpreter: the definition of what a kernel means, and the oracle every
//! lowering is checked against.
//!
//! A workgroup runs as one SIMT group: each statement executes for all active invocations
//! before the next, with a mask for control flow. Barriers are therefore exact, and the
//! interpreter can report what a GPU would leave undefined: out-of-bounds accesses, a barrier
//! reached by only part of the workgroup, shared memory read before any write or written and
//! read by different invocations with no barrier between, a shuffle from an inactive lane,
//! integer division by zero, float-to-int conversions out of range, shared memory touched
//! while an asynchronous copy to it is in flight.

mod copies;
mod exec;
mod groups;
mod memory;
mod ops;
mod tiles;

pub use memory::{View, Words};

use crate::kernel::{ExprId, Kernel, SharedId};
use crate::types::ParamValue;
use crate::validate::{validate, Info, Limits, ValidationError};
use thiserror::Error;

/// Where in the grid an error happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Site {
    pub workgroup: [u32; 3],
    /// Linear index of the invocation within its workgroup.
    pub invocation: u32,
}

impl std::fmt::Display for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "workgroup {:?}, invocation {}",
            self.workgroup, self.invocation
        )
    }
}

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum InterpError {
    #[error("invalid kernel: {0}")]
    Invalid(#[from] ValidationError),
    #[error("kernel takes {expected} buffers, {found} given")]
    BufferCount { expected: usize, found: usize },
    #[error("kernel takes parameters {expected:?}, given {found:?}")]
    Params {
        expected: Vec<String>,
        found: Vec<String>,
    },
    #[error("buffer view of {len} bytes at offset {offset} is misaligned or outside its storage")]
    BadView { offset: u64, len: u64 },
    #[error("subgroup size {0} is not a power of two between 1 and 128")]
    SubgroupSize(u32),
    #[error("the kernel is written for subgroups {required} wide, run with {given}")]
    SubgroupWidth { required: u32, given: u32 },
    #[error("{at}: {what} index {index} is out of bounds (length {len}) at {expr:?}")]
    OutOfBounds {
        at: Site,
        what: String,
        index: u64,
        len: u64,
        expr: String,
    },
    #[error("{at}: shared {array}[{index}] read before any invocation wrote it, or since an array sharing its bytes was written")]
    UninitShared { at: Site, array: String, index: u32 },
    #[error("{at}: shared {array}[{index}] was written by invocation {writer} and accessed by this one with no barrier between")]
    SharedRace {
        at: Site,
        array: String,
        index: u32,
        writer: u32,
    },
    #[error("{at}: barrier reached by only part of the workgroup")]
    DivergentBarrier { at: Site },
    #[error("{at}: integer division by zero at {expr:?}")]
    DivideByZero { at: Site, expr: ExprId },
    #[error("{at}: {value} does not fit the target integer type at {expr:?}")]
    FloatToInt {
        at: Site,
        expr: ExprId,
        value: String,
    },
    #[error(
        "{at}: shuffle at {expr:?} reads lane {lane}, which is inactive or outside the subgroup"
    )]
    InactiveLane { at: Site, expr: ExprId, lane: u32 },
    #[error("{at}: loop counter overflows u32")]
    LoopOverflow { at: Site },
    #[error("matrix tiles need whole subgroups: {invocations} invocations per workgroup, subgroups of {subgroup_size}")]
    TileSubgroups {
        invocations: u32,
        subgroup_size: u32,
    },
    #[error("{at}: a tile operation reached by only part of a subgroup")]
    TilePartialSubgroup { at: Site },
    #[error("{at}: a tile operation's {what} differs across its subgroup")]
    TileNotUniform { at: Site, what: &'static str },
    #[error("{at}: tile offset {offset} and stride {stride} must be multiples of 8 elements")]
    TileMisaligned { at: Site, offset: u32, stride: u32 },
    #[error("{at}: tile {tile:?} is read before it is zeroed or loaded")]
    TileUnset { at: Site, tile: String },
    #[error("{at}: a warpgroup operation reached by only part of a warpgroup")]
    GroupPartial { at: Site },
    #[error("{at}: warpgroup operand offset {offset} is not a multiple of {atom} elements", atom = crate::kernel::GROUP_ATOM)]
    GroupMisaligned { at: Site, offset: u32 },
    #[error("{at}: accumulator {acc:?} used while a product into it is not waited for")]
    GroupPending { at: Site, acc: String },
    #[error("{at}: shared {array}[{index}] written while a warpgroup product that reads it is not waited for")]
    GroupOperandWritten { at: Site, array: String, index: u32 },
    #[error("{at}: {what} byte {byte} of an asynchronous copy is not a multiple of 16")]
    CopyMisaligned { at: Site, what: String, byte: u64 },
    #[error(
        "{at}: shared {array}[{index}] accessed while an asynchronous copy to it is in flight"
    )]
    CopyInFlight { at: Site, array: String, index: u32 },
    #[error("{at}: shared {array}[{index}] was read by invocation {reader} (with others of its subgroup or warpgroup, or others) and overwritten through an array sharing its bytes with no barrier between")]
    OverlayRace {
        at: Site,
        array: String,
        index: u32,
        reader: u32,
    },
    #[error("{at}: a pair of halves stored at odd index {index}")]
    PairOdd { at: Site, index: u32 },
    #[error("{at}: shared {array}[{index}] was stored as half of a pair and accessed with no barrier between")]
    PairNoBarrier { at: Site, array: String, index: u32 },
}

/// Everything a dispatch needs, checked once.
pub struct Launch<'a> {
    pub(crate) kernel: &'a Kernel,
    pub(crate) info: Info,
    pub(crate) grid: [u32; 3],
    pub(crate) buffers: Vec<View<'a>>,
    pub(crate) params: Vec<u32>,
    pub(crate) subgroup_size: u32,
    /// Each shared array's partners in memory ([`Kernel::shared_partners`]).
    pub(crate) partners: Vec<Vec<SharedId>>,
}

impl<'a> Launch<'a> {
    /// Validates the kernel (with `limits`) and the dispatch: buffer count, views inside their
    /// storage and aligned to 4 bytes, parameter count and types, subgroup size.
    pub fn new(
        kernel: &'a Kernel,
        limits: &Limits,
        grid: [u32; 3],
        buffers: &[View<'a>],
        params: &[ParamValue],
        subgroup_size: u32,
    ) -> Result<Launch<'a>, InterpError> {
        let info = validate(kernel, limits)?;
        if buffers.len() != kernel.buffers.len() {
            return Err(InterpError::BufferCount {
                expected: kernel.buffers.len(),
                found: buffers.len(),
            });
        }
        for v in buffers {
            let end = v.offset.checked_add(v.len);
            if v.offset % 4 != 0 || end.is_none_or(|e| e > v.words.len()) {
                return Err(InterpError::BadView {
                    offset: v.offset,
                    len: v.len,
                });
            }
        }
        let expected: Vec<_> = kernel.params.iter().map(|p| p.ty).collect();
        let found: Vec<_> = params.iter().map(|p| p.ty()).collect();
        if expected != found {
            return Err(InterpError::Params {
                expected: expected.iter().map(|t| t.to_string()).collect(),
                found: found.iter().map(|t| t.to_string()).collect(),
            });
        }
        if !subgroup_size.is_power_of_two() || subgroup_size > 128 {
            return Err(InterpError::SubgroupSize(subgroup_size));
        }
        if let Some(required) = kernel.capabilities.subgroup_width {
            if required != subgroup_size {
                return Err(InterpError::SubgroupWidth {
                    required,
                    given: subgroup_size,
                });
            }
        }
        Ok(Launch {
            kernel,
            info,
            grid,
            buffers: buffers.to_vec(),
            params: params.iter().map(|p| p.bits()).collect(),
            subgroup_size,
            partners: (0..kernel.shared.len() as u32)
                .map(|a| kernel.shared_partners(SharedId(a)))
                .collect(),
        })
    }

    /// Number of workgroups in the grid.
    pub fn workgroups(&self) -> u64 {
        self.grid.iter().map(|&g| g as u64).product()
    }

    /// The id of the `n`th workgroup in x-fastest order.
    pub fn workgroup_id(&self, n: u64) -> [u32; 3] {
        let [gx, gy, _] = self.grid.map(|g| g as u64);
        [
            (n % gx) as u32,
            ((n / gx) % gy) as u32,
            (n / (gx * gy)) as u32,
        ]
    }

    /// Runs one workgroup.
    pub fn run_workgroup(&self, wg: [u32; 3]) -> Result<(), InterpError> {
        exec::Workgroup::new(self, wg).run()
    }

    /// Runs every workgroup in order on this thread.
    pub fn run(&self) -> Result<(), InterpError> {
        (0..self.workgroups()).try_for_each(|n| self.run_workgroup(self.workgroup_id(n)))
    }
}

/// Runs `kernel` over `grid` on byte buffers, which it updates in place. The simplest way to
/// get reference results.
pub fn interpret(
    kernel: &Kernel,
    grid: [u32; 3],
    buffers: &mut [Vec<u8>],
    params: &[ParamValue],
    subgroup_size: u32,
) -> Result<(), InterpError> {
    let words: Vec<Words> = buffers.iter().map(|b| Words::from_bytes(b)).collect();
    let views: Vec<View> = words.iter().map(View::whole).collect();
    let limits = Limits {
        max_shared_bytes: u64::MAX,
        max_invocations: 1024,
    };
    Launch::new(kernel, &limits, grid, &views, params, subgroup_size)?.run()?;
    for (b, w) in buffers.iter_mut().zip(&words) {
        w.read(0, b);
    }
    Ok(())
}
