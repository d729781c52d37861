//! A prompt's product as f16 × f16 tiles: quantized W dequantised to f16 rows ([`kernel`])
//! and f32 x rounded to f16 ([`x_kernel`]) by dispatches of their own before it, so that the
//! tiled product ([`crate::matmul_tiles`] with f16 weights and [`TilesSpec::half_x`]) copies
//! both into shared memory asynchronously and multiplies them on warpgroup products, where
//! staging quantized blocks decodes them through the invocations' registers every step of
//! every workgroup that reads them. The tiled product computes the same values either way:
//! x rounded to f16 times W's f16 values, exact in f32.
//!
//! One invocation decodes a run of [`RUN`] elements of one row at a time: a run lies in one
//! block (one sub-block of a packed format), so its scales are decoded once.
//!
//! Bound: exact. Each value is the format's decode in f32, as every kernel computes it, rounded
//! once to f16.
//!
//! [`TilesSpec::half_x`]: crate::matmul_tiles::TilesSpec::half_x

use crate::blocks::{self, BlockFormat, Bytes};
use crate::case::*;
use crate::shape::ShapeError;
use crate::support::{elements, multiple_of, nonzero};
use half::f16;
use trine_gguf::quant::{dequantize, quantize, WeightType};
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar, Val};

const OP: &str = "widen";

/// Invocations per workgroup: a row of 4096 is 256 runs, one each.
pub const WG: u32 = 256;

/// Elements an invocation decodes at a time.
pub const RUN: u32 = 16;

/// Words a run's halves take, two a word.
const RUN_WORDS: u32 = RUN / 2;

/// Words between two runs in shared memory: a run's and one more, so that the invocations'
/// runs start in different banks (9 words apart) as they put them.
const STAGED_RUN: u32 = RUN_WORDS + 1;

/// The most workgroups a dispatch takes along one axis on every backend: Vulkan guarantees
/// 65,535 per dimension; more take a second axis ([`grid`]).
pub const MAX_GROUPS: u32 = 65_535;

/// Checks a `rows × cols` matrix of `ty` for [`kernel`]: whole blocks a row, and every
/// element's index and every block's first byte within u32.
pub fn check(ty: WeightType, rows: u32, cols: u32) -> Result<BlockFormat, ShapeError> {
    let f = BlockFormat::require(OP, ty)?;
    nonzero(OP, "rows", rows)?;
    nonzero(OP, "cols", cols)?;
    ty.bytes(OP, "cols", cols as usize)?;
    elements(OP, "w", &[rows, cols])?;
    elements(OP, "w's bytes", &[rows, cols / f.elems(), f.bytes()])?;
    Ok(f)
}

/// The kernel for W of `ty` (any block format). Rows are whole blocks, so the part widened
/// is one sequence of runs of [`RUN`] elements, each in one block (one sub-block of a packed
/// format): a workgroup takes [`WG`] consecutive runs, whichever rows they lie in (a workgroup
/// a row left most of its invocations idle on rows narrower than its runs), decodes each into
/// shared memory as f16 bits two a word, then writes the words out with consecutive
/// invocations on consecutive words (an invocation writing its own run touched a 32-byte span
/// per element it stored). A half a store took twice the stores and their index work, which
/// bound the kernel below the memory's rate. Buffers `w` (its bytes: words for a packed
/// format's decoder, bytes for a flat one's), `out` (f16, `rows × cols`, bound as words: W's
/// rows `first..first + rows`, so that a large W can be widened a part at a time); parameters
/// rows, cols, first; grid [`grid`], its workgroups counted along the first axis, then the
/// second.
pub fn kernel(ty: WeightType) -> Result<Kernel, ShapeError> {
    let f = BlockFormat::require(OP, ty)?;
    let k = KernelBuilder::new(&format!("{OP}_{ty}"), [WG, 1, 1]);
    let w = k.buffer("w", weights_elem(f), Access::Read);
    let out = k.buffer("out", Scalar::U32, Access::Write);
    let stage = k.shared("stage", Scalar::U32, WG * STAGED_RUN);
    let rows = k.param("rows", Scalar::U32);
    let cols = k.param("cols", Scalar::U32);
    let first_row = k.param("first", Scalar::U32);
    let group = k.workgroup_id(1) * k.num_workgroups(0) + k.workgroup_id(0);
    let lid = k.local_index();
    let elems = rows * cols;
    let start = group * k.u32(WG * RUN);
    let col = start + lid * k.u32(RUN);
    k.if_(col.lt(elems), || {
        let e = first_row * cols + col;
        let qk = k.u32(f.elems());
        let base = e / qk * k.u32(f.bytes());
        let values = decode(&k, f, w, base, e % qk);
        for (i, pair) in values.chunks(2).enumerate() {
            let word = pair[0].pack_halves(pair[1]);
            k.store_shared(stage, lid * k.u32(STAGED_RUN) + k.u32(i as u32), word);
        }
    });
    k.barrier();
    // Rows are whole blocks of an even number of elements, so a part is whole words. Word
    // `j·WG + lid` of the workgroup's sits `j·WG / RUN_WORDS` runs after word `lid`'s (WG is
    // whole runs of words), so each store's indices are the first's plus constants; a
    // workgroup wholly inside the part, every one but the last, stores without a test.
    let (words, start) = (elems / k.u32(2), start / k.u32(2));
    let at = start + lid;
    let staged = lid / k.u32(RUN_WORDS) * k.u32(STAGED_RUN) + lid % k.u32(RUN_WORDS);
    let store = |j: u32| {
        let from = staged + k.u32(j * WG / RUN_WORDS * STAGED_RUN);
        k.store(out, at + k.u32(j * WG), k.load_shared(stage, from));
    };
    let inside = (start + k.u32(WG * RUN_WORDS)).le(words);
    k.if_else(
        inside,
        || (0..RUN_WORDS).for_each(store),
        || {
            for j in 0..RUN_WORDS {
                k.if_((at + k.u32(j * WG)).lt(words), || store(j));
            }
        },
    );
    Ok(k.finish())
}

