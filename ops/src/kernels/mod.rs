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
pub mod quads;
pub mod reduce;
pub mod saxpy;
pub mod softmax;
pub mod transpose;
pub mod unpack;

use crate::case::Case;
use crate::Family;
use trine_ir::Kernel;

/// Every conformance case of the foundation kernels.
pub fn cases() -> Vec<Case> {
    FAMILIES.iter().flat_map(|f| (f.cases)()).collect()
}

/// The foundation kernels' families, in the order of [`cases`].
pub static FAMILIES: [Family; 18] = [
    Family {
        name: "saxpy",
        about: "y = a·x + y, one invocation per element; large sizes exercise grid limits",
        cases: saxpy::cases,
    },
    Family {
        name: "convert",
        about: "f32 ↔ f16 conversion, one element per invocation",
        cases: convert::cases,
    },
    Family {
        name: "bitops",
        about: "integer and bit operations: and, or, xor, shifts, popcount, division",
        cases: bitops::cases,
    },
    Family {
        name: "dot4",
        about: "packed 8-bit dot products, the building block of the 8-bit products",
        cases: dot4::cases,
    },
    Family {
        name: "unpack",
        about: "loads of storage-only types: u8 and i8 bytes and bf16, widened",
        cases: unpack::cases,
    },
    Family {
        name: "quads",
        about: "words read a quad (16 bytes) at a time, every lane and a subset",
        cases: quads::cases,
    },
    Family {
        name: "half_axpy",
        about: "y = a·x + y in f16 buffers, every operation rounded to f16",
        cases: half_axpy::cases,
    },
    Family {
        name: "affine",
        about: "scalar uniform parameters of every kind: y = clamp(x·scale + shift, lo, hi)",
        cases: affine::cases,
    },
    Family {
        name: "math",
        about: "the float math functions, one result per function per invocation",
        cases: math::cases,
    },
    Family {
        name: "add_2d",
        about: "element-wise add over a 2-D grid that the 2-D workgroup does not divide",
        cases: add_2d::cases,
    },
    Family {
        name: "reduce",
        about: "sum of each workgroup's slice: a shared-memory tree, or subgroup operations",
        cases: reduce::cases,
    },
    Family {
        name: "butterfly",
        about: "butterfly all-reduce (max) across groups of 4 invocations",
        cases: butterfly::cases,
    },
    Family {
        name: "softmax",
        about: "row softmax, one workgroup per row, max and sum reduced in shared memory",
        cases: softmax::cases,
    },
    Family {
        name: "matmul",
        about: "tiled f32 matmul C = A·B, one output tile per workgroup",
        cases: matmul::cases,
    },
    Family {
        name: "transpose",
        about: "matrix transpose through a shared-memory tile, and through an f16 tile and the f32 one over it",
        cases: transpose::cases,
    },
    Family {
        name: "prefix_sum",
        about: "inclusive prefix sum of u32 values by one workgroup",
        cases: prefix_sum::cases,
    },
    Family {
        name: "copy_lines",
        about: "asynchronous copies from global to shared memory",
        cases: copy_lines::cases,
    },
    Family {
        name: "group_product",
        about: "warpgroup products c = a·bᵀ in f16, staged in a swizzled layout",
        cases: group_product::cases,
    },
];

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
