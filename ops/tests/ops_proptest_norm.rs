//! Generated shapes for the row ops (rms_norm, softmax, rope): the reference interpreter running
//! each op's kernel must agree with the op's plain-Rust f64 reference within the op's bound,
//! for sizes the fixed cases do not pick (odd, tiny, just above a workgroup).

use proptest::prelude::*;
use trine_ops::case::Case;
use trine_ops::rms_norm::{self, RmsNorm};
use trine_ops::rope::{self, Rope, RopeMode};
use trine_ops::softmax::{self, Mask, Softmax};
use trine_ops::support::{Float, Reduction};

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

    #[test]
    fn softmax_matches_its_reference(
        rows in 1u32..=5,
        cols in 1u32..=600,
        scale in 0.05f32..2.0,
        causal in proptest::option::of(0u32..=600),
        how in reduction(),
    ) {
        let mask = causal.map_or(Mask::None, |offset| Mask::Causal { offset });
        let case = softmax::case(Softmax { rows, cols, scale, mask }, how).unwrap();
        interpreter_agrees(&case)?;
    }

    #[test]
    fn rope_matches_its_reference(
        tokens in 1u32..=5,
        heads in 1u32..=4,
        half in 1u32..=40,
        offset in 0u32..=5000,
        base in 1e3f32..1e6,
        neox in any::<bool>(),
        f16 in any::<bool>(),
    ) {
        let mode = if neox { RopeMode::Neox } else { RopeMode::Normal };
        let t = if f16 { Float::F16 } else { Float::F32 };
        let shape = Rope { tokens, heads, head_dim: 2 * half, offset, base, mode };
        interpreter_agrees(&rope::case(shape, t).unwrap())?;
    }
}
