//! Warpgroup products ([`trine_ir::GroupOp`]) in CUDA on sm_90a (Hopper): `wgmma.mma_async`
//! with both operands in shared memory (PTX ISA, "Asynchronous Warpgroup Level Matrix
//! Multiply-Accumulate Operations").
//!
//! An accumulator of N columns is `N / 2` floats per invocation. Invocation `t` of its
//! warpgroup, with `w = t / 32`, `g = (t % 32) / 4` and `q = 2·(t % 4)`, holds in elements
//! `4j` to `4j + 3` the accumulator's (16w + g, 8j + q), (16w + g, 8j + q + 1),
//! (16w + g + 8, 8j + q), (16w + g + 8, 8j + q + 1): each subgroup's 16 rows laid out as
//! `mma.m16n8`'s accumulator, for each block of 8 columns `j`.
//!
//! An operand is named by a shared-memory descriptor: its start address over 16 (the
//! operand's offset, plus 32 bytes for each further 16 columns of K inside the 128-byte
//! rows), the stride between groups of 8 rows (1024 bytes) and the 128-byte swizzle, which
//! is the IR's `group_swizzle` when the swizzle's 1024-byte atoms are aligned: the lowering
//! aligns the shared arrays of such a kernel to 1024 bytes, and the IR's offsets are whole
//! atoms. The tensor cores read shared memory through the asynchronous proxy, so in such a
//! kernel each workgroup barrier is preceded by `fence.proxy.async.shared::cta`, which makes
//! the invocation's writes to shared memory visible to products started after the barrier.

use std::fmt::Write;

/// Bytes the lowering aligns a group kernel's shared arrays to: one swizzle atom.
pub(crate) const GROUP_ALIGN: u64 = 1024;

/// The statement (without `;`) of a workgroup barrier in a kernel with warpgroup products.
pub(crate) const GROUP_BARRIER: &str =
    "asm volatile(\"fence.proxy.async.shared::cta;\" ::: \"memory\"); __syncthreads()";

/// The helpers every group kernel uses, after the f16 prelude.
pub(crate) const GROUPS_CUDA: &str = r#"__device__ __forceinline__ unsigned long long trine_group_desc(const trine_f16* p) {
    const unsigned long long a = (unsigned long long)__cvta_generic_to_shared(p);
    return ((a & 0x3FFFFull) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}
template <int N> __device__ __forceinline__ void trine_group_zero(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) d[i] = 0.0f;
}
template <int P> __device__ __forceinline__ void trine_group_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(P) : "memory");
}
template <int N> __device__ __forceinline__ void trine_group_store(const float (&d)[N], float* p, unsigned int o, unsigned int s, unsigned int t) {
    const unsigned int r = 16u * (t / 32u) + (t % 32u) / 4u, q = 2u * (t % 4u);
#pragma unroll
    for (int j = 0; j < N / 4; j++) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            p[o + (r + 8u * (i / 2)) * s + 8u * j + q + (i % 2)] = d[4 * j + i];
        }
    }
}
"#;

/// `trine_group_mma_n{cols}`: `wgmma.fence`, the four products of one [`trine_ir::GROUP_K`]
/// columns of K, and their commit, for an accumulator of `cols` columns.
pub(crate) fn mma_helper(cols: u32) -> String {
    let regs = cols / 2;
    let list = (0..regs)
        .map(|i| format!("%{i}"))
        .collect::<Vec<_>>()
        .join(", ");
    let outs = (0..regs)
        .map(|i| format!("\"+f\"(d[{i}])"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut out = String::new();
    let _ = writeln!(
        out,
        "__device__ __forceinline__ void trine_group_mma_n{cols}(float (&d)[{regs}], const trine_f16* a, const trine_f16* b) {{"
    );
    out.push_str("    asm volatile(\"wgmma.fence.sync.aligned;\" ::: \"memory\");\n");
    out.push_str(
        "    const unsigned long long da = trine_group_desc(a), db = trine_group_desc(b);\n",
    );
    out.push_str("#pragma unroll\n    for (int k = 0; k < 4; k++) {\n");
    let _ = writeln!(
        out,
        "        asm volatile(\"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{scale}, 0;\\n\"\n            \
         \"wgmma.mma_async.sync.aligned.m64n{cols}k16.f32.f16.f16 {{{list}}}, %{da}, %{db}, p, 1, 1, 0, 0;\\n}}\\n\"\n            \
         : {outs}\n            : \"l\"(da + 2ull * k), \"l\"(db + 2ull * k), \"r\"(1) : \"memory\");",
        scale = regs + 2,
        da = regs,
        db = regs + 1,
    );
    out.push_str("    }\n");
    out.push_str("    asm volatile(\"wgmma.commit_group.sync.aligned;\" ::: \"memory\");\n}\n");
    out
}