/// How [`kernel`] binds W of format `f`: bytes for a flat format's decoder, words for a
/// packed one's.
fn weights_elem(f: BlockFormat) -> Scalar {
    match f {
        BlockFormat::Flat(_) => Scalar::U8,
        BlockFormat::Packed(_) => Scalar::U32,
    }
}

/// The [`RUN`] values from element `first` of the block at byte `base`, as `F32`.
fn decode<'b>(
    k: &'b KernelBuilder,
    f: BlockFormat,
    w: trine_ir::BufferId,
    base: Val<'b>,
    first: Val<'b>,
) -> Vec<Val<'b>> {
    match f {
        BlockFormat::Flat(flat) => {
            let s = flat.scales(k, (w, None), base);
            (0..RUN)
                .map(|i| s.value(flat.code(k, w, base, first + k.u32(i))))
                .collect()
        }
        BlockFormat::Packed(p) => {
            let src = Bytes::Words(w);
            let sub = first / k.u32(p.sub);
            // A header of scales in the block's first 16 bytes is one load, where the
            // format's own decoder reads its bytes one at a time.
            let s = match p.units.and_then(|u| u.header) {
                Some(header) => header(k, &blocks::quad_words(k, w, base), sub),
                None => (p.scales)(k, (src, None), base, sub),
            };
            (p.codes)(k, src, base, first, RUN)
                .into_iter()
                .map(|c| s.value(c))
                .collect()
        }
    }
}

/// A workgroup per [`WG`] runs of the `rows × cols` part, along the first axis up to
/// [`MAX_GROUPS`], then rows of that many along the second.
pub fn grid(rows: u32, cols: u32) -> [u32; 3] {
    let groups = (u64::from(rows) * u64::from(cols)).div_ceil(u64::from(WG * RUN));
    let across = groups.min(u64::from(MAX_GROUPS));
    let down = groups.div_ceil(across.max(1));
    [across as u32, down as u32, 1]
}

/// The kernel rounding `tokens` rows of f32 x, `cols` wide (a multiple of 4, as every widened
/// product's K is whole blocks: [`x_check`]), to f16: a workgroup per row, each invocation a
/// quad of x at a time, read in one load and written as two words of f16 pairs. Buffers `x`
/// (f32 bits as `U32` quads), `out` (f16 pairs as `U32`); parameters tokens, cols; grid
/// [`x_grid`].
pub fn x_kernel() -> Kernel {
    let k = KernelBuilder::new("widen_x_f16", [WG, 1, 1]);
    let x = k.buffer("x", Scalar::U32, Access::Read);
    let out = k.buffer("out", Scalar::U32, Access::Write);
    let tokens = k.param("tokens", Scalar::U32);
    let cols = k.param("cols", Scalar::U32);
    let t = k.workgroup_id(0);
    k.if_(t.lt(tokens), || {
        let quads = cols >> k.u32(2);
        k.for_range(k.local_index(), quads, WG, |q| {
            let at = t * quads + q;
            let [a, b, c, d] = k.load_quad(x, at).map(|v| v.bitcast(Scalar::F32));
            k.store(out, at * k.u32(2), a.pack_halves(b));
            k.store(out, at * k.u32(2) + k.u32(1), c.pack_halves(d));
        });
    });
    k.finish()
}

/// Whether [`x_kernel`] rounds rows `cols` wide: quads of whole rows.
pub fn x_check(cols: u32) -> Result<(), ShapeError> {
    multiple_of(OP, "x's columns", cols, 4).map(|_| ())
}

/// A workgroup per token.
pub fn x_grid(tokens: u32) -> [u32; 3] {
    [tokens, 1, 1]
}

/// What [`kernel`] writes: `ggml`'s dequantised values of `w` (`rows × cols` of `ty`), each
/// rounded to f32 as the kernels compute it, then to f16.
pub fn reference(ty: WeightType, w: &[u8], rows: u32, cols: u32) -> Result<Vec<f64>, ShapeError> {
    check(ty, rows, cols)?;
    let n = rows as usize * cols as usize;
    let v = dequantize(ty, w, n).map_err(|e| ShapeError::Unsupported {
        op: OP,
        what: e.to_string(),
    })?;
    Ok(v.into_iter()
        .map(|v| f16::from_f32(v as f32).to_f64())
        .collect())
}

