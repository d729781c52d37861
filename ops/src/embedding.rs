//! Embedding lookup: `out[t] = table[ids[t]]`, rows of a `[vocab × dim]` table in f32, f16,
//! Q8_0, Q4_0 or Q4_1 (dequantised in the kernel), written as f32. One invocation per output
//! element; an id outside the table gives a row of NaN rather than a read outside the buffer
//! ([`check_ids`] is the typed check for callers that want an error instead).
//!
//! Bound: [`NMSE_DEFAULT`]. Each output is one table element, converted exactly (f16 → f32,
//! d·q of an f16 and a small integer) or with one f32 rounding (Q4_1's d·q + m), so the
//! kernel is within 2^-24 relative of the exact reference, while a single wrong element costs
//! about 1/(elements compared), at least 2e-4 in these cases.

use super::shape::ShapeError;
use crate::blocks::{self, BlockFormat};
use crate::case::*;
use trine_gguf::quant::{dequantize, quantize, WeightType};
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar};

const OP: &str = "embedding";

/// Invocations per workgroup, along the row.
const WG: u32 = 128;

/// Checks that the table (`table_bytes` bytes) holds `vocab × dim` elements of type `ty`,
/// that there are ids, and that every index fits the kernel's u32 arithmetic.
pub fn check_shapes(
    ty: WeightType,
    vocab: usize,
    dim: usize,
    table_bytes: usize,
    n_ids: usize,
) -> Result<(), ShapeError> {
    for (what, v) in [("vocab", vocab), ("dim", dim), ("ids", n_ids)] {
        if v == 0 {
            return Err(ShapeError::Zero { op: OP, what });
        }
    }
    let needed = ty.bytes(OP, "dim", dim)? as u128 * vocab as u128;
    let out = n_ids as u128 * dim as u128;
    for (what, v) in [("table bytes", needed), ("output elements", out)] {
        if v > u128::from(u32::MAX) {
            return Err(ShapeError::TooLarge {
                op: OP,
                what,
                value: usize::try_from(v).unwrap_or(usize::MAX),
                limit: u32::MAX as usize,
            });
        }
    }
    if table_bytes < needed as usize {
        return Err(ShapeError::TooSmall {
            op: OP,
            what: "table bytes",
            needed: needed as usize,
            found: table_bytes,
        });
    }
    Ok(())
}

/// Checks that every id selects a row of the table.
pub fn check_ids(ids: &[u32], vocab: usize) -> Result<(), ShapeError> {
    match ids.iter().find(|&&id| id as usize >= vocab) {
        Some(&id) => Err(ShapeError::OutOfRange {
            op: OP,
            what: "token id",
            value: id as usize,
            bound: vocab,
        }),
        None => Ok(()),
    }
}

/// The selected rows in f64, exactly dequantised; an id outside the table gives a NaN row,
/// as the kernel does.
pub fn reference(
    ty: WeightType,
    table: &[u8],
    vocab: usize,
    dim: usize,
    ids: &[u32],
) -> Result<Vec<f64>, ShapeError> {
    check_shapes(ty, vocab, dim, table.len(), ids.len())?;
    let row_bytes = ty.bytes(OP, "dim", dim)?;
    let mut out = Vec::with_capacity(ids.len() * dim);
    for &id in ids {
        let id = id as usize;
        if id < vocab {
            out.extend(dequantize(ty, &table[id * row_bytes..], dim)?);
        } else {
            out.extend(std::iter::repeat_n(f64::NAN, dim));
        }
    }
    Ok(out)
}

/// The lookup kernel for tables of type `ty`. Buffers `ids` (u32), `table`, `out` (f32);
/// parameters n_ids, dim, vocab; grid [`grid`].
pub fn kernel(ty: WeightType) -> Kernel {
    build(ty, false)
}

/// [`kernel`] with each row multiplied by a parameter after it (Gemma scales its embeddings
/// by `sqrt(n_embd)`, llama.cpp's `ggml_scale` after the lookup): parameters n_ids, dim,
/// vocab, scale.
pub fn scaled_kernel(ty: WeightType) -> Kernel {
    build(ty, true)
}

