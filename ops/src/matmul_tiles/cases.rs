//! The tiled product's conformance cases: random weights and inputs for each way of staging
//! the blocks, with the fallback each runs where a device lacks a feature.

use super::{check, kernel, reference, reference_split, BlockSize, TilesSpec, NMSE, OP};
use crate::blocks;
use crate::case::*;
use crate::elementwise::Glu;
use crate::shape::ShapeError;
use crate::support::{multiple_of, Float};
use half::f16;
use trine_gguf::quant::{quantize, WeightType};
use trine_ir::Scalar;

/// The subgroup width of the cases' tiled kernels: NVIDIA's, the only matrix units measured.
/// A device of another width runs their scalar fallback.
const CASE_SUBGROUP: u32 = 32;

/// A conformance case: W of `ty` with values in [-1, 1), x in [-1, 1), a residual in [-2, 2)
/// with `add`; the tiled kernel with the block the executor would pick, with the scalar
/// variant as its fallback.
pub fn case(
    ty: WeightType,
    (rows, cols, tokens): (u32, u32, u32),
    add: bool,
) -> Result<Case, ShapeError> {
    let block = BlockSize::for_product(rows, tokens, false);
    case_in(
        ty,
        (rows, cols, tokens),
        add,
        (block, Staging::Put, Float::F32),
    )
}

/// How a case's kernel stages its blocks and multiplies them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Staging {
    /// Loaded and put by the invocations; the scalar variant is the fallback.
    Put,
    /// f16 blocks copied asynchronously ([`TilesSpec::copied`]); the fallback is the tiled
    /// kernel without copies, where a device lacks them (a device without tiles skips the
    /// case).
    Copies,
    /// Multiplied by warpgroup products ([`TilesSpec::grouped`]), f16 weights (and f16 x)
    /// copied; the fallback is the tiled kernel without copies. Only where the spec has such
    /// a variant.
    Group,
}

impl Staging {
    /// What a case's name says of its staging.
    pub(super) fn suffix(self) -> &'static str {
        match self {
            Staging::Put => "",
            Staging::Copies => "/copies",
            Staging::Group => "/group",
        }
    }

    /// How the executor would stage a product of W of `ty`, `cols` wide, on `block` with x
    /// stored as `xf`, on a device with every feature: on warpgroup products where the block
    /// allows, else copying f16 weights, else putting.
    pub fn best(ty: WeightType, cols: u32, block: BlockSize, xf: Float) -> Staging {
        let spec = case_spec(ty, cols, (false, None), (block, xf));
        if spec.copied().grouped().group {
            Staging::Group
        } else if spec.copied().copies {
            Staging::Copies
        } else {
            Staging::Put
        }
    }
}

/// The tiled kernel a case of W of `ty`, `cols` wide, runs before its staging is chosen.
fn case_spec(
    ty: WeightType,
    cols: u32,
    (add, glu): (bool, Option<Glu>),
    (block, xf): (BlockSize, Float),
) -> TilesSpec {
    TilesSpec {
        weights: ty,
        add,
        tiles: Some(CASE_SUBGROUP),
        block,
        depth: TilesSpec::depth_for(cols),
        copies: false,
        half_x: xf == Float::F16,
        group: false,
        glu,
        part: false,
        experts: false,
        split: false,
        half_y: false,
    }
}

/// [`case`] with the tiled kernel on `block`, whatever the shape, staged as `staging` says,
/// and x stored as `xf`.
pub fn case_in(
    ty: WeightType,
    (rows, cols, tokens): (u32, u32, u32),
    add: bool,
    (block, staging, xf): (BlockSize, Staging, Float),
) -> Result<Case, ShapeError> {
    build_case(ty, (rows, cols, tokens), (add, None), (block, staging, xf))
}

/// [`case`] with the gated unit `glu` of the row pairs as the output ([`TilesSpec::glu`]),
/// against [`reference`] followed by the unit in f64.
pub fn glu_case(
    ty: WeightType,
    (rows, cols, tokens): (u32, u32, u32),
    glu: Glu,
) -> Result<Case, ShapeError> {
    let block = BlockSize::for_product(rows, tokens, false);
    build_case(
        ty,
        (rows, cols, tokens),
        (false, Some(glu)),
        (block, Staging::Put, Float::F32),
    )
}

