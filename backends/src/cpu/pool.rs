//! The CPU backend's worker threads: a dispatch's ranges of workgroups are claimed one at a
//! time by the workers and, where the kernel's frame fits any thread's stack, by the calling
//! thread too.
//!
//! A decode step is some 150 dispatches of tens of microseconds each, so what a dispatch costs
//! beyond its kernel matters: rayon's `install` put the caller to sleep and woke a worker for
//! every dispatch, which cost a small kernel more than the kernel itself.
//! Here the workers spin for a while after each job before they sleep, so back-to-back
//! dispatches find them awake, and the caller works instead of waiting to be woken.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle worker spins for the next job before it sleeps: longer than the host's
/// work between the dispatches of a step, short enough not to burn a core between steps.
const SPIN: Duration = Duration::from_micros(200);

/// Spins between two readings of the clock (a reading costs about as much as the check).
const SPINS_PER_READING: u32 = 64;

/// Whether a spin that started at `start` has lasted `SPIN`, reading the clock every
/// `SPINS_PER_READING`-th call (`count` counts the calls).
fn spun_out(start: Instant, count: &mut u32) -> bool {
    *count += 1;
    (*count).is_multiple_of(SPINS_PER_READING) && start.elapsed() >= SPIN
}

/// What a job runs for each of its ranges.
type RangeFn = dyn Fn(u64) + Sync;

/// A job as the workers see it: the function to call for each range, and how many there are.
/// The pointer is only dereferenced for a range claimed under the job's generation, which the
/// caller keeps alive until every claimed range has finished.
#[derive(Clone, Copy)]
struct Job {
    run: *const RangeFn,
    ranges: u64,
}

// SAFETY: `run` points to a `Sync` closure that outlives every use (see `Job`).
unsafe impl Send for Job {}

struct Shared {
    /// The current job and its generation.
    job: Mutex<(u64, Option<Job>)>,
    /// Wakes sleeping workers when a job is published, and on shutdown.
    wake: Condvar,
    /// The generation of the last published job (0: none); `u64::MAX` shuts the pool down.
    generation: AtomicU64,
    /// Claims: the generation's low 32 bits, then the next range to claim.
    next: AtomicU64,
    /// Ranges of the current job finished.
    done: AtomicU64,
    /// Workers asleep on `wake`.
    sleepers: AtomicUsize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while holding it.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    /// Claims the next range of generation `g`, if any is left.
    fn claim(&self, g: u64, ranges: u64) -> Option<u64> {
        let tag = (g & 0xffff_ffff) << 32;
        let mut cur = self.next.load(Ordering::Acquire);
        loop {
            if cur & !0xffff_ffff != tag || cur & 0xffff_ffff >= ranges {
                return None;
            }
            match self
                .next
                .compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some(cur & 0xffff_ffff),
                Err(now) => cur = now,
            }
        }
    }

    /// Runs ranges of job `job` (generation `g`) until none is left.
    fn work(&self, g: u64, job: Job) {
        while let Some(r) = self.claim(g, job.ranges) {
            // SAFETY: `r` was claimed under generation `g`, so the caller of `g` is still
            // waiting for it to finish and keeps the closure alive.
            unsafe { (*job.run)(r) };
            self.done.fetch_add(1, Ordering::AcqRel);
        }
    }
}

pub(crate) struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Serialises callers: one job at a time.
    caller: Mutex<()>,
}

impl Pool {
    /// `workers` threads with stacks of `stack` bytes.
    pub(crate) fn new(workers: usize, stack: usize) -> std::io::Result<Pool> {
        let shared = Arc::new(Shared {
            job: Mutex::new((0, None)),
            wake: Condvar::new(),
            generation: AtomicU64::new(0),
            next: AtomicU64::new(0),
            done: AtomicU64::new(0),
            sleepers: AtomicUsize::new(0),
        });
        let mut handles = vec![];
        for i in 0..workers {
            let s = shared.clone();
            let h = std::thread::Builder::new()
                .name(format!("trine-cpu-{i}"))
                .stack_size(stack)
                .spawn(move || worker(&s));
            match h {
                Ok(h) => handles.push(h),
                Err(e) => {
                    let pool = Pool {
                        shared,
                        workers: handles,
                        caller: Mutex::new(()),
                    };
                    drop(pool);
                    return Err(e);
                }
            }
        }
        Ok(Pool {
            shared,
            workers: handles,
            caller: Mutex::new(()),
        })
    }

