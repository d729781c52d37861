//! How one measurement is taken: warm-up, then repetitions until enough samples and enough
//! time (within caps), summarised as the median and the spread.

use std::time::Duration;

/// When to stop repeating.
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    /// Untimed runs first (first-use costs: page faults, pipeline creation, caches).
    pub warmup: usize,
    pub min_reps: usize,
    pub min_time: Duration,
    pub max_reps: usize,
    /// Stops even below `min_reps` once the samples add up to this.
    pub max_time: Duration,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            warmup: 3,
            min_reps: 10,
            min_time: Duration::from_millis(100),
            max_reps: 200,
            max_time: Duration::from_secs(2),
        }
    }
}

impl Policy {
    /// Exactly `n` repetitions (at least one) after one warm-up, however long they take.
    pub fn exact(n: usize) -> Policy {
        Policy {
            warmup: 1,
            min_reps: n.max(1),
            min_time: Duration::ZERO,
            max_reps: n.max(1),
            max_time: Duration::MAX,
        }
    }
}

/// The summary of a measurement's samples, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Stats {
    pub median_us: f64,
    pub min_us: f64,
    pub max_us: f64,
    pub p10_us: f64,
    pub p90_us: f64,
    pub reps: usize,
}

impl Stats {
    /// `None` for no samples. The median of an even count is the mean of the middle two;
    /// percentiles are the nearest rank.
    pub fn of(samples: &[Duration]) -> Option<Stats> {
        let mut us: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e6).collect();
        us.sort_by(f64::total_cmp);
        let n = us.len();
        let last = *us.last()?;
        let median = if n % 2 == 1 {
            us[n / 2]
        } else {
            (us[n / 2 - 1] + us[n / 2]) / 2.0
        };
        let rank = |p: f64| us[((p * n as f64).ceil() as usize).clamp(1, n) - 1];
        Some(Stats {
            median_us: median,
            min_us: us[0],
            max_us: last,
            p10_us: rank(0.1),
            p90_us: rank(0.9),
            reps: n,
        })
    }
}

/// Runs `once` (which returns the time of one run) under `policy`.
pub fn measure<E>(
    policy: &Policy,
    mut once: impl FnMut() -> Result<Duration, E>,
) -> Result<Stats, E> {
    for _ in 0..policy.warmup {
        once()?;
    }
    let mut samples = vec![];
    let mut total = Duration::ZERO;
    loop {
        let t = once()?;
        samples.push(t);
        total += t;
        let enough = samples.len() >= policy.min_reps && total >= policy.min_time;
        if enough || samples.len() >= policy.max_reps || total >= policy.max_time {
            break;
        }
    }
    Ok(Stats::of(&samples).expect("the loop takes at least one sample"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|&x| Duration::from_micros(x)).collect()
    }

    #[test]
    fn median_and_spread() {
        let s = Stats::of(&us(&[50, 10, 40, 20, 30])).unwrap();
        assert_eq!(
            (s.median_us, s.min_us, s.max_us, s.reps),
            (30.0, 10.0, 50.0, 5)
        );
        let even = Stats::of(&us(&[4, 1, 3, 2])).unwrap();
        assert_eq!(even.median_us, 2.5);
        let ten = Stats::of(&us(&[10, 9, 8, 7, 6, 5, 4, 3, 2, 1])).unwrap();
        assert_eq!((ten.p10_us, ten.p90_us), (1.0, 9.0));
        assert!(Stats::of(&[]).is_none());
    }

    #[test]
    fn stops_at_min_reps_and_min_time() {
        let p = Policy::default();
        let mut calls = 0;
        let fast = measure(&p, || {
            calls += 1;
            Ok::<_, ()>(Duration::from_millis(1))
        })
        .unwrap();
        // 100 samples of 1 ms reach the 0.1 s minimum; the warm-up is not counted.
        assert_eq!((fast.reps, calls), (100, 103));
        let slow = measure(&p, || Ok::<_, ()>(Duration::from_millis(300))).unwrap();
        // 7 × 0.3 s passes the 2 s cap before 10 repetitions.
        assert_eq!(slow.reps, 7);
        let tiny = measure(&p, || Ok::<_, ()>(Duration::from_nanos(10))).unwrap();
        assert_eq!(tiny.reps, 200);
        assert_eq!(measure(&p, || Err::<Duration, _>("no")), Err("no"));
    }
}