fn build_case(
    ty: WeightType,
    (rows, cols, tokens): (u32, u32, u32),
    (add, glu): (bool, Option<Glu>),
    (block, staging, xf): (BlockSize, Staging, Float),
) -> Result<Case, ShapeError> {
    check(rows, cols, tokens)?;
    if glu.is_some() {
        multiple_of(OP, "rows of gate and up", rows, 2)?;
    }
    let name = format!(
        "{OP}/{}{}/{rows}x{cols}/t{tokens}{}{}{}",
        if xf == Float::F16 { "f16x" } else { "" },
        ty.name(),
        if add { "+add" } else { "" },
        glu.map_or(String::new(), |g| format!("+{}", g.name())),
        how_name(block, staging)
    );
    let Operands {
        mut rng,
        w,
        x,
        x_bytes,
    } = operands(&name, ty, (rows, cols, tokens), xf)?;
    let (r, t) = (rows as usize, tokens as usize);
    let residual = add.then(|| rng.f32s(t * r, -2.0, 2.0));
    let mut want = reference(ty, &w, &x, residual.as_deref(), (rows, cols, tokens))?;
    if let Some(glu) = glu {
        want = glu_pairs(&want, glu);
    }
    let (fallback, spec) = staged(case_spec(ty, cols, (add, glu), (block, xf)), staging)?;
    let mut case = Case::new(name, kernel(spec)?, spec.grid(rows, tokens))
        .input("w", spec.w_elem(), blocks::pad_to_words(w))
        .input("x", spec.x_elem(), x_bytes);
    if let Some(res) = &residual {
        case = case.input("add", Scalar::F32, f32_bytes(res));
    }
    let y_rows = if glu.is_some() { r / 2 } else { r };
    Ok(case
        .output("y", Scalar::F32, vec![0; t * y_rows * 4], want)
        .params(spec.params(rows, cols, tokens))
        .bound(NMSE)
        .fallback_on(kernel(fallback)?, fallback.grid(rows, tokens)))
}

/// A case's name for its block and staging.
fn how_name(block: BlockSize, staging: Staging) -> String {
    let block = if block == BlockSize::Large {
        "/large"
    } else {
        ""
    };
    format!("{block}{}", staging.suffix())
}

/// A case's random operands: W of `ty` with values in [-1, 1) (its blocks), x in [-1, 1) and
/// its bytes as the kernel reads them, and the generator seeded by the case's name, for what
/// the case draws after them.
struct Operands {
    rng: Rng,
    w: Vec<u8>,
    x: Vec<f32>,
    x_bytes: Vec<u8>,
}

fn operands(
    name: &str,
    ty: WeightType,
    (rows, cols, tokens): (u32, u32, u32),
    xf: Float,
) -> Result<Operands, ShapeError> {
    let mut rng = Rng::new(crate::support::seed(name));
    let (r, c, t) = (rows as usize, cols as usize, tokens as usize);
    let w = quantize(ty, &rng.f32s(r * c, -1.0, 1.0))?;
    let x = rng.f32s(t * c, -1.0, 1.0);
    let x_bytes = match xf {
        Float::F32 => f32_bytes(&x),
        Float::F16 => f16_bytes(&x.iter().map(|&v| f16::from_f32(v)).collect::<Vec<_>>()),
    };
    Ok(Operands { rng, w, x, x_bytes })
}

/// The fallback of `spec` staged as `staging`, and the kernel it stages so; a typed refusal
/// where `spec` has no variant staged so.
pub(super) fn staged(
    spec: TilesSpec,
    staging: Staging,
) -> Result<(TilesSpec, TilesSpec), ShapeError> {
    match staging {
        Staging::Put => Ok((spec.scalar(), spec)),
        Staging::Copies if spec.copied().copies => Ok((spec, spec.copied())),
        Staging::Copies => Err(ShapeError::Unsupported {
            op: OP,
            what: format!("asynchronous copies for {}", spec.name()),
        }),
        Staging::Group => {
            let grouped = spec.copied().grouped();
            if !grouped.group {
                return Err(ShapeError::Unsupported {
                    op: OP,
                    what: format!("warpgroup products for {}", spec.name()),
                });
            }
            Ok((spec, grouped))
        }
    }
}

