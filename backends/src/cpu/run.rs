//! Running a compiled kernel: the grid's workgroups split into contiguous ranges, one call of
//! the kernel's C function per range, spread over the backend's threads ([`super::pool`]).

use super::pool::Pool;
use super::toolchain::Entry;
use std::ffi::c_void;

/// Ranges per thread: enough for workgroups of uneven cost to balance, few enough that each
/// call amortises its setup.
const RANGES_PER_THREAD: u64 = 4;

/// One dispatch's arguments, shared by the calls for every range.
struct Args {
    entry: Entry,
    buffers: *const *mut c_void,
    params: *const u32,
    grid: *const u32,
}

// SAFETY: the pointers are read-only arguments that outlive the dispatch (`run` does not
// return before every call has finished); the memory behind the buffer pointers is written
// only by the kernel, whose calls cover disjoint workgroups.
unsafe impl Send for Args {}
// SAFETY: as above; `Args` itself is never written after it is made.
unsafe impl Sync for Args {}

/// Runs workgroups `0..workgroups` (at least 1) of `grid` on `pool`, and on the calling
/// thread if `join` (the kernel's frame fits any thread's stack).
///
/// # Safety
/// `entry` must be a kernel function with the ABI of `trine_codegen::c`; `buffers` must hold
/// one pointer per kernel buffer, each valid (and aligned to its element type) for everything
/// the kernel accesses, and nothing else may access that memory until `run` returns; `params`
/// must hold the kernel's parameters; `workgroups` must be the product of `grid`.
pub(crate) unsafe fn run(
    pool: &Pool,
    entry: Entry,
    buffers: &[*mut c_void],
    params: &[u32],
    grid: [u32; 3],
    (workgroups, join): (u64, bool),
) {
    let args = Args {
        entry,
        buffers: buffers.as_ptr(),
        params: params.as_ptr(),
        grid: grid.as_ptr(),
    };
    let threads = (pool.workers() + usize::from(join)) as u64;
    let ranges = (threads * RANGES_PER_THREAD).min(workgroups);
    let per = workgroups.div_ceil(ranges);
    pool.run(ranges, join, &|r| {
        let begin = r * per;
        let end = (begin + per).min(workgroups);
        if begin < end {
            let a = &args;
            // SAFETY: the caller's contract; ranges are disjoint and within the grid.
            unsafe { (a.entry)(a.buffers, a.params, a.grid, begin, end) };
        }
    });
}
