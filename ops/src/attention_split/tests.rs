//! Unit tests of split attention: split then combine is attention, on the interpreter and the
//! CPU backend; empty splits; the windowed reference; bad shapes are typed errors.

use super::cases::{inputs, Inputs};
use super::*;
use crate::attention;
use crate::case::{f32_bytes, u32_bytes};
use crate::compare::nmse;
use crate::key_layout::KeyLayout;
use crate::kv_type::KvType;
use crate::shape::ShapeError;
use crate::support::Reduction;
use trine_backends::{Backend, BackendKind, Binding, Dispatch};
use trine_ir::interp::interpret;
use trine_ir::{Kernel, ParamValue};

/// Shapes for the chained runs: decode and prefill, more splits than keys, one split, a
/// head dimension above the workgroup.
fn chained_shapes() -> Vec<(SplitAttention, u32, KvType)> {
    let s = |tokens, head_dim, splits| SplitAttention {
        tokens,
        heads: 4,
        kv_heads: 2,
        head_dim,
        splits,
    };
    vec![
        (s(1, 16, 1), 0, KvType::F32),
        (s(1, 16, 8), 2, KvType::F16),
        (s(1, 16, 3), 70, KvType::F32),
        (s(1, 80, 4), 41, KvType::F16),
        (s(4, 16, 1), 5, KvType::F32),
        (s(4, 16, 3), 5, KvType::F16),
    ]
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytemuck::cast_slice(bytes).to_vec()
}

/// Split then combine, on the interpreter.
fn interpreted(shape: &SplitAttention, pos: u32, kv: KvType, x: &Inputs) -> Vec<f32> {
    let part_len = shape.check().unwrap() as usize;
    let mut b = vec![
        f32_bytes(&x.q),
        u32_bytes(&[pos]),
        kv.bytes(&x.k),
        kv.bytes(&x.v),
        vec![0; part_len * 4],
    ];
    let split = split_kernel(shape.head_dim, kv, Reduction::Shared, KeyLayout::Rows).unwrap();
    interpret(&split, shape.grid(), &mut b, &shape.params(), 16).unwrap();
    let mut c = vec![b.pop().unwrap(), vec![0; x.q.len() * 4]];
    let combine = combine_kernel(shape.head_dim, shape.splits).unwrap();
    interpret(
        &combine,
        shape.combine_grid(),
        &mut c,
        &shape.combine_params(),
        16,
    )
    .unwrap();
    f32s(&c[1])
}

/// Split then combine on `backend`, `part` staying on the device between the dispatches.
fn on_backend(
    backend: &dyn Backend,
    shape: &SplitAttention,
    pos: u32,
    kv: KvType,
    x: &Inputs,
) -> Vec<f32> {
    let part_len = shape.check().unwrap() as u64 * 4;
    let datas = [
        f32_bytes(&x.q),
        u32_bytes(&[pos]),
        kv.bytes(&x.k),
        kv.bytes(&x.v),
        vec![0; part_len as usize],
        vec![0; x.q.len() * 4],
    ];
    let b: Vec<Binding> = datas
        .iter()
        .map(|d| {
            let buffer = backend.alloc(d.len() as u64).unwrap();
            backend.write(buffer, 0, d).unwrap();
            Binding {
                buffer,
                offset: 0,
                size: d.len() as u64,
            }
        })
        .collect();
    let run = |kernel: Kernel, grid, bindings: &[Binding], params: &[ParamValue]| {
        let program = backend.compile(&kernel).unwrap();
        backend
            .dispatch(&Dispatch {
                program,
                grid,
                bindings,
                params,
            })
            .unwrap();
    };
    run(
        split_kernel(shape.head_dim, kv, Reduction::Shared, KeyLayout::Rows).unwrap(),
        shape.grid(),
        &b[..5],
        &shape.params(),
    );
    run(
        combine_kernel(shape.head_dim, shape.splits).unwrap(),
        shape.combine_grid(),
        &b[4..],
        &shape.combine_params(),
    );
    backend.synchronize().unwrap();
    let mut out = vec![0; x.q.len() * 4];
    backend.read(b[5].buffer, 0, &mut out).unwrap();
    for binding in b {
        backend.free(binding.buffer);
    }
    f32s(&out)
}

fn expected(shape: &SplitAttention, pos: u32, x: &Inputs) -> Vec<f64> {
    attention::reference(&shape.attention(x.kv_len, pos), &x.q, &x.k, &x.v).unwrap()
}

