//! Loads of storage-only types, as packed weights need them: u8 and i8 bytes widened to
//! integers, bf16 widened to f32.

use crate::case::*;
use half::bf16;
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar};

const WG: u32 = 64;

/// `out[i] = f32(u8[i]) + f32(i8[i]) * bf16[i]`.
pub fn kernel() -> Kernel {
    let k = KernelBuilder::new("unpack_bytes", [WG, 1, 1]);
    let u = k.buffer("u", Scalar::U8, Access::Read);
    let s = k.buffer("s", Scalar::I8, Access::Read);
    let h = k.buffer("h", Scalar::BF16, Access::Read);
    let out = k.buffer("out", Scalar::F32, Access::Write);
    let n = k.param("n", Scalar::U32);
    let i = k.global_id(0);
    k.if_(i.lt(n), || {
        let uv = k.load(u, i).cast(Scalar::F32);
        let sv = k.load(s, i).cast(Scalar::F32);
        k.store(out, i, sv.fma(k.load(h, i), uv));
    });
    k.finish()
}

pub fn cases() -> Vec<Case> {
    // Byte buffers are bound in whole 32-bit words on Vulkan, so n is a multiple of 4.
    let n = 1028u32;
    let mut r = Rng::new(11);
    let u: Vec<u8> = (0..n).map(|_| r.u32() as u8).collect();
    let s: Vec<u8> = (0..n).map(|_| r.u32() as u8).collect();
    let h: Vec<bf16> = r
        .f32s(n as usize, -4.0, 4.0)
        .into_iter()
        .map(bf16::from_f32)
        .collect();
    let want = (0..n as usize)
        .map(|i| (s[i] as i8) as f64 * h[i].to_f64() + u[i] as f64)
        .collect();
    vec![Case::new(
        format!("unpack/u8,i8,bf16/n={n}"),
        kernel(),
        [n.div_ceil(WG), 1, 1],
    )
    .input("u", Scalar::U8, u)
    .input("s", Scalar::I8, s)
    .input("h", Scalar::BF16, bytemuck::cast_slice(&h).to_vec())
    .output("out", Scalar::F32, vec![0; n as usize * 4], want)
    .params(vec![ParamValue::U32(n)])]
}
