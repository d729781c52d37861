//! Matrix tiles ([`trine_ir::TileOp`]) in CUDA and in HIP on RDNA3 (gfx11).
//!
//! # CUDA
//!
//! Each tile is the registers of one warp's
//! `mma.sync.aligned.m16n8k16` fragments (sm_80 and later), and a 16×16×16 product is two of
//! those instructions, one per half of the accumulator's columns. Lane `l` holds, with
//! `g = l / 4` and `q = 2·(l % 4)` (PTX ISA, "Matrix Fragments for mma.m16n8k16"):
//! - A (f16, 4 words of two halves): (g, q..q+1), (g+8, q..q+1), (g, q+8..q+9), (g+8, q+8..q+9);
//! - B (f16, two words per half `h` of the columns n = 8h + g): (q..q+1, n), (q+8..q+9, n);
//! - the accumulator (f32, four per half `h`): (g, 8h+q), (g, 8h+q+1), (g+8, 8h+q),
//!   (g+8, 8h+q+1).
//!
//! A pair of halves adjacent in memory (A's row pairs row-major, B's column pairs column-major)
//! is one 32-bit load: the IR's offsets and strides are multiples of 8 elements, so such a
//! pair starts at an even element. From shared memory (whose arrays the lowering aligns to 16
//! bytes) an A or B tile is one `ldmatrix.x4`: four 8 × 8 blocks of the tile, each of whose 8
//! rows of 16 bytes one lane addresses, in the order of the fragment's registers; `.trans`
//! where the fragment's pairs run across memory rows instead of along them. No header
//! beyond `cuda_fp16.h` is needed.
//!
//! # HIP (gfx11, wave32)
//!
//! A 16×16×16 product is one `v_wmma_f32_16x16x16_f16` (clang's
//! `__builtin_amdgcn_wmma_f32_16x16x16_f16_w32`), and each tile a vector of one lane's
//! operands (RDNA3 ISA, "Wave Matrix Multiply Accumulate"; AMD's matrix instruction
//! calculator gives the same mapping). With `i = l % 16` for lane `l`:
//! - A (16 halves): row `i`, element `e` its column `e` (K);
//! - B (16 halves): column `i`, element `e` its row `e` (K);
//! - the accumulator (8 floats): element `e` is (2e + l / 16, i).
//!
//! RDNA3 reads A and B from lanes 0–15 and wants lanes 16–31 to hold the same values, which
//! these loads give by indexing with `l % 16`. gfx12 (RDNA4) lays its operands out otherwise
//! and takes other builtins, so the HIP backend offers tiles on gfx11 only. From shared
//! memory, where a lane's 16 elements are adjacent (A row-major, B column-major), they are
//! two 16-byte loads: the IR's offsets and strides are multiples of 8 elements and the
//! lowering aligns shared arrays to 16 bytes. Otherwise, and from buffers (whose bindings
//! may sit at any 4-byte offset), the loads read element by element.