fn as_f64(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

#[test]
fn split_then_combine_is_attention_on_the_interpreter() {
    for (shape, pos, kv) in chained_shapes() {
        let x = inputs(&shape, pos, kv).unwrap();
        let got = interpreted(&shape, pos, kv, &x);
        let e = nmse(&expected(&shape, pos, &x), &as_f64(&got)).unwrap();
        assert!(e < 1e-12, "{}: NMSE {e:e}", x.shape_name);
    }
}

#[test]
fn split_then_combine_is_attention_on_the_cpu_backend() {
    let cpu = trine_backends::open(BackendKind::Cpu).unwrap();
    for (shape, pos, kv) in chained_shapes() {
        let x = inputs(&shape, pos, kv).unwrap();
        let got = on_backend(cpu.as_ref(), &shape, pos, kv, &x);
        let e = nmse(&expected(&shape, pos, &x), &as_f64(&got)).unwrap();
        assert!(e < 1e-12, "{}: NMSE {e:e}", x.shape_name);
    }
}

#[test]
fn combined_reference_partials_are_attention() {
    for (shape, pos, kv) in chained_shapes() {
        let x = inputs(&shape, pos, kv).unwrap();
        let part = reference_split(&shape, x.kv_len, pos, &x.q, &x.k, &x.v).unwrap();
        let part: Vec<f32> = part.into_iter().map(|v| v as f32).collect();
        let got = reference_combine(&shape, &part).unwrap();
        let e = nmse(&expected(&shape, pos, &x), &got).unwrap();
        assert!(e < 1e-12, "{}: NMSE {e:e}", x.shape_name);
    }
}

#[test]
fn empty_splits_are_zero_with_minus_infinite_maximum() {
    // Position 0, one key, three splits of one key each: splits 1 and 2 see nothing.
    let shape = SplitAttention {
        tokens: 1,
        heads: 1,
        kv_heads: 1,
        head_dim: 1,
        splits: 3,
    };
    let part = reference_split(&shape, 2, 0, &[1.0], &[2.0, 9.0], &[5.0, 7.0]).unwrap();
    let inf = f64::NEG_INFINITY;
    assert_eq!(part, vec![5.0, 2.0, 1.0, 0.0, inf, 0.0, 0.0, inf, 0.0]);
    let part: Vec<f32> = part.iter().map(|&v| v as f32).collect();
    assert_eq!(reference_combine(&shape, &part).unwrap(), vec![5.0]);
}

#[test]
fn bad_shapes_are_typed_errors() {
    let s = SplitAttention {
        tokens: 2,
        heads: 9,
        kv_heads: 2,
        head_dim: 64,
        splits: 4,
    };
    assert!(matches!(s.check(), Err(ShapeError::NotMultiple { .. })));
    let s = SplitAttention { kv_heads: 3, ..s };
    assert_eq!(
        SplitAttention { splits: 0, ..s }.check(),
        Err(ShapeError::Zero {
            op: OP,
            what: "splits"
        })
    );
    assert!(matches!(
        SplitAttention {
            splits: u32::MAX,
            ..s
        }
        .check(),
        Err(ShapeError::TooLarge { .. })
    ));
    assert!(matches!(
        split_kernel(
            attention::MAX_HEAD_DIM + 1,
            KvType::F32,
            Reduction::Shared,
            KeyLayout::Rows
        ),
        Err(ShapeError::TooLarge { .. })
    ));
    assert!(matches!(combine_kernel(0, 1), Err(ShapeError::Zero { .. })));
    assert!(matches!(
        combine_kernel(64, 0),
        Err(ShapeError::Zero { what: "splits", .. })
    ));
    let (q, cache) = (vec![0.0; 2 * 9 * 64], vec![0.0; 3 * 3 * 64]);
    // Position 2 with two tokens needs four cache positions.
    assert!(matches!(
        reference_split(&s, 3, 2, &q, &cache, &cache),
        Err(ShapeError::TooLarge { .. })
    ));
    assert!(matches!(
        reference_split(&s, 3, 1, &q[1..], &cache, &cache),
        Err(ShapeError::Mismatch { .. })
    ));
    assert!(reference_split(&s, 3, 1, &q, &cache, &cache).is_ok());
    assert!(matches!(
        reference_combine(&s, &[0.0; 5]),
        Err(ShapeError::Mismatch { .. })
    ));
}

/// Through a window of 1 each query sees its own key alone, so the combined attention is that
/// position's value row, whatever the scores; a window covering the cache changes nothing.
#[test]
fn windowed_reference_by_hand() {
    let shape = SplitAttention {
        tokens: 3,
        heads: 2,
        kv_heads: 1,
        head_dim: 4,
        splits: 2,
    };
    let (pos, kv_len) = (2, 5);
    let q: Vec<f32> = (0..24).map(|i| (i % 7) as f32 - 3.0).collect();
    let k: Vec<f32> = (0..20).map(|i| (i % 5) as f32 * 0.5).collect();
    let v: Vec<f32> = (0..20).map(|i| i as f32).collect();
    let part = reference_split_windowed(&shape, kv_len, pos, Some(1), &q, &k, &v).unwrap();
    let part: Vec<f32> = part.iter().map(|&x| x as f32).collect();
    let out = reference_combine(&shape, &part).unwrap();
    for t in 0..3 {
        for h in 0..2 {
            let row = &out[(t * 2 + h) * 4..][..4];
            let own = &v[(pos as usize + t) * 4..][..4];
            assert!(
                row.iter().zip(own).all(|(&a, &b)| a == f64::from(b)),
                "{t} {h}"
            );
        }
    }
    let wide = reference_split_windowed(&shape, kv_len, pos, Some(100), &q, &k, &v).unwrap();
    assert_eq!(
        wide,
        reference_split(&shape, kv_len, pos, &q, &k, &v).unwrap()
    );
}
