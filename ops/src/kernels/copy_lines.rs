//! Asynchronous copies ([`trine_ir::CopyOp`]): each workgroup copies a block of f16 values
//! into shared memory in lines of 16 bytes, as two batches, and writes each half of the
//! block reversed as f32 once its batch has landed: the first while the second may still be
//! in flight. Each invocation reads lines other invocations copied, so the waits and the
//! barriers after them are what makes the values visible. Devices without asynchronous
//! copies run the same staging through registers.

use crate::case::*;
use half::f16;
use trine_ir::{Access, Kernel, KernelBuilder, Scalar};

const WG: u32 = 64;
/// f16 elements in a line, and in each half of a workgroup's block.
const LINE: u32 = trine_ir::COPY_BYTES / 2;
const HALF: u32 = WG * LINE;

/// The kernel; `copies` chooses asynchronous copies or loads and stores of each element.
pub fn kernel(copies: bool) -> Kernel {
    let name = if copies {
        "copy_lines"
    } else {
        "copy_lines_staged"
    };
    let k = KernelBuilder::new(name, [WG, 1, 1]);
    let src = k.buffer("src", Scalar::F16, Access::Read);
    let dst = k.buffer("dst", Scalar::F32, Access::Write);
    let block = k.shared("block", Scalar::F16, 2 * HALF);
    let lid = k.local_index();
    let base = k.workgroup_id(0) * k.u32(2 * HALF);
    let put = |half: u32| {
        let from = base + k.u32(half * HALF) + lid * k.u32(LINE);
        let to = k.u32(half * HALF) + lid * k.u32(LINE);
        if copies {
            k.copy_async(src, from, block, to);
            k.copy_commit();
        } else {
            for i in 0..LINE {
                let v = k.load(src, from + k.u32(i)).cast(Scalar::F16);
                k.store_shared(block, to + k.u32(i), v);
            }
        }
    };
    let write = |half: u32| {
        for j in 0..LINE {
            let i = k.u32(j * WG) + lid;
            let v = k.load_shared(block, k.u32(half * HALF + HALF - 1) - i);
            k.store(dst, base + k.u32(half * HALF) + i, v.cast(Scalar::F32));
        }
    };
    put(0);
    put(1);
    if copies {
        k.copy_wait(1);
    }
    k.barrier();
    write(0);
    if copies {
        k.copy_wait(0);
    }
    k.barrier();
    write(1);
    k.finish()
}

pub fn cases() -> Vec<Case> {
    let workgroups = 3u32;
    let n = (workgroups * 2 * HALF) as usize;
    let mut r = Rng::new(41);
    let x: Vec<f16> = r
        .f32s(n, -4.0, 4.0)
        .into_iter()
        .map(f16::from_f32)
        .collect();
    let half = HALF as usize;
    let want = (0..n)
        .map(|i| {
            let start = i - i % half;
            x[start + half - 1 - i % half].to_f64()
        })
        .collect();
    vec![
        Case::new("copy_lines/f16", kernel(true), [workgroups, 1, 1])
            .input("src", Scalar::F16, f16_bytes(&x))
            .output("dst", Scalar::F32, vec![0; n * 4], want)
            .bound(NMSE_EXACT)
            .fallback(kernel(false)),
    ]
}
