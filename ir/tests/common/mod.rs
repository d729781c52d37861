//! What the matrix product tests share: exact inputs and their byte forms.

use half::f16;

pub fn to_f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

pub fn f16s(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|&x| f16::from_f32(x).to_le_bytes())
        .collect()
}

/// `a` [m × k] and `bt` [n × k] of small integers and halves: exact in f16, and their
/// products' sums exact in f32.
pub fn inputs(m: u32, n: u32, k: u32) -> (Vec<f32>, Vec<f32>) {
    let a = (0..m * k)
        .map(|i| ((i * 7 % 13) as f32 - 6.0) / 2.0)
        .collect();
    let bt = (0..n * k)
        .map(|i| ((i * 5 % 11) as f32 - 5.0) / 4.0)
        .collect();
    (a, bt)
}
