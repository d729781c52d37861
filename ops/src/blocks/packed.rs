//! The formats whose blocks hold sub-blocks with scales of their own, or codes whose bits
//! lie in several arrays ([`Packed`]). A product reads them through the format's decoder of
//! one run of consecutive elements within a sub-block: its scales, then its codes.

use super::read::{byte, half, quad_words};
use super::{signed_byte, Scales};
use trine_gguf::quant::WeightType;
use trine_ir::{BufferId, KernelBuilder, Scalar, Val};

/// How a kernel binds a packed format's bytes: as bytes, or as 32-bit words, from which a run
/// of bytes comes a word at a time (GPUs load a word where they would load a byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bytes {
    U8(BufferId),
    Words(BufferId),
}

/// The scales of sub-block `sub` of the block at byte `base` (the f16 ones read through the
/// weights' `F16` view where one is bound).
pub type SubScales =
    for<'b> fn(&'b KernelBuilder, (Bytes, Option<BufferId>), Val<'b>, Val<'b>) -> Scales<'b>;

/// The codes, as `F32` and with every offset but the sub-block's [`Scales::m`] applied, of
/// elements `first..first + n` of the block at byte `base`: `n` a power of two no larger than
/// a sub-block, `first` a multiple of `n`. Every format's runs of 4 or more start on an even
/// byte (its blocks are an even number of bytes long), as [`super::read::bytes`] needs.
pub type RunCodes = for<'b> fn(&'b KernelBuilder, Bytes, Val<'b>, Val<'b>, u32) -> Vec<Val<'b>>;

/// A format read through its decoder.
#[derive(Clone, Copy)]
pub struct Packed {
    pub ty: WeightType,
    /// Elements a block holds.
    pub elems: u32,
    /// Bytes a block takes.
    pub bytes: u32,
    /// Elements that share one set of scales.
    pub sub: u32,
    /// Whether its scales carry a minimum ([`Scales::m`]): a product then adds m·Σx.
    pub min: bool,
    /// Whether its runs' integer codes ([`trine_gguf::quant::Run`]) are all in 0..=15, so
    /// that a product with integer x may hold them as nibbles.
    pub nibbles: bool,
    pub scales: SubScales,
    pub codes: RunCodes,
    /// Its codes as words of bytes for a product with 8-bit x, where the format has them.
    pub units: Option<IntUnits>,
}

/// Elements of a unit ([`IntUnits`]): two runs of 16.
pub const UNIT: u32 = 32;

/// A unit of [`UNIT`] codes of a block, for a product with 8-bit x on the block's own bytes:
/// two runs of 16 consecutive elements, each within one sub-block, as words of four byte
/// codes, element `first + 4j + i` of a run in byte `i` of its word `j`. The codes' value is
/// the byte, read as a signed byte, less the format's `centre`: unsigned codes are below 128
/// (nibbles, Q6_K's six bits), and a signed format's bytes (grouped Q8_0's) are their value,
/// as the products' signed packed dots ([`trine_ir::BinaryOp::Dot4I8`]) take them.
pub struct UnitCodes<'b> {
    /// Each run's first element in the block, and its four words.
    pub runs: [(Val<'b>, [Val<'b>; 4]); 2],
}

/// Unit `unit` (`0..elems / UNIT`) of the block at byte `base` of the weights bound as words.
pub type UnitWords = for<'b> fn(&'b KernelBuilder, BufferId, Val<'b>, Val<'b>) -> UnitCodes<'b>;

/// How a format's codes come as words of byte codes: the unit's words, the value every code
/// is less (Q6_K's 32; 0 for codes that are their value), and whether both runs of every
/// unit lie in one sub-block, and so in one block of x (a grouped block's units are its
/// blocks): a product then sums their dots before the scales apply, once.
#[derive(Clone, Copy)]
pub struct IntUnits {
    pub words: UnitWords,
    pub centre: i32,
    pub one_sub: bool,
    /// Where the block's scales lie in its first 16 bytes, how a sub-block's come from them
    /// ([`HeaderScales`]): a product loads them with one quad a unit, where the bytes one at a
    /// time took a load each (six a unit of Q4_K, more than its codes' one).
    pub header: Option<HeaderScales>,
    /// Whether units `2p` and `2p + 1` hold the two halves of the same runs' sub-blocks (and
    /// of x's blocks), so that a product taking both sums their dots before the scales apply.
    pub pairs_share: bool,
    /// Where every byte a unit reads lies in whole 16-byte quads of its block: a kernel may
    /// load them a step before it decodes them ([`UnitQuads`]).
    pub quads: Option<UnitQuads>,
}

