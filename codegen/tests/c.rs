//! The C lowering's choice of packed dot product: a signed product with one side's bytes
//! known to be below 128 (a mask by a literal without any byte's top bit) is the same value
//! as unsigned bytes by signed ones, which the CPU computes in one instruction.

use trine_codegen::{c, COptions};
use trine_ir::{Access, Kernel, KernelBuilder, Scalar};

fn dot(mask: Option<u32>, masked_lhs: bool) -> Kernel {
    let k = KernelBuilder::new("dot_choice", [16, 1, 1]);
    let a = k.buffer("a", Scalar::U32, Access::Read);
    let b = k.buffer("b", Scalar::U32, Access::Read);
    let y = k.buffer("y", Scalar::I32, Access::Write);
    let i = k.global_id(0);
    let (x, w) = (k.load(a, i), k.load(b, i));
    let x = mask.map_or(x, |m| x & k.u32(m));
    let v = if masked_lhs {
        x.dot4_i8(w)
    } else {
        w.dot4_i8(x)
    };
    k.store(y, i, v);
    k.finish()
}

fn lowered(k: &Kernel) -> String {
    let text = c(k, &COptions::new(16)).unwrap();
    text.split_once("void trine_dot_choice")
        .map(|(_, body)| body.to_string())
        .unwrap_or(text)
}

#[test]
fn a_product_with_small_bytes_on_one_side_is_unsigned_by_signed() {
    for masked_lhs in [true, false] {
        let body = lowered(&dot(Some(0x0f0f_0f0f), masked_lhs));
        assert!(body.contains("trine_dot4u8i8("), "{body}");
        assert!(!body.contains("trine_dot4i8("), "{body}");
    }
    // A byte's top bit survives this mask, and nothing is known without one.
    for mask in [Some(0x8f0f_0f0f), None] {
        let body = lowered(&dot(mask, true));
        assert!(body.contains("trine_dot4i8("), "{body}");
        assert!(!body.contains("trine_dot4u8i8("), "{body}");
    }
}
