//! The foundation kernels, each written once in the IR, with conformance cases and a
//! plain-Rust reference for every output.

pub mod add_2d;
pub mod affine;
pub mod bitops;
pub mod butterfly;
pub mod convert;
pub mod copy_lines;
pub mod dot4;
pub mod group_product;
pub mod half_axpy;
pub mod math;
pub mod matmul;
pub mod prefix_sum;
pub mod reduce;
pub mod saxpy;
pub mod softmax;
pub mod transpose;
pub mod unpack;

use crate::case::Case;
use trine_ir::Kernel;

/// Every conformance case of the foundation kernels.
pub fn cases() -> Vec<Case> {
    [
        saxpy::cases as fn() -> Vec<Case>,
        convert::cases,
        bitops::cases,
        dot4::cases,
        unpack::cases,
        half_axpy::cases,
        affine::cases,
        math::cases,
        add_2d::cases,
        reduce::cases,
        butterfly::cases,
        softmax::cases,
        matmul::cases,
        transpose::cases,
        prefix_sum::cases,
        copy_lines::cases,
        group_product::cases,
    ]
    .iter()
    .flat_map(|f| f())
    .collect()
}

/// Every distinct kernel (variants and fallbacks included), by name.
pub fn kernels() -> Vec<Kernel> {
    let mut out: Vec<Kernel> = vec![];
    for c in cases() {
        for k in std::iter::once(c.kernel).chain(c.fallback) {
            if !out.iter().any(|o| o.name == k.name) {
                out.push(k);
            }
        }
    }
    out
}
