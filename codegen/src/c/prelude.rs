//! The text before the kernel: headers and the `trine_*` helpers the printer's output calls.

use crate::c_family::{dot4_bytes, ByteSigns};
use std::fmt::Write;

/// Every helper the prelude defines; a kernel whose entry symbol `trine_NAME` would equal one
/// is refused.
pub(super) const HELPERS: &[&str] = &[
    "trine_f16",
    "trine_h2f",
    "trine_f2h",
    "trine_h_bits",
    "trine_pack_halves",
    "trine_f_as_u",
    "trine_u_as_f",
    "trine_f_as_i",
    "trine_i_as_f",
    "trine_rsqrtf",
    "trine_expf",
    "trine_logf",
    "trine_sinf",
    "trine_cosf",
    "trine_tanhf",
    "trine_powf",
    "trine_fminf",
    "trine_fmaxf",
    "trine_cvt_i32",
    "trine_cvt_u32",
    "trine_loop_end",
    "trine_any",
    "trine_dot4i8",
    "trine_dot4u8",
    "trine_dot4i8_one",
    "trine_dot4u8_one",
    "trine_dot4u8i8",
    "trine_dot4u8i8_one",
    "trine_dot16u8i8",
    "trine_dot16u8i8_one",
    "trine_dot16i8",
    "trine_dot16i8_one",
];

const BASE: &str = r#"#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define TRINE_FN static inline __attribute__((always_inline))
TRINE_FN uint32_t trine_f_as_u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
TRINE_FN float trine_u_as_f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
TRINE_FN int trine_f_as_i(float f) { int i; memcpy(&i, &f, 4); return i; }
TRINE_FN float trine_i_as_f(int i) { float f; memcpy(&f, &i, 4); return f; }
/* In double, then rounded once, by the same C library functions the interpreter calls: the
   interpreter's results, bit for bit; e^x, where a kernel takes it, is `trine_expf` below. */
TRINE_FN float trine_rsqrtf(float x) { return (float)(1.0 / sqrt((double)x)); }
TRINE_FN float trine_logf(float x) { return (float)log((double)x); }
TRINE_FN float trine_sinf(float x) { return (float)sin((double)x); }
TRINE_FN float trine_cosf(float x) { return (float)cos((double)x); }
TRINE_FN float trine_tanhf(float x) { return (float)tanh((double)x); }
TRINE_FN float trine_powf(float x, float y) { return (float)pow((double)x, (double)y); }
/* fminf/fmaxf semantics (a NaN operand yields the other) without a call into libm. */
TRINE_FN float trine_fminf(float a, float b) { return a != a ? b : (b < a ? b : a); }
TRINE_FN float trine_fmaxf(float a, float b) { return a != a ? b : (b > a ? b : a); }
/* Float to integer, truncating; out of range saturates and NaN gives 0 instead of being
   undefined behaviour (the interpreter reports both as errors). */
TRINE_FN int trine_cvt_i32(float x) {
    return x != x ? 0 : x < -2147483648.0f ? (-2147483647 - 1) : x >= 2147483648.0f ? 2147483647 : (int)x;
}
TRINE_FN unsigned int trine_cvt_u32(float x) {
    return !(x > -1.0f) ? 0u : x >= 4294967296.0f ? 4294967295u : (unsigned int)x;
}
/* The bound of a loop stepping by `step` that keeps its variable from wrapping. */
TRINE_FN uint32_t trine_loop_end(uint32_t end, uint32_t step) {
    const uint32_t last = 4294967295u - (step - 1u);
    return end < last ? end : last;
}
/* Whether any invocation of a mask is active. */
TRINE_FN bool trine_any(const bool* m, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        if (m[i]) return true;
    }
    return false;
}
"#;