/// A [`TilesSpec::split`] case: W of `ty`, x stored as `xf`, K in `splits` slices, each
/// slice of y against [`reference_split`]; staged as `staging` says, the fallback as for
/// [`case_in`].
pub fn split_case(
    ty: WeightType,
    (rows, cols, tokens): (u32, u32, u32),
    splits: u32,
    (block, staging, xf): (BlockSize, Staging, Float),
) -> Result<Case, ShapeError> {
    check(rows, cols, tokens)?;
    let name = format!(
        "{OP}/{}{}/{rows}x{cols}/t{tokens}/splitk{splits}{}",
        if xf == Float::F16 { "f16x" } else { "" },
        ty.name(),
        how_name(block, staging)
    );
    let Operands { w, x, x_bytes, .. } = operands(&name, ty, (rows, cols, tokens), xf)?;
    let (r, t) = (rows as usize, tokens as usize);
    let want = reference_split(ty, &w, &x, (rows, cols, tokens), splits)?;
    let spec = TilesSpec {
        split: true,
        ..case_spec(ty, cols, (false, None), (block, xf))
    };
    let (fallback, spec) = staged(spec, staging)?;
    Ok(
        Case::new(name, kernel(spec)?, spec.split_grid(rows, tokens, splits))
            .input("w", spec.w_elem(), blocks::pad_to_words(w))
            .input("x", spec.x_elem(), x_bytes)
            .output("y", Scalar::F32, vec![0; splits as usize * t * r * 4], want)
            .params(spec.split_params((rows, cols, tokens), splits))
            .bound(NMSE)
            .fallback_on(kernel(fallback)?, fallback.split_grid(rows, tokens, splits)),
    )
}

/// A [`TilesSpec::part`] case: W's rows `first..first + rows` of a `y_rows`-row product of
/// f16 weights and f16 x (the executor's widened halves) in `block`, copied asynchronously (on
/// warpgroup products in the large block), the gated unit `glu` of the row pairs where given,
/// stored as `yf` ([`TilesSpec::half_y`] for f16, judged against the reference rounded so);
/// y's other rows stay as they were (zero).
pub fn part_case(
    (y_rows, cols, tokens): (u32, u32, u32),
    (first, rows): (u32, u32),
    (glu, yf): (Option<Glu>, Float),
    block: BlockSize,
) -> Result<Case, ShapeError> {
    check(y_rows, cols, tokens)?;
    let pairs_split = glu.is_some() && !(first.is_multiple_of(2) && rows.is_multiple_of(2));
    if first + rows > y_rows || pairs_split {
        return Err(ShapeError::Unsupported {
            op: OP,
            what: format!("rows {first}..{} of {y_rows} as a part", first + rows),
        });
    }
    let name = format!(
        "{OP}/f16xf16/{y_rows}x{cols}/t{tokens}{}{}/rows{first}+{rows}{}",
        glu.map_or(String::new(), |g| format!("+{}", g.name())),
        if yf == Float::F16 { "/f16y" } else { "" },
        if block == BlockSize::Large {
            "/group"
        } else {
            ""
        }
    );
    let mut rng = Rng::new(crate::support::seed(&name));
    let (r, c, t) = (y_rows as usize, cols as usize, tokens as usize);
    let ty = WeightType::F16;
    let w = quantize(ty, &rng.f32s(r * c, -1.0, 1.0))?;
    let x = rng.f32s(t * c, -1.0, 1.0);
    let mut full = reference(ty, &w, &x, None, (y_rows, cols, tokens))?;
    let (lo, hi) = (first as usize, (first + rows) as usize);
    // y's rows the part writes; the rest stay zero.
    let (written, width) = if let Some(glu) = glu {
        full = glu_pairs(&full, glu);
        (lo / 2..hi / 2, r / 2)
    } else {
        (lo..hi, r)
    };
    let want: Vec<f64> = full
        .chunks(width)
        .flat_map(|row| {
            let written = written.clone();
            row.iter()
                .enumerate()
                .map(move |(n, &v)| if written.contains(&n) { v } else { 0.0 })
        })
        .map(|v| match yf {
            Float::F16 => f16::from_f64(v).to_f64(),
            Float::F32 => v,
        })
        .collect();
    let spec = TilesSpec {
        part: true,
        half_y: yf == Float::F16,
        ..case_spec(ty, cols, (false, glu), (block, Float::F16))
    };
    // The scalar variant is what a device without tiles (a CPU checking a GPU) runs.
    let fallback = spec.scalar();
    let spec = match block {
        BlockSize::Large => spec.copied().grouped(),
        _ => spec.copied(),
    };
    let part_w = w[lo * c * 2..hi * c * 2].to_vec();
    let x_bytes = f16_bytes(&x.iter().map(|&v| f16::from_f32(v)).collect::<Vec<_>>());
    let params = spec.part_params((rows, cols, tokens), (y_rows, first));
    Ok(Case::new(name, kernel(spec)?, spec.grid(rows, tokens))
        .input("w", spec.w_elem(), blocks::pad_to_words(part_w))
        .input("x", spec.x_elem(), x_bytes)
        .output(
            "y",
            spec.y_elem(),
            vec![0; t * width * spec.y_elem().size()],
            want,
        )
        .params(params)
        .bound(NMSE)
        .fallback_on(kernel(fallback)?, fallback.grid(rows, tokens)))
}

