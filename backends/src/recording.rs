//! Recordings: a list of dispatches captured once and replayed many times, so that a model's
//! decode step costs one submission instead of one per node.
//!
//! A recording holds its dispatches by value (program, grid, bindings, parameters). Backends
//! with a native form (Vulkan: a secondary command buffer with its descriptor sets written
//! once; CUDA: an instantiated CUDA graph) keep it under [`Recording::native`]; the others
//! replay the list through [`Backend::dispatch`](crate::Backend::dispatch). Anything that must
//! change between replays (a position, a token id) lives in a buffer the kernels read, which
//! the host writes before each replay: parameters are frozen at record time.
//!
//! Replaying after a buffer the recording binds was freed is [`BackendError::StaleRecording`],
//! checked before anything reaches the device: buffer handles are never reused, and a buffer
//! cannot change size, so "still allocated" is the whole condition.

use crate::backend::{Backend, Binding, BufferHandle, Dispatch, ProgramId};
use crate::error::BackendError;
use trine_ir::{Access, ParamValue};

/// One dispatch of a recording, owned.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedDispatch {
    pub program: ProgramId,
    pub grid: [u32; 3],
    pub bindings: Vec<Binding>,
    pub params: Vec<ParamValue>,
}

impl RecordedDispatch {
    pub fn of(d: &Dispatch<'_>) -> RecordedDispatch {
        RecordedDispatch {
            program: d.program,
            grid: d.grid,
            bindings: d.bindings.to_vec(),
            params: d.params.to_vec(),
        }
    }

    pub fn as_dispatch(&self) -> Dispatch<'_> {
        Dispatch {
            program: self.program,
            grid: self.grid,
            bindings: &self.bindings,
            params: &self.params,
        }
    }
}

/// Dispatches recorded on one backend, replayed with
/// [`Backend::replay`](crate::Backend::replay) and given back with
/// [`Backend::release`](crate::Backend::release).
#[derive(Debug)]
pub struct Recording {
    dispatches: Vec<RecordedDispatch>,
    /// The backend's own object for this recording, by id; `None` where the backend replays
    /// the list dispatch by dispatch.
    pub native: Option<u64>,
    /// Pipeline barriers the native form holds (Vulkan), for reports.
    pub barriers: usize,
}