fn build(ty: WeightType, scaled: bool) -> Kernel {
    let name = if scaled {
        format!("embedding_scaled_{ty}")
    } else {
        format!("embedding_{ty}")
    };
    let k = KernelBuilder::new(&name, [WG, 1, 1]);
    let ids = k.buffer("ids", Scalar::U32, Access::Read);
    let table = k.buffer("table", blocks::buffer_elem(ty), Access::Read);
    let out = k.buffer("out", Scalar::F32, Access::Write);
    let n_ids = k.param("n_ids", Scalar::U32);
    let dim = k.param("dim", Scalar::U32);
    let vocab = k.param("vocab", Scalar::U32);
    let scale = scaled.then(|| k.param("scale", Scalar::F32));
    let c = k.global_id(0);
    let t = k.global_id(1);
    k.if_(c.lt(dim) & t.lt(n_ids), || {
        let id = k.load(ids, t);
        let v = k.var("v", Scalar::F32);
        v.set(k.f32(f32::NAN));
        k.if_(id.lt(vocab), || {
            if let Some(f) = BlockFormat::of(ty) {
                let qk = k.u32(f.elems());
                let block = id * (dim / qk) + c / qk;
                let base = block * k.u32(f.bytes());
                v.set(f.element(&k, table, base, c % qk));
            } else {
                v.set(k.load(table, id * dim + c).cast(Scalar::F32));
            }
        });
        let row = match scale {
            Some(s) => v.get() * s,
            None => v.get(),
        };
        k.store(out, t * dim + c, row);
    });
    k.finish()
}

/// One workgroup per `WG` elements of a row, one row of workgroups per id.
pub fn grid(dim: u32, n_ids: u32) -> [u32; 3] {
    [dim.div_ceil(WG), n_ids, 1]
}

/// A conformance case looking up `ids` in a table whose selected rows hold random values in
/// ±`scale`, quantized with ggml's reference quantizers. The other rows are zero: a kernel that
/// reads a wrong row still fails, and a large table costs no time to build.
pub fn case(
    ty: WeightType,
    vocab: u32,
    dim: u32,
    ids: &[u32],
    scale: f32,
    seed: u64,
) -> Result<Case, ShapeError> {
    let (v, d) = (vocab as usize, dim as usize);
    let row_bytes = ty.bytes(OP, "dim", d)?;
    check_shapes(ty, v, d, row_bytes.saturating_mul(v), ids.len())?;
    let mut rng = Rng::new(seed);
    let mut table = quantize(ty, &vec![0.0; d])?.repeat(v);
    for &id in ids.iter().filter(|&&id| id < vocab) {
        let row = quantize(ty, &rng.f32s(d, -scale, scale))?;
        let at = id as usize * row_bytes;
        table[at..at + row_bytes].copy_from_slice(&row);
    }
    let want = reference(ty, &table, v, d, ids)?;
    let mut name = format!("{OP}/{ty}/{vocab}x{dim}/ids{}", ids.len());
    if scale < 1.0 {
        name.push_str("/tiny");
    }
    let n_ids = ids.len() as u32;
    Ok(Case::new(name, kernel(ty), grid(dim, n_ids))
        .input("ids", Scalar::U32, u32_bytes(ids))
        .input(
            "table",
            blocks::buffer_elem(ty),
            blocks::pad_to_words(table),
        )
        .output("out", Scalar::F32, vec![0; ids.len() * d * 4], want)
        .params(vec![
            ParamValue::U32(n_ids),
            ParamValue::U32(dim),
            ParamValue::U32(vocab),
        ]))
}

