//! The experts' products' ([`TilesSpec::experts`]) reference and conformance cases: a prompt's
//! routing drawn at random, listed by expert as [`crate::moe_sort`] lists it, and each pair's
//! row of y from its expert's matrix.

use super::{check_experts, kernel, BlockSize, Staging, TilesSpec, NMSE, OP};
use crate::blocks;
use crate::case::*;
use crate::moe_sort::{self, MoeSort};
use crate::shape::ShapeError;
use crate::support::expect_len;
use half::f16;
use trine_gguf::quant::{dequantize, quantize, WeightType};
use trine_ir::{ParamValue, Scalar};

/// One experts' product: `rows` rows of each of `experts` matrices over the `tokens·used`
/// pairs of a prompt, x's rows serving `per_x` pairs each.
#[derive(Clone, Copy, Debug)]
pub struct ExpertsShape {
    pub rows: u32,
    pub cols: u32,
    pub tokens: u32,
    pub experts: u32,
    pub used: u32,
    pub per_x: u32,
}

impl ExpertsShape {
    fn check(&self) -> Result<(), ShapeError> {
        check_experts(
            (self.rows, self.cols, self.tokens),
            (self.experts, self.used, self.per_x),
        )
    }

    fn x_rows(&self) -> u32 {
        self.tokens * self.used / self.per_x
    }
}

/// y `[pairs × rows]` in f64: pair `p`'s row from the matrix of its expert `ids[p]` and x's
/// row `p / per_x`, x and W rounded to f16 as the kernel stages them.
pub fn reference(
    ty: WeightType,
    w: &[u8],
    x: &[f32],
    ids: &[u32],
    s: ExpertsShape,
) -> Result<Vec<f64>, ShapeError> {
    s.check()?;
    let (r, c) = (s.rows as usize, s.cols as usize);
    let pairs = (s.tokens * s.used) as usize;
    expect_len(OP, "ids", pairs, ids.len())?;
    expect_len(OP, "x", s.x_rows() as usize * c, x.len())?;
    let wd: Vec<f64> = dequantize(ty, w, s.experts as usize * r * c)?
        .into_iter()
        .map(|v| f16::from_f64(v).to_f64())
        .collect();
    let xd: Vec<f64> = x.iter().map(|&v| f16::from_f32(v).to_f64()).collect();
    let mut y = vec![0f64; pairs * r];
    for (p, out) in y.chunks_mut(r).enumerate() {
        let e = crate::moe_sort::expert(OP, ids[p], s.experts)?;
        let xs = &xd[p / s.per_x as usize * c..][..c];
        for (row, v) in out.iter_mut().enumerate() {
            let ws = &wd[(e * r + row) * c..][..c];
            *v = xs.iter().zip(ws).map(|(a, b)| a * b).sum();
        }
    }
    Ok(y)
}

/// A conformance case of W of `ty` on subgroups of 32 in `block`: into the whole of y, or
/// (`part`: y's rows per pair and the first written) into a part of each pair's row, the rest
/// staying zero. x is f32, or with `half` f16 (as the executor rounds it before an experts'
/// product on tiles), staged as it says: put, with the scalar variant as the fallback (and so
/// with f32 x), or f16 blocks copied or on warpgroup products (the large block), with the
/// tiles put as the fallback.
pub fn case(
    ty: WeightType,
    s: ExpertsShape,
    block: BlockSize,
    part: Option<(u32, u32)>,
    half: Option<Staging>,
) -> Result<Case, ShapeError> {
    s.check()?;
    let name = format!(
        "{OP}/{}{}/experts/{}x{}/t{}e{}k{}/x{}{}{}{}",
        if half.is_some() { "f16x" } else { "" },
        ty.name(),
        s.rows,
        s.cols,
        s.tokens,
        s.experts,
        s.used,
        s.per_x,
        match block {
            BlockSize::Small => "",
            BlockSize::Medium => "/medium",
            BlockSize::Large => "/large",
        },
        part.map_or(String::new(), |(y_rows, first)| format!(
            "/rows{first}of{y_rows}"
        )),
        half.map_or("", Staging::suffix),
    );
    let mut rng = Rng::new(crate::support::seed(&name));
    let (r, c) = (s.rows as usize, s.cols as usize);
    let w = quantize(ty, &rng.f32s(s.experts as usize * r * c, -1.0, 1.0))?;
    let x = rng.f32s(s.x_rows() as usize * c, -1.0, 1.0);
    let x_bytes = match half {
        Some(_) => f16_bytes(&x.iter().map(|&v| f16::from_f32(v)).collect::<Vec<_>>()),
        None => f32_bytes(&x),
    };
    let sort = MoeSort {
        tokens: s.tokens,
        experts: s.experts,
        used: s.used,
    };
    let moe_sort::Sorted { ids, counts, lists } = moe_sort::drawn(&mut rng, &sort)?;
    let full = reference(ty, &w, &x, &ids, s)?;
    let (width, first) = part.unwrap_or((s.rows, 0));
    if first + s.rows > width {
        return Err(ShapeError::Unsupported {
            op: OP,
            what: format!("rows {first}..{} of {width} as a part", first + s.rows),
        });
    }
    let mut want = vec![0f64; full.len() / r * width as usize];
    for (out, row) in want.chunks_mut(width as usize).zip(full.chunks(r)) {
        out[first as usize..][..r].copy_from_slice(row);
    }
    let spec = TilesSpec {
        weights: ty,
        add: false,
        tiles: Some(32),
        block,
        depth: TilesSpec::depth_for(s.cols),
        copies: false,
        half_x: half.is_some(),
        glu: None,
        group: false,
        part: part.is_some(),
        experts: true,
        split: false,
        half_y: false,
    };
    let (fallback, spec) = super::cases::staged(spec, half.unwrap_or(Staging::Put))?;
    let params = |spec: &TilesSpec| {
        let mut p = match part {
            Some(yp) => spec.part_params((s.rows, s.cols, s.tokens), yp),
            None => spec.params(s.rows, s.cols, s.tokens),
        };
        p.push(ParamValue::U32(s.per_x));
        p
    };
    let grid = |spec: &TilesSpec| spec.experts_grid(s.rows, s.tokens, s.experts);
    Ok(Case::new(name, kernel(spec)?, grid(&spec))
        .input("w", spec.w_elem(), blocks::pad_to_words(w))
        .input("x", spec.x_elem(), x_bytes)
        .input("counts", Scalar::U32, u32_bytes(&counts))
        .input("lists", Scalar::U32, u32_bytes(&lists))
        .output("y", Scalar::F32, vec![0; want.len() * 4], want)
        .params(params(&spec))
        .bound(NMSE)
        .fallback_on(kernel(fallback)?, grid(&fallback)))
}