impl Recording {
    /// A recording replayed through `dispatch`, one dispatch at a time.
    pub fn direct(list: &[Dispatch<'_>]) -> Recording {
        Recording {
            dispatches: list.iter().map(RecordedDispatch::of).collect(),
            native: None,
            barriers: 0,
        }
    }

    /// A recording the backend holds as its own object `id`, with `barriers` barriers in it.
    pub fn native(list: &[Dispatch<'_>], id: u64, barriers: usize) -> Recording {
        Recording {
            native: Some(id),
            barriers,
            ..Recording::direct(list)
        }
    }

    pub fn dispatches(&self) -> &[RecordedDispatch] {
        &self.dispatches
    }

    pub fn len(&self) -> usize {
        self.dispatches.len()
    }

    pub fn is_empty(&self) -> bool {
        self.dispatches.is_empty()
    }

    /// Every buffer the recording binds, each once.
    pub fn buffers(&self) -> Vec<BufferHandle> {
        let mut seen: Vec<BufferHandle> = self
            .dispatches
            .iter()
            .flat_map(|d| d.bindings.iter().map(|b| b.buffer))
            .collect();
        seen.sort_by_key(|b| b.0);
        seen.dedup();
        seen
    }

    /// Fails with [`BackendError::StaleRecording`] on the first buffer `live` says is gone.
    pub fn check_live(&self, live: impl Fn(BufferHandle) -> bool) -> Result<(), BackendError> {
        match self.buffers().into_iter().find(|&b| !live(b)) {
            Some(buffer) => Err(BackendError::StaleRecording { buffer }),
            None => Ok(()),
        }
    }
}

/// Replays `recording` dispatch by dispatch on `backend`: the trait's default, and the path of
/// a backend whose runtime has no native form. A stale recording queues nothing: the buffers
/// are checked before the first dispatch. A read of no bytes is how the trait asks whether a
/// handle is allocated: every backend looks the buffer up first and returns at once, without
/// waiting for queued work.
pub fn replay_each<B: Backend + ?Sized>(
    backend: &B,
    recording: &Recording,
) -> Result<(), BackendError> {
    recording.check_live(|b| backend.read(b, 0, &mut []).is_ok())?;
    recording
        .dispatches()
        .iter()
        .try_for_each(|d| backend.dispatch(&d.as_dispatch()))
}

/// Where a recorded list needs an execution and memory barrier: before dispatch `i` when it
/// reads a buffer written since the last barrier (read after write), or writes a buffer read
/// or written since then (write after read, write after write). Independent neighbours, such
/// as the Q, K and V projections of one layer, share a barrier.
///
/// `access(i)` gives dispatch `i`'s bindings with their access. Hazards are tracked per
/// buffer, not per byte range: two dispatches writing disjoint halves of one buffer are
/// ordered anyway, which costs a barrier but is never wrong. The first dispatch always gets
/// one, ordering it after whatever ran before the recording.
pub fn barriers_before(
    count: usize,
    access: impl Fn(usize) -> Vec<(BufferHandle, Access)>,
) -> Vec<bool> {
    let mut need = vec![false; count];
    let mut read: Vec<BufferHandle> = vec![];
    let mut written: Vec<BufferHandle> = vec![];
    for (i, slot) in need.iter_mut().enumerate() {
        let uses = access(i);
        let hazard = i == 0
            || uses
                .iter()
                .any(|(b, a)| written.contains(b) || (*a != Access::Read && read.contains(b)));
        if hazard {
            *slot = true;
            read.clear();
            written.clear();
        }
        for (b, a) in uses {
            if a != Access::Write {
                read.push(b);
            }
            if a != Access::Read {
                written.push(b);
            }
        }
    }
    need
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(i: u64) -> BufferHandle {
        BufferHandle(i)
    }

    #[test]
    fn independent_neighbours_share_a_barrier() {
        // norm: x → n; q, k, v: n → q, k, v; attention: q, k, v → a; a write over k.
        let lists = [
            vec![(b(1), Access::Read), (b(2), Access::Write)],
            vec![(b(2), Access::Read), (b(3), Access::Write)],
            vec![(b(2), Access::Read), (b(4), Access::Write)],
            vec![(b(2), Access::Read), (b(5), Access::Write)],
            vec![
                (b(3), Access::Read),
                (b(4), Access::Read),
                (b(5), Access::Read),
                (b(6), Access::Write),
            ],
            vec![(b(1), Access::Read), (b(4), Access::Write)],
        ];
        let need = barriers_before(lists.len(), |i| lists[i].clone());
        assert_eq!(need, [true, true, false, false, true, true]);
    }

    #[test]
    fn write_after_read_is_ordered() {
        let lists = [
            vec![(b(1), Access::Read), (b(2), Access::Write)],
            vec![(b(3), Access::Read), (b(1), Access::Write)],
            vec![(b(4), Access::ReadWrite)],
            vec![(b(4), Access::ReadWrite)],
        ];
        let need = barriers_before(lists.len(), |i| lists[i].clone());
        assert_eq!(need, [true, true, false, true]);
    }

    #[test]
    fn a_freed_buffer_makes_the_recording_stale() {
        let bind = |i| Binding {
            buffer: b(i),
            offset: 0,
            size: 4,
        };
        let (b1, b2) = ([bind(1), bind(2)], [bind(2)]);
        let list = [
            Dispatch {
                program: ProgramId(9),
                grid: [1, 1, 1],
                bindings: &b1,
                params: &[],
            },
            Dispatch {
                program: ProgramId(9),
                grid: [1, 1, 1],
                bindings: &b2,
                params: &[],
            },
        ];
        let r = Recording::direct(&list);
        assert_eq!(r.buffers(), [b(1), b(2)]);
        assert!(r.check_live(|_| true).is_ok());
        assert!(matches!(
            r.check_live(|h| h != b(2)),
            Err(BackendError::StaleRecording { buffer }) if buffer == b(2)
        ));
    }
}
