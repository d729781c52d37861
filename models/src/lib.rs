//! trine-models: the kernel library and the conformance harness.
//!
//! The foundation kernels ([`kernels`]) exercise every part of the IR; [`ops`] is the
//! transformer op library; the graph executor grows here.

pub mod assets;
pub mod conformance;
pub mod gguf;
pub mod kernels;
pub mod llama;
pub mod ops;
pub mod tokenizer;

/// Every conformance case: the foundation kernels, then the op library.
pub fn suite() -> Vec<conformance::Case> {
    let mut v = kernels::cases();
    v.extend(ops::cases());
    v
}

/// Every distinct kernel of the suite (variants and fallbacks included), by name.
pub fn all_kernels() -> Vec<trine_ir::Kernel> {
    let mut out: Vec<trine_ir::Kernel> = vec![];
    for c in suite() {
        for k in std::iter::once(c.kernel).chain(c.fallback) {
            if !out.iter().any(|o| o.name == k.name) {
                out.push(k);
            }
        }
    }
    out
}