/// Qwen3-MoE's products in small: the gate and up halves of a pair's row over the tokens'
/// x (Q4_K), down over the pairs' own rows (Q6_K); flat formats with experts holding more
/// pairs than a block has tokens and one holding none; f16 weights, with f32 x and with f16
/// x put and copied; the medium block; the large block on warpgroup products; the K-quants
/// with f16 x, as the executor runs a prompt's experts.
pub fn cases() -> Vec<Case> {
    let shape = |rows, cols, tokens, experts, used, per_x| ExpertsShape {
        rows,
        cols,
        tokens,
        experts,
        used,
        per_x,
    };
    let (small, medium, large) = (BlockSize::Small, BlockSize::Medium, BlockSize::Large);
    let halves = [0, 72].map(|first| {
        let shape = shape(72, 256, 20, 8, 2, 2);
        (WeightType::Q4_K, shape, small, Some((144, first)))
    });
    // The executor's experts on a prompt: the file's blocks staged by units with f16 x, gate
    // and up as parts of each pair's row (on warpgroup products, rows and pairs past a block),
    // down whole on the medium block (Q5_K's units; Q6_K's runs); Q6_K on warpgroup products,
    // as a file of Q6_K experts runs its gate and up.
    let staged = [
        (
            WeightType::Q4_K,
            shape(136, 256, 200, 4, 2, 2),
            Some((272, 136)),
            Staging::Group,
            large,
        ),
        (
            WeightType::Q4_K,
            shape(72, 512, 20, 8, 2, 2),
            Some((144, 0)),
            Staging::Put,
            medium,
        ),
        (
            WeightType::Q5_K,
            shape(72, 512, 30, 8, 2, 1),
            None,
            Staging::Put,
            medium,
        ),
        (
            WeightType::Q6_K,
            shape(40, 256, 30, 8, 2, 1),
            None,
            Staging::Put,
            medium,
        ),
        (
            WeightType::Q6_K,
            shape(136, 256, 200, 4, 2, 1),
            None,
            Staging::Group,
            large,
        ),
    ]
    .map(|(ty, shape, part, staging, block)| case(ty, shape, block, part, Some(staging)));
    // f16 weights and f16 x, gate/up as parts, down whole.
    let widened = [
        (
            shape(72, 256, 20, 8, 2, 2),
            Some((144, 72)),
            Staging::Put,
            small,
        ),
        (
            shape(72, 256, 20, 8, 2, 2),
            Some((144, 0)),
            Staging::Copies,
            medium,
        ),
        (shape(40, 128, 30, 8, 2, 1), None, Staging::Copies, medium),
        (shape(40, 128, 30, 8, 2, 1), None, Staging::Put, medium),
        (
            shape(72, 256, 20, 8, 2, 2),
            Some((144, 72)),
            Staging::Group,
            large,
        ),
        // Experts of more pairs than a block has tokens, rows past one block.
        (shape(136, 192, 200, 4, 2, 1), None, Staging::Group, large),
    ]
    .map(|(shape, part, staging, block)| case(WeightType::F16, shape, block, part, Some(staging)));
    let whole = [
        (WeightType::Q6_K, shape(40, 256, 20, 8, 2, 1), small),
        (WeightType::Q8_0, shape(96, 64, 70, 4, 2, 2), small),
        (WeightType::Q4_0, shape(40, 96, 9, 16, 1, 1), small),
        (WeightType::F16, shape(48, 64, 40, 3, 2, 2), small),
        (WeightType::Q4_1, shape(80, 128, 90, 2, 1, 1), medium),
    ]
    .map(|(ty, shape, block)| (ty, shape, block, None));
    let out = halves
        .into_iter()
        .chain(whole)
        .map(|(ty, shape, block, part)| case(ty, shape, block, part, None))
        .chain(widened)
        .chain(staged);
    out.collect::<Result<_, _>>()
        .expect("the fixed shapes are valid")
}