/// A unit's bytes as whole 16-byte quads of its block: where they lie, and the unit decoded
/// from them once loaded. [`IntUnits::words`] is the two in turn; a kernel that loads the
/// quads a step before it decodes them keeps only their words in flight.
#[derive(Clone, Copy)]
pub struct UnitQuads {
    /// Quads a unit reads.
    pub count: usize,
    /// The byte offsets (multiples of 16) of unit `unit`'s quads in the block at byte `base`.
    pub at: for<'b> fn(&'b KernelBuilder, Val<'b>, Val<'b>) -> Vec<Val<'b>>,
    /// Unit `unit` from its quads' words, in [`UnitQuads::at`]'s order.
    pub decode: for<'b> fn(&'b KernelBuilder, &[[Val<'b>; 4]], Val<'b>) -> UnitCodes<'b>,
}

impl UnitQuads {
    /// Unit `unit` of the block at byte `base` of words `w`: its quads loaded, then decoded
    /// (the format's [`IntUnits::words`]).
    pub fn load<'b>(
        &self,
        k: &'b KernelBuilder,
        w: BufferId,
        base: Val<'b>,
        unit: Val<'b>,
    ) -> UnitCodes<'b> {
        let quads: Vec<[Val<'b>; 4]> = (self.at)(k, base, unit)
            .into_iter()
            .map(|at| quad_words(k, w, at))
            .collect();
        (self.decode)(k, &quads, unit)
    }
}

/// The scales of sub-block `sub` of a block from `header`, the four words of its first 16
/// bytes: nothing more is read.
pub type HeaderScales = for<'b> fn(&'b KernelBuilder, &[Val<'b>; 4], Val<'b>) -> Scales<'b>;

/// The codes of nibble words in a unit: the low nibbles of `words`' bytes, or the high ones.
pub(super) fn nibble_words<'b>(
    k: &'b KernelBuilder,
    words: &[Val<'b>],
    high: bool,
) -> [Val<'b>; 4] {
    let mask = k.u32(0x0f0f_0f0f);
    std::array::from_fn(|j| {
        let w = if high { words[j] >> k.u32(4) } else { words[j] };
        w & mask
    })
}

/// A unit whose codes are nibbles (`low`, four words of nibble pairs: the first run in the
/// low nibbles, the second in the high ones) with bits above them in `high` (four words of
/// the same elements' bytes): run `r` starts at element `runs[r].0` and takes the `mask` bits
/// of each `high` byte at `runs[r].1`, moved above its nibble.
pub(super) fn nibbles_with_high_bits<'b>(
    k: &'b KernelBuilder,
    (low, high): (&[Val<'b>], &[Val<'b>]),
    mask: u32,
    runs: [(Val<'b>, Val<'b>); 2],
) -> UnitCodes<'b> {
    let run = |r: usize| {
        let (first, shift) = runs[r];
        let nibbles = nibble_words(k, low, r == 1);
        let words =
            std::array::from_fn(|j| nibbles[j] | (((high[j] >> shift) & k.u32(mask)) << k.u32(4)));
        (first, words)
    };
    UnitCodes {
        runs: [run(0), run(1)],
    }
}

/// Formats are told apart by their type: two descriptions of one type are one format.
impl PartialEq for Packed {
    fn eq(&self, other: &Packed) -> bool {
        self.ty == other.ty
    }
}

impl Eq for Packed {}

impl std::fmt::Debug for Packed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packed")
            .field("ty", &self.ty)
            .field("elems", &self.elems)
            .field("bytes", &self.bytes)
            .field("sub", &self.sub)
            .field("min", &self.min)
            .field("nibbles", &self.nibbles)
            .field("units", &self.units.is_some())
            .finish()
    }
}

/// An unsigned code (`U32`) less `centre`, as `F32`, through `I32`: x86 vectors convert
/// signed integers to floats natively (AVX2 has no unsigned conversion).
pub(super) fn centred<'b>(k: &'b KernelBuilder, code: Val<'b>, centre: i32) -> Val<'b> {
    let q = code.cast(Scalar::I32);
    let q = if centre == 0 { q } else { q - k.i32(centre) };
    q.cast(Scalar::F32)
}

