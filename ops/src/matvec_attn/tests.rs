//! Unit tests of the fused products: each fused kernel gives the unfused kernels' bits on the
//! interpreter, wrong inputs fail their cases, bad shapes are typed errors.

use super::*;
use crate::attention_split;
use crate::case::{u32_bytes, Case};
use crate::key_layout::KeyLayout;
use crate::matvec::{MatvecSpec, Reduce};
use crate::matvec_fused::{Epilogue, Prologue};
use crate::rope::RopeMode;
use crate::rope_freqs::RopeFreqs;
use crate::rope_store::{self, RopeStore};
use crate::shape::ShapeError;
use crate::support::Float;
use trine_gguf::quant::WeightType;
use trine_ir::interp::interpret;
use trine_ir::ParamValue;

/// Whether the interpreter's run of `case` agrees with its plain-Rust reference.
fn passes(case: &Case) -> bool {
    case.check_reference().is_ok()
}

fn buffer<'a>(case: &'a mut Case, name: &str) -> &'a mut Vec<u8> {
    &mut case
        .buffers
        .iter_mut()
        .find(|b| b.name == name)
        .unwrap()
        .data
}

/// Runs `case`'s kernel (or `kernel`) on the interpreter over `bufs`, returning them.
fn run(
    kernel: &trine_ir::Kernel,
    grid: [u32; 3],
    mut bufs: Vec<Vec<u8>>,
    params: &[ParamValue],
) -> Vec<Vec<u8>> {
    interpret(kernel, grid, &mut bufs, params, 16).unwrap();
    bufs
}

/// The fused QKV product gives the bits of the normed product followed by the rope-store
/// kernel, on the interpreter, turning whole heads and their first half.
#[test]
fn rope_epilogue_equals_product_then_rope_store() {
    for rot_dim in [8, 4] {
        epilogue_equals_unfused(rot_dim);
    }
}

fn epilogue_equals_unfused(rot_dim: u32) {
    let spec = MatvecSpec {
        rows_per_workgroup: 2,
        workgroup: 32,
        ..MatvecSpec::new(WeightType::Q4_1, Reduce::Subgroup)
    };
    let shape = QkvRope {
        weights: WeightType::Q4_1,
        cols: 64,
        store: RopeStore {
            tokens: 3,
            heads: 4,
            kv_heads: 2,
            head_dim: 8,
            rot_dim,
            context: 10,
            mode: RopeMode::Normal,
            keys: KeyLayout::Rows,
            part: None,
        },
    };
    let case = rope_case(spec, shape, &rope_store::yarn(), 6, Float::F16).unwrap();
    let bufs: Vec<Vec<u8>> = case.buffers.iter().map(|b| b.data.clone()).collect();
    let fused = run(&case.kernel, case.grid, bufs.clone(), &case.params);

    let rows = shape.rows();
    let plain = MatvecSpec {
        prologue: Prologue::RmsNorm,
        ..spec
    };
    // w, x, g, then y.
    let qkv = run(
        &super::super::matvec::kernel(plain).unwrap(),
        plain.grid(rows, 3),
        vec![
            bufs[0].clone(),
            bufs[1].clone(),
            bufs[2].clone(),
            vec![0; (rows * 3 * 4) as usize],
        ],
        &case.params[..3],
    )
    .pop()
    .unwrap();
    // qkv, step, freq, then q and the caches.
    let unfused = run(
        &rope_store::kernel((8, rot_dim), RopeMode::Normal, Float::F16, KeyLayout::Rows).unwrap(),
        shape.store.grid(),
        vec![
            qkv,
            bufs[3].clone(),
            bufs[4].clone(),
            bufs[5].clone(),
            bufs[6].clone(),
            bufs[7].clone(),
        ],
        &shape.store.params(),
    );
    assert_eq!(fused[5], unfused[3], "q");
    assert_eq!(fused[6], unfused[4], "k_cache");
    assert_eq!(fused[7], unfused[5], "v_cache");
}