/// The gated unit of each pair of consecutive values, `act(a)·b`, in f64.
fn glu_pairs(v: &[f64], glu: Glu) -> Vec<f64> {
    v.chunks(2).map(|p| glu.reference(p[0], p[1])).collect()
}

/// Every weight type at a shape of one block and a partial one (tokens and rows past a
/// block), with and without the residual, in steps of one block of K and of two; SmolLM2's
/// QKV product over a 70-token prompt; SwiGLU of the row pairs; experts' products
/// ([`super::experts::cases`]).
pub fn cases() -> Vec<Case> {
    let mut out = vec![];
    for ty in blocks::weight_types().filter(|&t| super::takes(t)) {
        let w = |cols| blocks::whole_blocks(ty, cols);
        out.push(case(ty, (64, w(64), 20), false));
        out.push(case(ty, (72, w(96), 70), ty == WeightType::Q4_1));
    }
    out.push(case(WeightType::Q4_1, (960, 576, 70), false));
    // SwiGLU of the row pairs: rows and tokens past a block, and SmolLM2's gate/up (the
    // medium block).
    out.push(glu_case(WeightType::Q4_1, (72, 96, 70), Glu::Swiglu));
    out.push(glu_case(WeightType::F16, (64, 64, 20), Glu::Swiglu));
    out.push(glu_case(WeightType::Q4_1, (3072, 576, 40), Glu::Swiglu));
    // GeGLU (Gemma 3's): rows and tokens past a block, and a part of a widened gate/up.
    out.push(glu_case(WeightType::Q8_0, (72, 96, 70), Glu::Geglu));
    // Parts of a taller product, as the executor runs its widest widened weight: each half of
    // a gate/up's pairs, and a part of plain rows past a block; then gated units rounded to
    // f16 as they are written, as the product after them reads x, on the subgroups' tiles and
    // on warpgroup products.
    let (swiglu, geglu) = (Some(Glu::Swiglu), Some(Glu::Geglu));
    let (f32, f16) = (Float::F32, Float::F16);
    let (small, medium, large) = (BlockSize::Small, BlockSize::Medium, BlockSize::Large);
    let parts = [
        (144, 128, 70, 0, 72, swiglu, f32, small),
        (144, 128, 70, 72, 72, swiglu, f32, small),
        (144, 128, 70, 72, 72, geglu, f32, medium),
        (200, 64, 20, 64, 100, None, f32, small),
        (512, 128, 140, 256, 256, swiglu, f32, large),
        (512, 128, 140, 0, 256, geglu, f32, large),
        (144, 128, 70, 72, 72, swiglu, f16, small),
        (512, 128, 140, 256, 256, swiglu, f16, large),
        (144, 128, 70, 0, 72, geglu, f16, medium),
    ];
    for (y_rows, cols, tokens, first, rows, glu, yf, block) in parts {
        out.push(part_case(
            (y_rows, cols, tokens),
            (first, rows),
            (glu, yf),
            block,
        ));
    }
    // Steps of two blocks, two of them, rows past a block.
    out.push(case(WeightType::F16, (80, 128, 24), false));
    out.push(case(WeightType::Q8_0, (576, 1536, 33), true));
    // The medium block.
    out.push(case(WeightType::Q4_0, (2048, 64, 65), true));
    let (large, medium) = (BlockSize::Large, BlockSize::Medium);
    let (half, single) = (Float::F16, Float::F32);
    for (ty, shape, add, how) in [
        // The large block, with rows and tokens past one.
        (
            WeightType::F16,
            (136, 64, 140),
            false,
            (large, Staging::Put, single),
        ),
        (
            WeightType::Q4_1,
            (256, 128, 128),
            true,
            (large, Staging::Put, single),
        ),
        // Packed formats' runs in the large block and on warpgroup products: Q4_K_M's two.
        (
            WeightType::Q4_K,
            (136, 512, 140),
            true,
            (large, Staging::Put, single),
        ),
        (
            WeightType::Q6_K,
            (136, 256, 140),
            false,
            (large, Staging::Group, single),
        ),
        // f16 weights copied asynchronously: the large block (steps of one block of K, rows
        // and tokens past one) and the medium one (steps of two, three of them).
        (
            WeightType::F16,
            (136, 96, 140),
            true,
            (large, Staging::Copies, single),
        ),
        (
            WeightType::F16,
            (72, 192, 40),
            false,
            (medium, Staging::Copies, single),
        ),
        // x in f16 too: copied with W, and put where copies are not.
        (
            WeightType::F16,
            (136, 128, 140),
            true,
            (large, Staging::Copies, half),
        ),
        (
            WeightType::F16,
            (72, 96, 40),
            false,
            (medium, Staging::Put, half),
        ),
        // Warpgroup products: f16 x and W copied, with rows and tokens past a block, the
        // residual and three steps (more than the copies run ahead), and in one step; f32 x
        // put while W is copied; quantized and f32 W put.
        (
            WeightType::F16,
            (136, 192, 140),
            true,
            (large, Staging::Group, half),
        ),
        (
            WeightType::F16,
            (128, 64, 128),
            false,
            (large, Staging::Group, half),
        ),
        (
            WeightType::F16,
            (136, 128, 140),
            true,
            (large, Staging::Group, single),
        ),
        (
            WeightType::Q8_0,
            (136, 192, 140),
            true,
            (large, Staging::Group, single),
        ),
        (
            WeightType::Q4_0,
            (136, 64, 140),
            false,
            (large, Staging::Group, single),
        ),
        (
            WeightType::F32,
            (128, 128, 130),
            false,
            (large, Staging::Group, single),
        ),
    ] {
        out.push(case_in(ty, shape, add, how));
    }
    // SwiGLU on warpgroup products, rows and tokens past a block.
    out.push(build_case(
        WeightType::Q4_1,
        (272, 192, 140),
        (false, Some(Glu::Swiglu)),
        (large, Staging::Group, single),
    ));
    // K in slices: three shares of 256 columns (the last shorter) in the medium block, x
    // put in f32; two of f16 W and x copied; four on warpgroup products, rows and tokens
    // past a block; a slice past K's end.
    out.push(split_case(
        WeightType::Q8_0,
        (72, 640, 70),
        3,
        (BlockSize::Medium, Staging::Put, single),
    ));
    out.push(split_case(
        WeightType::F16,
        (72, 256, 40),
        2,
        (BlockSize::Medium, Staging::Copies, half),
    ));
    out.push(split_case(
        WeightType::F16,
        (136, 512, 140),
        4,
        (large, Staging::Group, half),
    ));
    out.push(split_case(
        WeightType::Q4_K,
        (40, 256, 20),
        5,
        (BlockSize::Small, Staging::Put, single),
    ));
    // Experts' products over a prompt's pairs.
    out.extend(super::experts::cases().into_iter().map(Ok));
    out.into_iter()
        .collect::<Result<_, _>>()
        .expect("the fixed shapes are valid")
}