/// A case: W of `ty` with values in ±`scale`, `rows × cols` (cols whole blocks), its rows
/// from `first` on widened (all of them for 0).
pub fn case(
    ty: WeightType,
    (rows, cols): (u32, u32),
    scale: f32,
    first: u32,
) -> Result<Case, ShapeError> {
    check(ty, rows, cols)?;
    if first >= rows {
        return Err(ShapeError::Unsupported {
            op: OP,
            what: format!("the first row widened, {first}, of {rows}"),
        });
    }
    let mut rng = Rng::new(u64::from(rows * 31 + cols) + ty.name().len() as u64 * 977);
    let x = rng.f32s(rows as usize * cols as usize, -scale, scale);
    let w = quantize(ty, &x).map_err(|e| ShapeError::Unsupported {
        op: OP,
        what: e.to_string(),
    })?;
    let want = reference(ty, &w, rows, cols)?.split_off((first * cols) as usize);
    let elem = weights_elem(BlockFormat::require(OP, ty)?);
    let mut name = format!("{OP}/{ty}/{rows}x{cols}");
    if scale < 1.0 {
        name.push_str("/tiny");
    }
    if first > 0 {
        name.push_str(&format!("/from{first}"));
    }
    let widened = rows - first;
    // The halves' bits two a word, as the kernel writes them, judged exactly.
    let words: Vec<f64> = want
        .chunks(2)
        .map(|p| {
            let bits = |v: f64| u32::from(f16::from_f64(v).to_bits());
            f64::from(bits(p[0]) | bits(p[1]) << 16)
        })
        .collect();
    Ok(Case::new(name, kernel(ty)?, grid(widened, cols))
        .input("w", elem, blocks::pad_to_words(w))
        .output("out", Scalar::U32, vec![0; words.len() * 4], words)
        .params(vec![
            ParamValue::U32(widened),
            ParamValue::U32(cols),
            ParamValue::U32(first),
        ])
        .bound(NMSE_EXACT))
}

/// A case of [`x_kernel`]: `tokens × cols` values in ±`scale`, the halves' bits judged
/// exactly two a word.
pub fn x_case(tokens: u32, cols: u32, scale: f32) -> Result<Case, ShapeError> {
    x_check(cols)?;
    let mut rng = Rng::new(u64::from(tokens * 7 + cols));
    let x = rng.f32s(tokens as usize * cols as usize, -scale, scale);
    let bits = |v: f32| u32::from(f16::from_f32(v).to_bits());
    let words: Vec<f64> = x
        .chunks(2)
        .map(|p| f64::from(bits(p[0]) | bits(p[1]) << 16))
        .collect();
    Ok(Case::new(
        format!("{OP}/x/{tokens}x{cols}"),
        x_kernel(),
        x_grid(tokens),
    )
    .input("x", Scalar::U32, f32_bytes(&x))
    .output("out", Scalar::U32, vec![0; words.len() * 4], words)
    .params(vec![ParamValue::U32(tokens), ParamValue::U32(cols)])
    .bound(NMSE_EXACT))
}

/// [`case`] with its workgroups on a grid `across` wide, as [`grid`] lays out more than
/// [`MAX_GROUPS`] of them: the last row of the grid partly past the matrix.
fn case_across(ty: WeightType, (rows, cols): (u32, u32), across: u32) -> Result<Case, ShapeError> {
    let [groups, ..] = grid(rows, cols);
    let mut c = case(ty, (rows, cols), 1.0, 0)?;
    c.name = format!("{}/across{across}", c.name);
    c.grid = [across, groups.div_ceil(across), 1];
    Ok(c)
}

/// Every block format at two widths (one block more than a workgroup's runs cover, so that
/// a workgroup's runs span two rows), with values of every size and tiny ones (subnormal
/// f16 scales); rows narrower than a workgroup's runs, whose workgroups span several, on one
/// axis and on two; x at a width that is no multiple of a workgroup.
pub fn cases() -> Vec<Case> {
    let mut v = vec![];
    for f in BlockFormat::ALL {
        let ty = f.ty();
        let wide = blocks::whole_blocks(ty, WG * RUN + 1);
        v.push(case(ty, (3, wide), 1.0, 0));
        v.push(case(ty, (2, f.elems()), 1e-4, 0));
        v.push(case(ty, (4, f.elems()), 1.0, 2));
    }
    v.push(case(WeightType::Q4_0, (300, 64), 1.0, 7));
    v.push(case_across(WeightType::Q4_K, (70, 256), 2));
    // Rows of fewer quads than a workgroup has invocations, and of more (a second step for
    // some), with halves near f16's largest and among its subnormals.
    v.push(x_case(5, 1000, 60000.0));
    v.push(x_case(3, 64, 1.0));
    v.push(x_case(2, 4 * WG + 8, 1e-5));
    v.into_iter()
        .map(|c| c.expect("the listed shapes are valid"))
        .collect()
}