/// For every type: a small odd table with an out-of-range id (a NaN row) and a repeated id, a
/// tiny-valued table (subnormal f16 values and scales), and a handful of ids, first and last
/// rows included, in a table of SmolLM2-135M's width: its whole 49152-token vocabulary for
/// Q8_0 (its token_embd) and Q4_1 (its other weights), 4096 tokens for the rest, to keep the
/// suite's memory small.
pub fn cases() -> Vec<Case> {
    let mut v = vec![];
    for (i, ty) in blocks::weight_types().enumerate() {
        let seed = 3000 + 10 * i as u64;
        let dim = if ty.is_quantized() {
            blocks::whole_blocks(ty, 96)
        } else {
            37
        };
        v.push(case(ty, 11, dim, &[3, 0, 10, 11, 3], 1.0, seed));
        v.push(case(ty, 5, dim, &[4, 1, 2], 1e-4, seed + 1));
        let vocab = match ty {
            WeightType::Q8_0 | WeightType::Q4_1 => 49152,
            _ => 4096,
        };
        let ids = [1, 0, vocab - 1, 9906 % vocab, 1722, 30000 % vocab, 2];
        v.push(case(
            ty,
            vocab,
            blocks::whole_blocks(ty, 576),
            &ids,
            1.0,
            seed + 2,
        ));
    }
    v.push(scaled_case());
    v.into_iter()
        .map(|c| c.expect("the listed shapes are valid"))
        .collect()
}

/// [`scaled_kernel`] on Gemma 3 270M's table (Q8_0, 640 wide) scaled by `sqrt(640)`, its
/// first and last ids among a few of a 4096-row table.
pub fn scaled_case() -> Result<Case, ShapeError> {
    let (ty, vocab, dim) = (WeightType::Q8_0, 4096u32, 640u32);
    let ids = [2, 0, vocab - 1, 1722, 2];
    let scale = (dim as f32).sqrt();
    let plain = case(ty, vocab, dim, &ids, 1.0, 3999)?;
    let table = plain.buffers[1].data.clone();
    let want = reference(ty, &table, vocab as usize, dim as usize, &ids)?
        .iter()
        .map(|v| v * f64::from(scale))
        .collect();
    let n_ids = ids.len() as u32;
    Ok(Case::new(
        format!("{OP}/scaled/{ty}/{vocab}x{dim}/ids{n_ids}"),
        scaled_kernel(ty),
        grid(dim, n_ids),
    )
    .input("ids", Scalar::U32, u32_bytes(&ids))
    .input("table", blocks::buffer_elem(ty), table)
    .output(
        "out",
        Scalar::F32,
        vec![0; ids.len() * dim as usize * 4],
        want,
    )
    .params(vec![
        ParamValue::U32(n_ids),
        ParamValue::U32(dim),
        ParamValue::U32(vocab),
        ParamValue::F32(scale),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_and_ids_are_checked() {
        assert_eq!(check_shapes(WeightType::Q4_0, 4, 64, 144, 1), Ok(()));
        assert_eq!(
            check_shapes(WeightType::Q4_0, 4, 64, 143, 1),
            Err(ShapeError::TooSmall {
                op: OP,
                what: "table bytes",
                needed: 144,
                found: 143
            })
        );
        assert!(matches!(
            check_shapes(WeightType::Q8_0, 4, 65, 1000, 1),
            Err(ShapeError::NotMultiple { value: 65, .. })
        ));
        assert!(matches!(
            check_shapes(WeightType::F32, 4, 8, 128, 0),
            Err(ShapeError::Zero { what: "ids", .. })
        ));
        assert!(matches!(
            check_shapes(WeightType::F32, 1 << 20, 1 << 10, usize::MAX, 1),
            Err(ShapeError::TooLarge {
                what: "table bytes",
                ..
            })
        ));
        assert_eq!(check_ids(&[0, 3], 4), Ok(()));
        assert_eq!(
            check_ids(&[0, 4], 4),
            Err(ShapeError::OutOfRange {
                op: OP,
                what: "token id",
                value: 4,
                bound: 4
            })
        );
    }

    #[test]
    fn reference_selects_rows() {
        let table = quantize(WeightType::F32, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        let out = reference(WeightType::F32, &table, 3, 2, &[2, 0, 3]).unwrap();
        assert_eq!(&out[..4], &[5.0, 6.0, 1.0, 2.0]);
        assert!(out[4].is_nan() && out[5].is_nan());
    }
}
