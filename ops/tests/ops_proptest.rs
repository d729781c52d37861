//! Random shapes for matvec: the interpreter, running the op's kernel, must agree
//! with the op's plain-Rust reference within the op's bound. Shapes stay small (the
//! interpreter runs every invocation) and cover sizes that are not multiples of the
//! workgroup's rows or blocks, single rows and columns, every weight type and both reductions.
//!
//! Each draw has at least two outputs. The bounds are NMSEs set from the suite's cases, where
//! the error is averaged over many outputs; an output alone is judged by its own squared
//! relative error, which cancellation takes anywhere as its sum nears zero (one draw in about
//! 6000 single-row matvecs measured over matvec's bound, none with four rows or more). The
//! suite's fixed cases keep single-row products (`matvec/*/1x45`, `1x96`).

use proptest::prelude::*;
use trine_ops::case::Case;
use trine_ops::matvec::{self, Reduce};

fn agrees(case: &Case) -> Result<(), TestCaseError> {
    let worst = case.check_reference();
    prop_assert!(worst.is_ok(), "{}: {}", case.name, worst.unwrap_err());
    prop_assert!(worst.unwrap().is_some(), "{}: nothing compared", case.name);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn matvec_matches_reference(
        ty in prop::sample::select(trine_ops::blocks::weight_types().collect::<Vec<_>>()),
        rows in 2u32..40,
        width in 1u32..200,
        shared in any::<bool>(),
        seed in any::<u64>(),
    ) {
        // Quantized rows are whole blocks: 1 to 6 of them.
        let block = ty.block_elems() as u32;
        let cols = if ty.is_quantized() { block * (1 + width % 6) } else { width };
        let reduce = if shared { Reduce::Shared } else { Reduce::Subgroup };
        agrees(&matvec::case(ty, rows, cols, reduce, seed).unwrap())?;
    }
}