/// The helpers, after the f16 prelude (`trine_f16` is `__half`).
pub(crate) const TILES_CUDA: &str = r#"struct trine_tile_a { unsigned int r[4]; };
struct trine_tile_b { unsigned int r[4]; };
struct trine_tile_acc { float r[8]; };
__device__ __forceinline__ unsigned int trine_tile_at(unsigned int o, unsigned int s, bool row_major, unsigned int r, unsigned int c) {
    return row_major ? o + r * s + c : o + c * s + r;
}
__device__ __forceinline__ unsigned int trine_tile_pair(const trine_f16* p, unsigned int o, unsigned int s, bool row_major, unsigned int r, unsigned int c, bool along_row) {
    const unsigned int i = trine_tile_at(o, s, row_major, r, c);
    if (row_major == along_row) return *(const unsigned int*)(p + i);
    const unsigned int j = along_row ? trine_tile_at(o, s, row_major, r, c + 1u) : trine_tile_at(o, s, row_major, r + 1u, c);
    return (unsigned int)__half_as_ushort(p[i]) | ((unsigned int)__half_as_ushort(p[j]) << 16);
}
__device__ __forceinline__ void trine_tile_zero(trine_tile_a& t) { for (int i = 0; i < 4; i++) t.r[i] = 0u; }
__device__ __forceinline__ void trine_tile_zero(trine_tile_b& t) { for (int i = 0; i < 4; i++) t.r[i] = 0u; }
__device__ __forceinline__ void trine_tile_zero(trine_tile_acc& t) { for (int i = 0; i < 8; i++) t.r[i] = 0.0f; }
__device__ __forceinline__ void trine_tile_load(trine_tile_a& t, const trine_f16* p, unsigned int o, unsigned int s, bool row_major, unsigned int lane) {
    const unsigned int g = lane >> 2, q = (lane & 3u) * 2u;
    t.r[0] = trine_tile_pair(p, o, s, row_major, g, q, true);
    t.r[1] = trine_tile_pair(p, o, s, row_major, g + 8u, q, true);
    t.r[2] = trine_tile_pair(p, o, s, row_major, g, q + 8u, true);
    t.r[3] = trine_tile_pair(p, o, s, row_major, g + 8u, q + 8u, true);
}
__device__ __forceinline__ void trine_tile_load(trine_tile_b& t, const trine_f16* p, unsigned int o, unsigned int s, bool row_major, unsigned int lane) {
    const unsigned int g = lane >> 2, q = (lane & 3u) * 2u;
    for (unsigned int h = 0; h < 2u; h++) {
        t.r[2 * h] = trine_tile_pair(p, o, s, row_major, q, 8u * h + g, false);
        t.r[2 * h + 1] = trine_tile_pair(p, o, s, row_major, q + 8u, 8u * h + g, false);
    }
}
__device__ __forceinline__ void trine_tile_load(trine_tile_acc& t, const float* p, unsigned int o, unsigned int s, bool row_major, unsigned int lane) {
    const unsigned int g = lane >> 2, q = (lane & 3u) * 2u;
    for (unsigned int h = 0; h < 2u; h++) {
        for (unsigned int i = 0; i < 4u; i++) {
            t.r[4 * h + i] = p[trine_tile_at(o, s, row_major, g + 8u * (i >> 1), 8u * h + q + (i & 1u))];
        }
    }
}
__device__ __forceinline__ void trine_tile_store(const trine_tile_acc& t, float* p, unsigned int o, unsigned int s, bool row_major, unsigned int lane) {
    const unsigned int g = lane >> 2, q = (lane & 3u) * 2u;
    for (unsigned int h = 0; h < 2u; h++) {
        for (unsigned int i = 0; i < 4u; i++) {
            p[trine_tile_at(o, s, row_major, g + 8u * (i >> 1), 8u * h + q + (i & 1u))] = t.r[4 * h + i];
        }
    }
}
__device__ __forceinline__ void trine_ldmatrix_x4(unsigned int (&r)[4], const trine_f16* p, bool trans) {
    const unsigned int a = (unsigned int)__cvta_generic_to_shared(p);
    if (trans) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
            : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
    } else {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
            : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
    }
}
__device__ __forceinline__ void trine_tile_load_shared(trine_tile_a& t, const trine_f16* p, unsigned int o, unsigned int s, bool row_major, unsigned int lane) {
    const unsigned int i = lane >> 3, j = lane & 7u, r0 = 8u * (i & 1u), c0 = 8u * (i >> 1);
    trine_ldmatrix_x4(t.r, p + (row_major ? o + (r0 + j) * s + c0 : o + (c0 + j) * s + r0), !row_major);
}
__device__ __forceinline__ void trine_tile_load_shared(trine_tile_b& t, const trine_f16* p, unsigned int o, unsigned int s, bool row_major, unsigned int lane) {
    const unsigned int i = lane >> 3, j = lane & 7u, k0 = 8u * (i & 1u), n0 = 8u * (i >> 1);
    trine_ldmatrix_x4(t.r, p + (row_major ? o + (k0 + j) * s + n0 : o + (n0 + j) * s + k0), row_major);
}
__device__ __forceinline__ void trine_tile_load_shared(trine_tile_acc& t, const float* p, unsigned int o, unsigned int s, bool row_major, unsigned int lane) {
    trine_tile_load(t, p, o, s, row_major, lane);
}
__device__ __forceinline__ void trine_tile_mma(trine_tile_acc& c, const trine_tile_a& a, const trine_tile_b& b) {
    for (int h = 0; h < 2; h++) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
            : "+f"(c.r[4 * h]), "+f"(c.r[4 * h + 1]), "+f"(c.r[4 * h + 2]), "+f"(c.r[4 * h + 3])
            : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[2 * h]), "r"(b.r[2 * h + 1]));
    }
}
"#;

