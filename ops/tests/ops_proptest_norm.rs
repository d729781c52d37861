//! Generated shapes for rms_norm: the reference interpreter running its kernel must agree with
//! its plain-Rust f64 reference within its bound, for sizes the fixed cases do not pick (odd,
//! tiny, just above a workgroup).

use proptest::prelude::*;
use trine_ops::case::Case;
use trine_ops::rms_norm::{self, RmsNorm};
use trine_ops::support::Reduction;

/// Runs `case` in the interpreter and checks it against its plain-Rust reference.
fn interpreter_agrees(case: &Case) -> Result<(), TestCaseError> {
    let worst = case.check_reference();
    prop_assert!(worst.is_ok(), "{}: {}", case.name, worst.unwrap_err());
    // A pass always carries the measured error, which must be within the case's bound.
    let worst = worst.unwrap();
    prop_assert!(worst.is_some_and(|e| e <= case.bound), "{:?}", worst);
    Ok(())
}

fn reduction() -> impl Strategy<Value = Reduction> {
    prop_oneof![Just(Reduction::Shared), Just(Reduction::Subgroup)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn rms_norm_matches_its_reference(
        rows in 1u32..=4,
        cols in 1u32..=700,
        eps in prop_oneof![Just(1e-6f32), Just(1e-5), Just(0.25)],
        how in reduction(),
    ) {
        let case = rms_norm::case(RmsNorm { rows, cols, eps }, how).unwrap();
        interpreter_agrees(&case)?;
    }
}
