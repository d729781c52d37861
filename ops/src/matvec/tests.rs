//! Unit tests of the matvec: shape errors, codes read as words against codes read as bytes,
//! and the reference.

use crate::shape::ShapeError;
use trine_gguf::quant::{quantize, WeightType};
use trine_ir::Scalar;

use super::*;

#[test]
fn shapes_are_checked() {
    assert_eq!(
        check_shapes(WeightType::Q4_0, 2, 48, 1000, 48),
        Err(ShapeError::NotMultiple {
            op: OP,
            what: "cols",
            value: 48,
            multiple: 32
        })
    );
    assert_eq!(
        check_shapes(WeightType::Q4_1, 2, 64, 79, 64),
        Err(ShapeError::TooSmall {
            op: OP,
            what: "weight bytes",
            needed: 80,
            found: 79
        })
    );
    assert!(matches!(
        check_shapes(WeightType::F32, 3, 5, 60, 4),
        Err(ShapeError::Mismatch {
            expected: 5,
            found: 4,
            ..
        })
    ));
    assert!(matches!(
        check_shapes(WeightType::F32, 0, 5, 60, 5),
        Err(ShapeError::Zero { what: "rows", .. })
    ));
    assert!(matches!(
        check_shapes(WeightType::F32, 1 << 16, 1 << 15, usize::MAX, 1 << 15),
        Err(ShapeError::TooLarge { .. })
    ));
    assert!(matches!(
        case(WeightType::Q8_0, 3, 40, Reduce::Shared, 1),
        Err(ShapeError::NotMultiple { .. })
    ));
    let blocked = MatvecSpec {
        workgroup: 32,
        blocked: true,
        ..MatvecSpec::new(WeightType::Q4_1, Reduce::Subgroup)
    };
    assert!(matches!(
        kernel(blocked),
        Err(ShapeError::NotPowerOfTwo { value: 32, .. })
    ));
    let mut spec = MatvecSpec::new(WeightType::F32, Reduce::Shared);
    spec.workgroup = 48;
    assert!(matches!(
        kernel(spec),
        Err(ShapeError::NotPowerOfTwo { value: 48, .. })
    ));
}

/// Codes read as words give the bits of codes read byte by byte, for every segment length
/// (one, two and four words), fused or not, Q8_0's at both alignments (96 columns make
/// 102-byte rows, so every other row starts in the middle of a word) and up to the
/// buffer's last byte (9 rows of 102 bytes end mid-word); and a word view is only declared
/// where the scales have their f16 view (Q4_1 and Q8_0).
#[test]
fn word_codes_equal_byte_codes() {
    for (ty, cols, rows) in [
        (WeightType::Q4_1, 128, 10),
        (WeightType::Q8_0, 128, 10),
        (WeightType::Q8_0, 96, 9),
    ] {
        for (segment, prologue, epilogue) in [
            (8, Prologue::RmsNorm, Epilogue::Swiglu),
            (16, Prologue::None, Epilogue::Add),
            (32, Prologue::None, Epilogue::None),
        ] {
            let rows = if epilogue == Epilogue::Swiglu {
                10
            } else {
                rows
            };
            let bytes = MatvecSpec {
                rows_per_workgroup: 2,
                workgroup: 32,
                segment,
                f16_scales: true,
                prologue,
                epilogue,
                ..MatvecSpec::new(ty, Reduce::Subgroup)
            };
            let words = MatvecSpec {
                word_codes: true,
                ..bytes
            };
            assert_eq!(words.weights_elem(), Scalar::U32);
            let run = |spec| {
                let case = spec_case(spec, rows, cols, 2, 7).unwrap();
                let at = case.buffers.iter().position(|b| b.name == "y").unwrap();
                case.interpret().unwrap().swap_remove(at)
            };
            assert_eq!(run(words), run(bytes), "{ty} {cols} segment {segment}");
        }
    }
    for (ty, f16_scales) in [
        (WeightType::Q4_1, false),
        (WeightType::Q8_0, false),
        (WeightType::Q4_0, true),
    ] {
        let spec = MatvecSpec {
            word_codes: true,
            f16_scales,
            ..MatvecSpec::new(ty, Reduce::Subgroup)
        };
        assert_eq!(spec.weights_elem(), Scalar::U8, "{ty}");
    }
}

#[test]
fn reference_is_a_plain_dot_product() {
    // W = [[1, 2], [3, 4], [-1, 0.5]] in f16, x = [0.5, -1].
    let w = quantize(WeightType::F16, &[1.0, 2.0, 3.0, 4.0, -1.0, 0.5]).unwrap();
    let y = reference(WeightType::F16, &w, 3, 2, &[0.5, -1.0]).unwrap();
    assert_eq!(y, vec![-1.5, -2.5, -1.0]);
}