    /// Threads that run jobs besides the caller.
    pub(crate) fn workers(&self) -> usize {
        self.workers.len()
    }

    /// Runs `run(r)` for every `r` in `0..ranges`, on the workers and, if `join`, on the
    /// calling thread too; returns when all have finished.
    pub(crate) fn run(&self, ranges: u64, join: bool, run: &(dyn Fn(u64) + Sync)) {
        if ranges == 0 {
            return;
        }
        let _one = lock(&self.caller);
        let s = &*self.shared;
        // SAFETY: only the lifetime changes; the pointer is dereferenced only for ranges of
        // this job, all of which finish before this function returns (see `Job`).
        let run: &'static RangeFn = unsafe { std::mem::transmute(run) };
        let job = Job {
            run: run as *const RangeFn,
            ranges,
        };
        let g = {
            let mut j = lock(&s.job);
            let g = j.0 + 1;
            *j = (g, Some(job));
            s.done.store(0, Ordering::Release);
            s.next.store((g & 0xffff_ffff) << 32, Ordering::Release);
            s.generation.store(g, Ordering::Release);
            g
        };
        if s.sleepers.load(Ordering::Acquire) > 0 {
            let _j = lock(&s.job);
            s.wake.notify_all();
        }
        if join || self.workers.is_empty() {
            s.work(g, job);
        }
        let (start, mut count, mut long) = (Instant::now(), 0, false);
        while s.done.load(Ordering::Acquire) < ranges {
            long = long || spun_out(start, &mut count);
            if long {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        // No range of `g` is left to claim, so no worker dereferences `run` again.
        lock(&s.job).1 = None;
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let s = &*self.shared;
        {
            let _j = lock(&s.job);
            s.generation.store(u64::MAX, Ordering::Release);
            s.wake.notify_all();
        }
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
    }
}

fn worker(s: &Shared) {
    let mut seen = 0;
    loop {
        let (start, mut count) = (Instant::now(), 0);
        let g = loop {
            let g = s.generation.load(Ordering::Acquire);
            if g != seen {
                break g;
            }
            if !spun_out(start, &mut count) {
                std::hint::spin_loop();
                continue;
            }
            // Sleep until a job is published; re-checked under the lock, which publishing
            // takes, so no wake-up is missed.
            let mut j = lock(&s.job);
            s.sleepers.fetch_add(1, Ordering::AcqRel);
            while s.generation.load(Ordering::Acquire) == seen {
                j = s.wake.wait(j).unwrap_or_else(|p| p.into_inner());
            }
            s.sleepers.fetch_sub(1, Ordering::AcqRel);
        };
        if g == u64::MAX {
            return;
        }
        seen = g;
        let job = {
            let j = lock(&s.job);
            match *j {
                (jg, Some(job)) if jg == g => job,
                // Finished (or replaced) before this worker looked.
                _ => continue,
            }
        };
        s.work(g, job);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every range of every job runs exactly once, with the caller joining or not, for jobs
    /// back to back and after the workers have gone to sleep; dropping the pool ends them.
    #[test]
    fn every_range_runs_once() {
        let pool = Pool::new(3, 1 << 20).unwrap();
        for (job, ranges) in [1u64, 2, 7, 64, 1000, 3].into_iter().enumerate() {
            if job == 4 {
                std::thread::sleep(SPIN * 5);
            }
            for join in [false, true] {
                let hits: Vec<AtomicU64> = (0..ranges).map(|_| AtomicU64::new(0)).collect();
                pool.run(ranges, join, &|r| {
                    hits[r as usize].fetch_add(1, Ordering::Relaxed);
                });
                let counts: Vec<u64> = hits.iter().map(|h| h.load(Ordering::Relaxed)).collect();
                assert_eq!(
                    counts,
                    vec![1; ranges as usize],
                    "{ranges} ranges, join {join}"
                );
            }
        }
        drop(pool);
    }
}