/// The 6-bit scale and minimum of sub-block `j` (0..8) from 12 bytes (`byte(i)`, `U32`), as
/// Q4_K and Q5_K pack them: sub-blocks 0..4 in the low six bits of bytes `j` and `j + 4`,
/// sub-blocks 4..8 in the nibbles of byte `j + 4` with their top two bits in the spare bits of
/// bytes `j − 4` and `j`.
fn k_scale_min<'b>(
    k: &'b KernelBuilder,
    byte: impl Fn(Val<'b>) -> Val<'b>,
    j: Val<'b>,
) -> (Val<'b>, Val<'b>) {
    let a = byte(j);
    let b = byte(j + k.u32(4));
    // Byte j − 4 for the high sub-blocks; for the low ones a valid byte that goes unused.
    let c = byte(j ^ k.u32(4));
    let low = j.lt(k.u32(4));
    let six = k.u32(63);
    let top = |v: Val<'b>| (v >> k.u32(6)) << k.u32(4);
    let sc = k.select(low, a & six, (b & k.u32(15)) | top(c));
    let mn = k.select(low, b & six, (b >> k.u32(4)) | top(a));
    (sc.cast(Scalar::F32), mn.cast(Scalar::F32))
}

/// The scales of sub-block `sub` of a Q4_K or Q5_K block at `base`: its f16 d and dmin (bytes
/// 0 and 2) times the sub-block's 6-bit scale and minimum ([`k_scale_min`], from byte 4):
/// `d·sc` and `−dmin·mn`.
pub(super) fn k_scales<'b>(
    k: &'b KernelBuilder,
    (src, view): (Bytes, Option<BufferId>),
    base: Val<'b>,
    sub: Val<'b>,
) -> Scales<'b> {
    let (sc, mn) = k_scale_min(k, |i| byte(k, src, base + k.u32(4) + i), sub);
    let d = half(k, (src, view), base);
    let dmin = half(k, (src, view), base + k.u32(2));
    k_steps((d, dmin), (sc, mn))
}

/// [`k_scales`] from the block's first 16 bytes as words ([`HeaderScales`]): d and dmin in
/// the first, the twelve bytes of scales in the other three. d and dmin are converted from the
/// first word's halves natively ([`Val::half_from_bits`]), where reading them through the f16
/// view would load them again.
pub(super) fn k_header_scales<'b>(
    k: &'b KernelBuilder,
    header: &[Val<'b>; 4],
    sub: Val<'b>,
) -> Scales<'b> {
    let byte = |i: Val<'b>| {
        let word = k.select(
            i.lt(k.u32(4)),
            header[1],
            k.select(i.lt(k.u32(8)), header[2], header[3]),
        );
        (word >> ((i & k.u32(3)) * k.u32(8))) & k.u32(255)
    };
    let (sc, mn) = k_scale_min(k, byte, sub);
    let (d, dmin) = (
        header[0].half_from_bits(),
        (header[0] >> k.u32(16)).half_from_bits(),
    );
    k_steps((d, dmin), (sc, mn))
}

/// `d·sc` and `−dmin·mn`: a sub-block's scales from the block's steps d and dmin.
fn k_steps<'b>((d, dmin): (Val<'b>, Val<'b>), (sc, mn): (Val<'b>, Val<'b>)) -> Scales<'b> {
    Scales {
        d: d * sc,
        m: Some(-(dmin * mn)),
    }
}

/// The scales of a block with one f16 step at byte 0 and no minimum (Q5_0, IQ4_NL): every
/// sub-block's.
pub(super) fn step_at_0<'b>(
    k: &'b KernelBuilder,
    (src, view): (Bytes, Option<BufferId>),
    base: Val<'b>,
    _sub: Val<'b>,
) -> Scales<'b> {
    Scales {
        d: half(k, (src, view), base),
        m: None,
    }
}

/// IQ4's 16 code values, as 4 words of signed bytes.
const IQ4_VALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// The IQ4 value of a 4-bit code (`U32`), as `F32`: the table has no array in the IR, so the
/// code's top two bits select one of four words of its bytes.
pub(super) fn iq4_value<'b>(k: &'b KernelBuilder, code: Val<'b>) -> Val<'b> {
    let word = |i: usize| {
        let w = IQ4_VALUES[4 * i..4 * i + 4]
            .iter()
            .enumerate()
            .fold(0u32, |w, (b, &v)| w | (u32::from(v as u8) << (8 * b)));
        k.u32(w)
    };
    let quarter = code >> k.u32(2);
    let low = k.select(quarter.eq(k.u32(0)), word(0), word(1));
    let high = k.select(quarter.eq(k.u32(2)), word(2), word(3));
    let w = k.select(quarter.lt(k.u32(2)), low, high);
    signed_byte(k, (w >> ((code & k.u32(3)) * k.u32(8))) & k.u32(255))
}