/// `_Float16` is IEEE binary16 in GCC (12+) and Clang (15+) on x86-64 and AArch64. A half is
/// widened by integer operations on its bits: GCC 12 does not vectorise a loop that converts
/// `_Float16` values on a CPU without AVX512-FP16 (it finds no vector type for them), and
/// attention over an f16 cache ran a third as fast as over an f32 one. The bits go where an
/// f32 keeps them, times 2^112 (the exponent biases apart): exact for every finite half, a
/// subnormal one included; infinities and NaNs (made quiet, as `vcvtph2ps` and the `half`
/// crate make them) by their bits.
const F16: &str = r#"typedef _Float16 trine_f16;
TRINE_FN float trine_h2f(trine_f16 h) {
    uint16_t b; memcpy(&b, &h, 2);
    const uint32_t sign = (uint32_t)(b & 0x8000u) << 16, em = (uint32_t)(b & 0x7fffu);
    const uint32_t finite = trine_f_as_u(trine_u_as_f(em << 13) * 0x1p112f);
    const uint32_t special = 0x7f800000u | (em << 13) | (em > 0x7c00u ? 0x00400000u : 0u);
    return trine_u_as_f(sign | (em >= 0x7c00u ? special : finite));
}
TRINE_FN trine_f16 trine_f2h(float f) { return (trine_f16)f; }
TRINE_FN trine_f16 trine_h_bits(uint16_t b) { trine_f16 h; memcpy(&h, &b, 2); return h; }
TRINE_FN uint32_t trine_pack_halves(float a, float b) {
    const trine_f16 h[2] = {(trine_f16)a, (trine_f16)b};
    uint32_t w; memcpy(&w, h, 4); return w;
}
"#;

/// Subgroup reductions of f32 sixteen lanes a register where the CPU has AVX-512 (the
/// printer's reductions use them under `TRINE_V16`): GCC left the tree's folds scalar. A lane
/// reads lane `l ^ h` by a permutation; the folds repeat `trine_fmaxf`'s and `trine_fminf`'s
/// choice lane by lane (the other operand where this one is NaN), so each lane's result is
/// the scalar one's, bit for bit.
const V16: &str = r#"#if defined(__AVX512F__)
#include <immintrin.h>
#define TRINE_V16 1
TRINE_FN __m512i trine_v16_lanes(void) {
    return _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
}
TRINE_FN __m512 trine_v16_lane_xor(__m512 v, int h) {
    return _mm512_permutexvar_ps(_mm512_xor_si512(trine_v16_lanes(), _mm512_set1_epi32(h)), v);
}
/* Each lane takes the first lane of its subgroup of `sg`. */
TRINE_FN __m512 trine_v16_first(__m512 v, int sg) {
    return _mm512_permutexvar_ps(_mm512_andnot_si512(_mm512_set1_epi32(sg - 1), trine_v16_lanes()), v);
}
TRINE_FN __m512 trine_v16_add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
TRINE_FN __m512 trine_v16_max(__m512 a, __m512 b) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(b, a, _CMP_GT_OQ), a, b);
}
TRINE_FN __m512 trine_v16_min(__m512 a, __m512 b) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(b, a, _CMP_LT_OQ), a, b);
}
#endif
"#;