/// The fused output projection gives the bits of the combine kernel followed by the
/// product with the residual add, on the interpreter.
#[test]
fn combine_prologue_equals_combine_then_product() {
    let spec = MatvecSpec {
        rows_per_workgroup: 2,
        workgroup: 32,
        ..MatvecSpec::new(WeightType::Q4_1, Reduce::Subgroup)
    };
    let shape = CombineShape {
        heads: 3,
        head_dim: 32,
        splits: 4,
    };
    let (rows, tokens) = (10, 2);
    let case = combine_case(spec, shape, rows, tokens, 9).unwrap();
    let bufs: Vec<Vec<u8>> = case.buffers.iter().map(|b| b.data.clone()).collect();
    let fused = run(&case.kernel, case.grid, bufs.clone(), &case.params);

    let attn = shape.attention(tokens);
    let x = run(
        &attention_split::combine_kernel(32, 4).unwrap(),
        attn.combine_grid(),
        vec![bufs[1].clone(), vec![0; (tokens * 96 * 4) as usize]],
        &attn.combine_params(),
    )
    .pop()
    .unwrap();
    let plain = MatvecSpec {
        epilogue: Epilogue::Add,
        ..spec
    };
    let y = run(
        &super::super::matvec::kernel(plain).unwrap(),
        plain.grid(rows, tokens),
        vec![
            bufs[0].clone(),
            x,
            bufs[2].clone(),
            vec![0; (rows * tokens * 4) as usize],
        ],
        &case.params,
    );
    assert_eq!(fused[3], y[3]);
}

/// The cases can fail: another position, swapped q/k rows, a wrong split's maximum.
#[test]
fn wrong_inputs_fail() {
    let spec = MatvecSpec {
        rows_per_workgroup: 2,
        workgroup: 32,
        ..MatvecSpec::new(WeightType::Q4_1, Reduce::Shared)
    };
    let store = RopeStore {
        tokens: 2,
        heads: 2,
        kv_heads: 1,
        head_dim: 32,
        rot_dim: 32,
        context: 8,
        mode: RopeMode::Normal,
        keys: KeyLayout::Rows,
        part: None,
    };
    let shape = QkvRope {
        weights: WeightType::Q4_1,
        cols: 64,
        store,
    };
    let case = rope_case(spec, shape, &RopeFreqs::plain(10_000.0), 3, Float::F16).unwrap();
    assert!(passes(&case));
    let mut moved = case.clone();
    *buffer(&mut moved, "step") = u32_bytes(&[4]);
    assert!(!passes(&moved));

    let shape = CombineShape {
        heads: 2,
        head_dim: 32,
        splits: 3,
    };
    let case = combine_case(spec, shape, 6, 1, 7).unwrap();
    assert!(passes(&case));
    let mut bent = case.clone();
    let part = buffer(&mut bent, "part");
    // Head 1's second split: its maximum raised by 2, as a combine that mixed up the
    // splits' (m, l) pairs would weigh it.
    let (head, split) = (1, 1);
    let at = ((head * 3 + split) * 34 + 32) * 4;
    let m = f32::from_le_bytes(part[at..at + 4].try_into().unwrap()) + 2.0;
    part[at..at + 4].copy_from_slice(&m.to_le_bytes());
    assert!(!passes(&bent));
}

#[test]
fn bad_shapes_are_typed_errors() {
    let spec = MatvecSpec {
        epilogue: Epilogue::RopeStore(RopeShape {
            head_dim: 7,
            rot_dim: 6,
            kv: Float::F16,
            keys: KeyLayout::Rows,
        }),
        ..MatvecSpec::new(WeightType::Q4_1, Reduce::Shared)
    };
    assert!(matches!(
        super::super::matvec::kernel(spec),
        Err(ShapeError::NotMultiple { value: 7, .. })
    ));
    let spec = MatvecSpec {
        epilogue: Epilogue::RopeStore(RopeShape {
            head_dim: 8,
            rot_dim: 8,
            kv: Float::F16,
            keys: KeyLayout::Rows,
        }),
        rows_per_workgroup: 3,
        ..spec
    };
    assert!(matches!(
        super::super::matvec::kernel(spec),
        Err(ShapeError::NotMultiple { value: 3, .. })
    ));
    let shape = CombineShape {
        heads: 2,
        head_dim: 32,
        splits: 0,
    };
    assert!(matches!(
        combine_case(
            MatvecSpec::new(WeightType::Q4_1, Reduce::Shared),
            shape,
            4,
            1,
            0
        ),
        Err(ShapeError::Zero { .. })
    ));
    // The combine's weights do not fit the smallest device's shared memory.
    let spec = MatvecSpec {
        prologue: Prologue::Combine(CombineShape {
            heads: 4096,
            head_dim: 64,
            splits: 8,
        }),
        ..MatvecSpec::new(WeightType::Q4_1, Reduce::Shared)
    };
    assert!(matches!(
        super::super::matvec::kernel(spec),
        Err(ShapeError::TooLarge { .. })
    ));
}