/// The HIP helpers for gfx11, after the f16 prelude (`trine_f16` is `_Float16`).
pub(crate) const TILES_HIP: &str = r#"typedef _Float16 trine_half16 __attribute__((ext_vector_type(16)));
typedef float trine_float8 __attribute__((ext_vector_type(8)));
typedef unsigned int trine_u32x4 __attribute__((ext_vector_type(4)));
union trine_tile_words { trine_half16 v; trine_u32x4 w[2]; };
struct trine_tile_a { trine_half16 v; };
struct trine_tile_b { trine_half16 v; };
struct trine_tile_acc { trine_float8 v; };
__device__ __forceinline__ unsigned int trine_tile_at(unsigned int o, unsigned int s, bool row_major, unsigned int r, unsigned int c) {
    return row_major ? o + r * s + c : o + c * s + r;
}
__device__ __forceinline__ void trine_tile_zero(trine_tile_a& t) { for (int e = 0; e < 16; e++) t.v[e] = (trine_f16)0.0f; }
__device__ __forceinline__ void trine_tile_zero(trine_tile_b& t) { for (int e = 0; e < 16; e++) t.v[e] = (trine_f16)0.0f; }
__device__ __forceinline__ void trine_tile_zero(trine_tile_acc& t) { for (int e = 0; e < 8; e++) t.v[e] = 0.0f; }
__device__ __forceinline__ void trine_tile_load(trine_tile_a& t, const trine_f16* p, unsigned int o, unsigned int s, bool row_major, unsigned int lane) {
    const unsigned int i = lane % 16u;
    for (unsigned int e = 0; e < 16u; e++) t.v[e] = p[trine_tile_at(o, s, row_major, i, e)];
}
__device__ __forceinline__ void trine_tile_load(trine_tile_b& t, const trine_f16* p, unsigned int o, unsigned int s, bool row_major, unsigned int lane) {
    const unsigned int i = lane % 16u;
    for (unsigned int e = 0; e < 16u; e++) t.v[e] = p[trine_tile_at(o, s, row_major, e, i)];
}
__device__ __forceinline__ void trine_tile_load(trine_tile_acc& t, const float* p, unsigned int o, unsigned int s, bool row_major, unsigned int lane) {
    const unsigned int i = lane % 16u, h = (lane / 16u) % 2u;
    for (unsigned int e = 0; e < 8u; e++) t.v[e] = p[trine_tile_at(o, s, row_major, 2u * e + h, i)];
}
__device__ __forceinline__ void trine_tile_store(const trine_tile_acc& t, float* p, unsigned int o, unsigned int s, bool row_major, unsigned int lane) {
    const unsigned int i = lane % 16u, h = (lane / 16u) % 2u;
    for (unsigned int e = 0; e < 8u; e++) p[trine_tile_at(o, s, row_major, 2u * e + h, i)] = t.v[e];
}
__device__ __forceinline__ void trine_tile_lines(trine_half16& v, const trine_f16* p) {
    const trine_u32x4* q = (const trine_u32x4*)p;
    trine_tile_words w;
    w.w[0] = q[0];
    w.w[1] = q[1];
    v = w.v;
}
__device__ __forceinline__ void trine_tile_load_shared(trine_tile_a& t, const trine_f16* p, unsigned int o, unsigned int s, bool row_major, unsigned int lane) {
    if (row_major) trine_tile_lines(t.v, p + o + (lane % 16u) * s);
    else trine_tile_load(t, p, o, s, row_major, lane);
}
__device__ __forceinline__ void trine_tile_load_shared(trine_tile_b& t, const trine_f16* p, unsigned int o, unsigned int s, bool row_major, unsigned int lane) {
    if (!row_major) trine_tile_lines(t.v, p + o + (lane % 16u) * s);
    else trine_tile_load(t, p, o, s, row_major, lane);
}
__device__ __forceinline__ void trine_tile_load_shared(trine_tile_acc& t, const float* p, unsigned int o, unsigned int s, bool row_major, unsigned int lane) {
    trine_tile_load(t, p, o, s, row_major, lane);
}
__device__ __forceinline__ void trine_tile_mma(trine_tile_acc& c, const trine_tile_a& a, const trine_tile_b& b) {
    c.v = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(a.v, b.v, c.v);
}
"#;