/// The packed 8-bit dot products (`BinaryOp::Dot4I8`, `Dot4U8`). GCC vectorises the four byte
/// products across invocations into widening multiplies and shuffles, about two instructions
/// per product; AVX512-VNNI's `vpdpbusd` takes 64 products in one. GCC does not find it, so
/// where the CPU has it the functions are declared to the vectoriser (`omp declare simd`,
/// with `-fopenmp-simd`) with a 16-lane version written with it, which a loop over
/// invocations calls once per 16 of them; the one-lane versions (a loop's remainder) are the
/// byte products under the same names. `vpdpbusd` multiplies unsigned bytes by signed ones,
/// so the signed and the unsigned product each move one side by 128 and take the moved part
/// back out; `trine_dot4u8i8`, the signed product where the lowering knows one side's bytes
/// are below 128 (`Spelling::mixed_dot4`), is the instruction alone. Where the CPU has AVX2
/// but not AVX512-VNNI, 8-lane versions multiply-add 16-bit halves in pairs (`vpmaddwd`), and
/// the unsigned-by-signed one is `vpmaddubsw` and `vpmaddwd`, two instructions.
fn dot4(out: &mut String) {
    let bytes = |signs| dot4_bytes(signs, "a", "b");
    let bytes_i8 = bytes(ByteSigns::Signed);
    let bytes_u8 = bytes(ByteSigns::Unsigned);
    let bytes_u8i8 = bytes(ByteSigns::UnsignedBySigned);
    // The declarations to the vectoriser for `lanes` lanes, and the one-lane versions (a
    // loop's remainder) as the byte products under the same names.
    let dot16_params = (0..4)
        .map(|i| format!("uint32_t a{i}, uint32_t b{i}"))
        .collect::<Vec<_>>()
        .join(", ");
    let declared = |lanes: u32| {
        format!(
            r#"#include <immintrin.h>
#define TRINE_HIDDEN __attribute__((visibility("hidden")))
#pragma omp declare simd notinbranch simdlen({lanes})
TRINE_HIDDEN __attribute__((const)) int trine_dot4i8(uint32_t a, uint32_t b);
#pragma omp declare simd notinbranch simdlen({lanes})
TRINE_HIDDEN __attribute__((const)) uint32_t trine_dot4u8(uint32_t a, uint32_t b);
#pragma omp declare simd notinbranch simdlen({lanes})
TRINE_HIDDEN __attribute__((const)) int trine_dot4u8i8(uint32_t a, uint32_t b);
TRINE_HIDDEN int trine_dot4i8_one(uint32_t a, uint32_t b) __asm__("trine_dot4i8");
TRINE_HIDDEN int trine_dot4i8_one(uint32_t a, uint32_t b) {{ return {bytes_i8}; }}
TRINE_HIDDEN uint32_t trine_dot4u8_one(uint32_t a, uint32_t b) __asm__("trine_dot4u8");
TRINE_HIDDEN uint32_t trine_dot4u8_one(uint32_t a, uint32_t b) {{ return {bytes_u8}; }}
TRINE_HIDDEN int trine_dot4u8i8_one(uint32_t a, uint32_t b) __asm__("trine_dot4u8i8");
TRINE_HIDDEN int trine_dot4u8i8_one(uint32_t a, uint32_t b) {{ return {bytes_u8i8}; }}
#pragma omp declare simd notinbranch simdlen({lanes})
TRINE_HIDDEN __attribute__((const)) int trine_dot16u8i8({dot16_params});
TRINE_HIDDEN int trine_dot16u8i8_one({dot16_params}) __asm__("trine_dot16u8i8");
TRINE_HIDDEN int trine_dot16u8i8_one({dot16_params}) {{
    return trine_dot4u8i8_one(a0, b0) + trine_dot4u8i8_one(a1, b1) + trine_dot4u8i8_one(a2, b2) + trine_dot4u8i8_one(a3, b3);
}}
#pragma omp declare simd notinbranch simdlen({lanes})
TRINE_HIDDEN __attribute__((const)) int trine_dot16i8({dot16_params});
TRINE_HIDDEN int trine_dot16i8_one({dot16_params}) __asm__("trine_dot16i8");
TRINE_HIDDEN int trine_dot16i8_one({dot16_params}) {{
    return trine_dot4i8_one(a0, b0) + trine_dot4i8_one(a1, b1) + trine_dot4i8_one(a2, b2) + trine_dot4i8_one(a3, b3);
}}
"#
        )
    };
    let (avx512, avx2) = (declared(16), declared(8));
    let _ = write!(
        out,
        r#"#if defined(__AVX512F__) && defined(__AVX512VNNI__)
{avx512}/* GCC's name for the 16-lane AVX-512 version of a two-argument function. */
TRINE_HIDDEN __m512i _ZGVeN16vv_trine_dot4i8(__m512i a, __m512i b) {{
    const __m512i m = _mm512_set1_epi32((int)0x80808080u), z = _mm512_setzero_si512();
    return _mm512_sub_epi32(_mm512_dpbusd_epi32(z, _mm512_xor_si512(a, m), b), _mm512_dpbusd_epi32(z, m, b));
}}
TRINE_HIDDEN __m512i _ZGVeN16vv_trine_dot4u8(__m512i a, __m512i b) {{
    const __m512i m = _mm512_set1_epi32((int)0x80808080u), z = _mm512_setzero_si512();
    return _mm512_sub_epi32(_mm512_dpbusd_epi32(z, a, _mm512_xor_si512(b, m)), _mm512_dpbusd_epi32(z, a, m));
}}
TRINE_HIDDEN __m512i _ZGVeN16vv_trine_dot4u8i8(__m512i a, __m512i b) {{
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), a, b);
}}
/* Four words' products accumulated in one register, `vpdpbusd` after `vpdpbusd`. */
TRINE_HIDDEN __m512i _ZGVeN16vvvvvvvv_trine_dot16u8i8(__m512i a0, __m512i b0, __m512i a1, __m512i b1, __m512i a2, __m512i b2, __m512i a3, __m512i b3) {{
    __m512i acc = _mm512_dpbusd_epi32(_mm512_setzero_si512(), a0, b0);
    acc = _mm512_dpbusd_epi32(acc, a1, b1);
    acc = _mm512_dpbusd_epi32(acc, a2, b2);
    return _mm512_dpbusd_epi32(acc, a3, b3);
}}
/* The signed products as `trine_dot4i8`'s: the a side moved by 128 into unsigned bytes, and
   128 times the b side's bytes taken back out, four words each in one register. */
