//! f16 scales read inside a kernel: a block's scales are f16 at byte offsets that an f16 view
//! of the buffer cannot always address, so they are assembled from bytes and converted with
//! integer operations where the kernel has no view.

use trine_ir::{BufferId, KernelBuilder, Scalar, Val};

/// An f16 bit pattern (the low 16 bits of a `U32`) converted to `F32` exactly, with integer
/// operations: the IR has no f16-from-bits operation on integers, and scales in quant blocks
/// are f16 at byte offsets that an f16 buffer view could not address. Infinities keep their
/// sign, NaNs stay NaN with their payload (not quietened).
pub fn f16_bits_to_f32<'b>(k: &'b KernelBuilder, h: Val<'b>) -> Val<'b> {
    let sign = (h & k.u32(0x8000)) << k.u32(16);
    let e = (h >> k.u32(10)) & k.u32(0x1f);
    let m = h & k.u32(0x3ff);
    // Normal numbers rebias the exponent (15 → 127); the all-ones exponent (Inf, NaN) stays
    // all ones.
    let exp = k.select(e.eq(k.u32(31)), k.u32(255), e + k.u32(127 - 15));
    let normal = sign | (exp << k.u32(23)) | (m << k.u32(13));
    // Subnormals and zero are m·2^-24. Computed in float, the result is zero or a normal f32,
    // so a device that flushes subnormals loses nothing; the sign goes in as a bit so that
    // −0 survives.
    let magnitude = (m.cast(Scalar::F32) * k.f32(2f32.powi(-24))).bitcast(Scalar::U32);
    let small = magnitude | sign;
    k.select(e.eq(k.u32(0)), small, normal).bitcast(Scalar::F32)
}

/// [`f16_bits_to_f32`] without selects, for the loops the C lowering vectorises around a call
/// (GCC does not if-convert a select in a loop that calls a function, such as the packed dot
/// product's 16-lane version, and then vectorises nothing): the half's exponent and mantissa
/// put where an f32 keeps them, then multiplied by 2^112 (the two exponent biases apart). Exact
/// for every finite half: a normal one is a normal f32 scaled exactly, a subnormal one is an
/// f32 subnormal `m·2^-136` whose product `m·2^-24` is exact (a device that flushes subnormal
/// operands gives 0 there, a block of weights all below 2^-10). Six operations, where the
/// exponent's own arithmetic took twelve. Infinities and NaNs come out finite (2^16 or more),
/// which no block of a valid model holds.
pub fn f16_finite_bits_to_f32<'b>(k: &'b KernelBuilder, h: Val<'b>) -> Val<'b> {
    let sign = (h & k.u32(0x8000)) << k.u32(16);
    let shifted = ((h & k.u32(0x7fff)) << k.u32(13)).bitcast(Scalar::F32);
    let magnitude = (shifted * k.f32(2f32.powi(112))).bitcast(Scalar::U32);
    (magnitude | sign).bitcast(Scalar::F32)
}

/// The little-endian u16 at byte `at` of a `U8` buffer, as `U32`.
pub fn load_u16<'b>(k: &'b KernelBuilder, buf: BufferId, at: Val<'b>) -> Val<'b> {
    u16_of(k, k.load(buf, at), k.load(buf, at + k.u32(1)))
}

/// The little-endian 16-bit value of two bytes as loaded (`U32`).
fn u16_of<'b>(k: &'b KernelBuilder, lo: Val<'b>, hi: Val<'b>) -> Val<'b> {
    lo | (hi << k.u32(8))
}

/// The f16 at byte `at` (even) of `buf`'s bytes, as `F32`: through `view`, an `F16` view of
/// the same memory, where the kernel has one (a native load and conversion), else assembled
/// from two bytes with integer operations.
pub fn load_f16<'b>(
    k: &'b KernelBuilder,
    buf: BufferId,
    view: Option<BufferId>,
    at: Val<'b>,
) -> Val<'b> {
    match view {
        Some(h) => k.load(h, at / k.u32(2)).cast(Scalar::F32),
        None => f16_bits_to_f32(k, load_u16(k, buf, at)),
    }
}

/// `v` rounded to the nearest f16 value, ties to even, as f32 (what ggml's f32 → f16 store of a
/// scale keeps): with integer and exact float operations, since a compiler may take an
/// f32 → f16 → f32 round trip for a no-op (NVIDIA's Vulkan driver kept the f32 bits). Beyond
/// f16's largest value the result keeps f16's precision instead of becoming infinite.
pub(crate) fn round_to_f16<'b>(k: &'b KernelBuilder, v: Val<'b>) -> Val<'b> {
    let bits = v.bitcast(Scalar::U32);
    let sign = bits & k.u32(0x8000_0000);
    let abs = bits & k.u32(0x7fff_ffff);
    // From 2⁻¹⁴ up, f16 keeps 10 of f32's 23 mantissa bits: drop 13, rounding to even.
    let lsb = (abs >> k.u32(13)) & k.u32(1);
    let normal = (abs + k.u32(0xFFF) + lsb) & k.u32(0xFFFF_E000);
    // Below, its subnormals are the multiples of 2⁻²⁴ (scaling by a power of two is exact).
    let y = abs.bitcast(Scalar::F32) * k.f32(16_777_216.0);
    let r = y.floor();
    let frac = y - r;
    let odd = r.cast(Scalar::U32) & k.u32(1);
    let half = k.f32(0.5);
    let tie = k.select(frac.eq(half), odd, k.u32(0));
    let up = k.select(frac.gt(half), k.u32(1), tie);
    let sub = ((r + up.cast(Scalar::F32)) * k.f32(1.0 / 16_777_216.0)).bitcast(Scalar::U32);
    let small = abs.lt(k.u32(0x3880_0000));
    (k.select(small, sub, normal) | sign).bitcast(Scalar::F32)
}
