//! How outputs are judged: NaN/Inf patterns must match exactly, then the normalised mean
//! squared error `Σ(a−b)² / Σa²` (a the reference) must be within the case's bound.

/// Outcome of comparing one output buffer.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    Pass { nmse: f64 },
    Fail { nmse: Option<f64>, reason: String },
}

fn class(v: f64) -> &'static str {
    if v.is_nan() {
        "NaN"
    } else if v == f64::INFINITY {
        "+Inf"
    } else if v == f64::NEG_INFINITY {
        "-Inf"
    } else {
        "finite"
    }
}

/// NMSE of `got` against `want` over their finite elements; `None` when a NaN/Inf differs
/// (with its index and the two classes).
pub fn nmse(want: &[f64], got: &[f64]) -> Result<f64, String> {
    if want.len() != got.len() {
        return Err(format!(
            "{} values expected, {} produced",
            want.len(),
            got.len()
        ));
    }
    let mut err = 0.0;
    let mut norm = 0.0;
    for (i, (&a, &b)) in want.iter().zip(got).enumerate() {
        let (ca, cb) = (class(a), class(b));
        if ca != cb {
            return Err(format!("element {i}: expected {ca} ({a}), got {cb} ({b})"));
        }
        if ca == "finite" {
            err += (a - b) * (a - b);
            norm += a * a;
        }
    }
    Ok(if err == 0.0 {
        0.0
    } else if norm == 0.0 {
        f64::INFINITY
    } else {
        err / norm
    })
}

/// Judges one output against its bound.
pub fn judge(name: &str, want: &[f64], got: &[f64], bound: f64) -> Verdict {
    match nmse(want, got) {
        Err(reason) => Verdict::Fail {
            nmse: None,
            reason: format!("{name}: {reason}"),
        },
        Ok(e) if e <= bound => Verdict::Pass { nmse: e },
        Ok(e) => {
            let worst = want
                .iter()
                .zip(got)
                .enumerate()
                .max_by(|x, y| (x.1 .0 - x.1 .1).abs().total_cmp(&(y.1 .0 - y.1 .1).abs()))
                .map(|(i, (a, b))| format!("; worst element {i}: expected {a}, got {b}"))
                .unwrap_or_default();
            Verdict::Fail {
                nmse: Some(e),
                reason: format!("{name}: NMSE {e:.3e} exceeds {bound:.0e}{worst}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_pattern_mismatch_fails_before_nmse() {
        let v = judge("y", &[1.0, f64::NAN], &[1.0, 2.0], 1.0);
        assert!(matches!(v, Verdict::Fail { nmse: None, .. }), "{v:?}");
        assert_eq!(nmse(&[f64::INFINITY, 2.0], &[f64::INFINITY, 2.0]), Ok(0.0));
        assert!(nmse(&[f64::INFINITY], &[f64::NEG_INFINITY]).is_err());
    }

    #[test]
    fn nmse_is_relative_squared_error() {
        let e = nmse(&[3.0, 4.0], &[3.0, 4.5]).unwrap();
        assert!((e - 0.25 / 25.0).abs() < 1e-15);
        assert_eq!(
            judge("y", &[1.0], &[1.1], 1e-3),
            Verdict::Fail {
                nmse: Some(nmse(&[1.0], &[1.1]).unwrap()),
                reason: "y: NMSE 1.000e-2 exceeds 1e-3; worst element 0: expected 1, got 1.1"
                    .into(),
            }
        );
        assert_eq!(nmse(&[0.0], &[1e-30]), Ok(f64::INFINITY));
    }
}