TRINE_HIDDEN __m512i _ZGVeN16vvvvvvvv_trine_dot16i8(__m512i a0, __m512i b0, __m512i a1, __m512i b1, __m512i a2, __m512i b2, __m512i a3, __m512i b3) {{
    const __m512i m = _mm512_set1_epi32((int)0x80808080u);
    __m512i acc = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_xor_si512(a0, m), b0);
    acc = _mm512_dpbusd_epi32(acc, _mm512_xor_si512(a1, m), b1);
    acc = _mm512_dpbusd_epi32(acc, _mm512_xor_si512(a2, m), b2);
    acc = _mm512_dpbusd_epi32(acc, _mm512_xor_si512(a3, m), b3);
    __m512i off = _mm512_dpbusd_epi32(_mm512_setzero_si512(), m, b0);
    off = _mm512_dpbusd_epi32(off, m, b1);
    off = _mm512_dpbusd_epi32(off, m, b2);
    return _mm512_sub_epi32(acc, _mm512_dpbusd_epi32(off, m, b3));
}}
#elif defined(__AVX2__)
{avx2}/* GCC's names for the 8-lane AVX2 versions of two-argument functions, each word's four byte
   products in its own lane (nothing crosses lanes). `vpmaddwd` multiplies 16-bit halves and
   adds each pair exactly, so the signed and the unsigned product widen the even and the odd
   bytes of every 16-bit half in place (by shifts, or a mask) and add the two sums. The
   unsigned-by-signed product is `vpmaddubsw` on the bytes as they are: it saturates a pair's
   sum at 16 bits, which bytes below 128 on the unsigned side never reach (at most
   2 · 127 · 128 = 32512 in magnitude), then `vpmaddwd` by ones adds the pairs. */
TRINE_HIDDEN __m256i _ZGVdN8vv_trine_dot4i8(__m256i a, __m256i b) {{
    const __m256i a_even = _mm256_srai_epi16(_mm256_slli_epi16(a, 8), 8), a_odd = _mm256_srai_epi16(a, 8);
    const __m256i b_even = _mm256_srai_epi16(_mm256_slli_epi16(b, 8), 8), b_odd = _mm256_srai_epi16(b, 8);
    return _mm256_add_epi32(_mm256_madd_epi16(a_even, b_even), _mm256_madd_epi16(a_odd, b_odd));
}}
TRINE_HIDDEN __m256i _ZGVdN8vv_trine_dot4u8(__m256i a, __m256i b) {{
    const __m256i low = _mm256_set1_epi16(0xff);
    const __m256i even = _mm256_madd_epi16(_mm256_and_si256(a, low), _mm256_and_si256(b, low));
    return _mm256_add_epi32(even, _mm256_madd_epi16(_mm256_srli_epi16(a, 8), _mm256_srli_epi16(b, 8)));
}}
TRINE_HIDDEN __m256i _ZGVdN8vv_trine_dot4u8i8(__m256i a, __m256i b) {{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1));
}}
TRINE_HIDDEN __m256i _ZGVdN8vvvvvvvv_trine_dot16u8i8(__m256i a0, __m256i b0, __m256i a1, __m256i b1, __m256i a2, __m256i b2, __m256i a3, __m256i b3) {{
    return _mm256_add_epi32(_mm256_add_epi32(_ZGVdN8vv_trine_dot4u8i8(a0, b0), _ZGVdN8vv_trine_dot4u8i8(a1, b1)),
                            _mm256_add_epi32(_ZGVdN8vv_trine_dot4u8i8(a2, b2), _ZGVdN8vv_trine_dot4u8i8(a3, b3)));
}}
TRINE_HIDDEN __m256i _ZGVdN8vvvvvvvv_trine_dot16i8(__m256i a0, __m256i b0, __m256i a1, __m256i b1, __m256i a2, __m256i b2, __m256i a3, __m256i b3) {{
    return _mm256_add_epi32(_mm256_add_epi32(_ZGVdN8vv_trine_dot4i8(a0, b0), _ZGVdN8vv_trine_dot4i8(a1, b1)),
                            _mm256_add_epi32(_ZGVdN8vv_trine_dot4i8(a2, b2), _ZGVdN8vv_trine_dot4i8(a3, b3)));
}}
#else
TRINE_FN int trine_dot4i8(uint32_t a, uint32_t b) {{ return {bytes_i8}; }}
TRINE_FN uint32_t trine_dot4u8(uint32_t a, uint32_t b) {{ return {bytes_u8}; }}
TRINE_FN int trine_dot4u8i8(uint32_t a, uint32_t b) {{ return {bytes_u8i8}; }}
TRINE_FN int trine_dot16u8i8({dot16_params}) {{
    return trine_dot4u8i8(a0, b0) + trine_dot4u8i8(a1, b1) + trine_dot4u8i8(a2, b2) + trine_dot4u8i8(a3, b3);
}}
TRINE_FN int trine_dot16i8({dot16_params}) {{
    return trine_dot4i8(a0, b0) + trine_dot4i8(a1, b1) + trine_dot4i8(a2, b2) + trine_dot4i8(a3, b3);
}}
#endif
"#
    );
}

/// `trine_expf`: [`trine_ir::exp`]'s operations in its order, its constants printed in the
/// shortest decimal that reads back as the same double, so the function and the interpreter
/// agree bit for bit; additions, multiplications and bit moves only, which GCC vectorises where
/// a call to the C library's `exp` kept a loop scalar.
fn exp(out: &mut String) {
    use trine_ir::exp::{COEFFICIENTS as c, HIGH, LN2_HI, LN2_LO, LOG2E, LOW, SHIFT};
    let horner: String = (0..c.len() - 1)
        .rev()
        .map(|k| format!("    p = p * r + {:e};\n", c[k]))
        .collect();
    let _ = write!(
        out,
        r#"TRINE_FN float trine_expf(float x) {{
    double d = (double)x;
    d = d < {LOW:e} ? {LOW:e} : (d > {HIGH:e} ? {HIGH:e} : d);
    const double t = d * {LOG2E:e} + {SHIFT:e};
    const double n = t - {SHIFT:e};
    const double r = (d - n * {LN2_HI:e}) - n * {LN2_LO:e};
    double p = {top:e};
{horner}    uint64_t bits;
    memcpy(&bits, &t, 8);
    bits = ((bits - {shift_bits}ull + 1023ull) << 52);
    double scale;
    memcpy(&scale, &bits, 8);
    return (float)(p * scale);
}}
"#,
        top = c[c.len() - 1],
        shift_bits = SHIFT.to_bits(),
    );
}

pub(super) fn prelude(f16: bool, dot4_used: bool, exp_used: bool, reduces_f32: bool) -> String {
    let mut out = BASE.to_string();
    if reduces_f32 {
        out.push_str(V16);
    }
    if exp_used {
        exp(&mut out);
    }
    if f16 {
        out.push_str(F16);
    }
    if dot4_used {
        dot4(&mut out);
    }
    out
}
