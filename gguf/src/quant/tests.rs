//! What every type shares: sizes, errors, zeros, and the error a round trip through the type
//! costs.

use super::*;

/// splitmix64's uniform f32s in [lo, hi), as the synthetic models draw them.
pub(super) fn uniform(seed: u64, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    let mut rng = crate::synth::Rng::new(seed);
    (0..n).map(|_| rng.f32(lo, hi)).collect()
}

fn nmse(x: &[f32], y: &[f64]) -> f64 {
    let err: f64 = x
        .iter()
        .zip(y)
        .map(|(&a, b)| (f64::from(a) - b).powi(2))
        .sum();
    err / x.iter().map(|&a| f64::from(a).powi(2)).sum::<f64>()
}

#[test]
fn block_sizes_match_ggml() {
    // ggml.c's type_traits (blck_size, type_size), in WeightType::ALL's order.
    let sizes: Vec<_> = WeightType::ALL
        .iter()
        .map(|t| (t.block_elems(), t.block_bytes()))
        .collect();
    assert_eq!(
        sizes,
        [
            (1, 4),
            (1, 2),
            (32, 34),
            (32, 18),
            (32, 20),
            (32, 22),
            (32, 24),
            (256, 84),
            (256, 110),
            (256, 144),
            (256, 176),
            (256, 210),
            (256, 292),
            (32, 18),
            (256, 136),
        ]
    );
    assert_eq!(WeightType::Q4_1.bytes("t", "n", 64), Ok(40));
    assert_eq!(WeightType::Q4_K.bytes("t", "n", 512), Ok(288));
    assert_eq!(
        WeightType::Q8_0.bytes("t", "n", 33),
        Err(BlockError::NotMultiple {
            op: "t",
            what: "n",
            value: 33,
            multiple: 32
        })
    );
}

#[test]
fn names_are_ggmls_in_lower_case() {
    let names: Vec<_> = WeightType::ALL.iter().map(|t| t.name()).collect();
    assert_eq!(
        names,
        [
            "f32", "f16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k",
            "q6_k", "q8_k", "iq4_nl", "iq4_xs"
        ]
    );
}

#[test]
fn partial_blocks_and_short_bytes_are_errors() {
    for ty in WeightType::ALL.into_iter().filter(|t| t.is_quantized()) {
        let n = ty.block_elems();
        for bad in [1, n - 1, n + 16] {
            let not_multiple = |op| BlockError::NotMultiple {
                op,
                what: "element count",
                value: bad,
                multiple: n,
            };
            assert_eq!(
                quantize(ty, &vec![0.5; bad]),
                Err(not_multiple("quantize")),
                "{ty}"
            );
            assert_eq!(
                dequantize(ty, &vec![0; 4 * ty.block_bytes()], bad),
                Err(not_multiple("dequantize")),
                "{ty}"
            );
        }
        assert_eq!(
            dequantize(ty, &vec![0; 2 * ty.block_bytes() - 1], 2 * n),
            Err(BlockError::TooSmall {
                op: "dequantize",
                what: "bytes",
                needed: 2 * ty.block_bytes(),
                found: 2 * ty.block_bytes() - 1
            }),
            "{ty}"
        );
    }
}

#[test]
fn zeros_give_zeros() {
    for ty in WeightType::ALL {
        let q = quantize(ty, &[0.0; 512]).unwrap();
        assert_eq!(q.len(), 512 / ty.block_elems() * ty.block_bytes(), "{ty}");
        assert!(
            dequantize(ty, &q, 512).unwrap().iter().all(|&v| v == 0.0),
            "{ty}"
        );
    }
}

/// Twice the NMSE of rounding U(−1, 1) to a grid of step h, (h²/12)/(1/3) = h²/4, with
/// h = 2^(1 − b) for the b-bit symmetric types (and IQ4's 4-bit grid, whose steps are no
/// coarser on average) and h = 2/(2^b − 1) for the types with a min: the factor two is room for
/// the scales' own rounding (an f16 d, sub-block scales of 4 to 8 bits), which costs the
/// K-quants most. f16 rounds each value within 2^-11 of itself. Measured with seed 11: q8_0
/// 1.4e-5, q8_k 1.5e-5, q6_k 2.1e-4, q5_0 9.7e-4, q5_1 8.6e-4, q5_k 8.7e-4, q4_0 4.2e-3, q4_1
/// 3.7e-3, q4_k 3.7e-3, iq4_nl 4.7e-3, iq4_xs 4.7e-3, q3_k 1.8e-2, q2_k 7.7e-2.
fn nmse_bound(ty: WeightType) -> f64 {
    let symmetric = |bits: i32| 2.0 * 4f64.powi(-bits);
    let with_min = |bits: i32| 2.0 / (2f64.powi(bits) - 1.0).powi(2);
    match ty {
        WeightType::F32 => 0.0,
        WeightType::F16 => 2f64.powi(-22),
        WeightType::Q8_0 | WeightType::Q8_K | WeightType::Q8_0x8 => symmetric(8),
        WeightType::Q6_K => symmetric(6),
        WeightType::Q5_0 => symmetric(5),
        WeightType::Q5_1 | WeightType::Q5_K => with_min(5),
        WeightType::Q4_0 | WeightType::IQ4_NL | WeightType::IQ4_XS | WeightType::Q4_0x8 => {
            symmetric(4)
        }
        WeightType::Q4_1 | WeightType::Q4_K | WeightType::Q4_1x8 => with_min(4),
        WeightType::Q3_K => symmetric(3),
        WeightType::Q2_K => with_min(2),
    }
}

#[test]
fn round_trip_error_is_within_each_types_bound() {
    let x = uniform(11, 256 * 64, -1.0, 1.0);
    for ty in WeightType::ALL {
        let back = dequantize(ty, &quantize(ty, &x).unwrap(), x.len()).unwrap();
        let e = nmse(&x, &back);
        assert!(
            e <= nmse_bound(ty),
            "{ty}: NMSE {e:.3e} > {:.3e}",
            nmse_bound(ty)
        );
    }
}

/// A block's runs give exactly [`dequantize`]'s values, for every format that has them, over
/// random blocks (their scales, minimums and codes all drawn, not only what the quantizers
/// write) and quantized ones.
#[test]
fn runs_are_the_dequantized_values() {
    let x = uniform(5, 256 * 8, -3.0, 3.0);
    let mut with_runs = 0;
    for ty in WeightType::ALL.into_iter().chain(WeightType::GROUPED) {
        let random: Vec<u8> = (0..8 * ty.block_bytes())
            .map(|i| (uniform(i as u64, 1, 0.0, 256.0)[0] as u32 & 255) as u8)
            .collect();
        for bytes in [quantize(ty, &x).unwrap(), random] {
            let n = bytes.len() / ty.block_bytes() * ty.block_elems();
            let want = dequantize(ty, &bytes, n).unwrap();
            let Some(runs) = bytes
                .chunks(ty.block_bytes())
                .map(|b| runs(ty, b))
                .collect::<Option<Vec<_>>>()
            else {
                continue;
            };
            with_runs += 1;
            let got: Vec<f64> = runs
                .iter()
                .flatten()
                .flat_map(|r| {
                    r.codes
                        .iter()
                        .map(|&c| f64::from(r.scale) * f64::from(c) + f64::from(r.min))
                })
                .collect();
            // Random f16 scales may be infinite or NaN, on both sides alike.
            let same = |a: f64, b: f64| a == b || (a.is_nan() && b.is_nan());
            assert!(
                got.len() == want.len() && got.iter().zip(&want).all(|(&a, &b)| same(a, b)),
                "{ty}"
            );
        }
    }
    assert_eq!(with_runs, 2 * 12);
}

/// Regrouping moves each group's scales to its front and its codes after them, in block order
/// (byte for byte where the file has them), gives the file type's values, and is what
/// quantizing to the grouped type writes; other types and partial groups are refused.
#[test]
fn groups_hold_the_files_bytes_scales_first() {
    let x = uniform(9, 512, -2.0, 2.0);
    for file in [WeightType::Q4_0, WeightType::Q4_1, WeightType::Q8_0] {
        let ty = file.grouped().unwrap();
        assert_eq!((ty.file_type(), ty.block_elems()), (file, 256));
        let bytes = quantize(file, &x).unwrap();
        let grouped = regroup(file, &bytes).unwrap();
        assert_eq!(grouped, quantize(ty, &x).unwrap(), "{ty}");
        let (fb, scales) = (
            file.block_bytes(),
            if file == WeightType::Q4_1 { 4 } else { 2 },
        );
        let codes = fb - scales;
        for g in 0..2 {
            let (group, blocks) = (&grouped[g * 8 * fb..], &bytes[g * 8 * fb..]);
            for b in 0..8 {
                let block = &blocks[b * fb..][..fb];
                assert_eq!(
                    &group[b * scales..][..scales],
                    &block[..scales],
                    "{ty} {g} {b}"
                );
                let at = 8 * scales + b * codes;
                assert_eq!(&group[at..][..codes], &block[scales..], "{ty} {g} {b}");
            }
        }
        assert_eq!(
            dequantize(ty, &grouped, 512).unwrap(),
            dequantize(file, &bytes, 512).unwrap(),
            "{ty}"
        );
        assert_eq!(
            regroup(file, &bytes[..fb * 7]),
            Err(BlockError::NotMultiple {
                op: "regroup",
                what: "bytes",
                value: fb * 7,
                multiple: 8 * fb
            })
        );
    }
    let q4k = quantize(WeightType::Q4_K, &x).unwrap();
    assert_eq!(
        regroup(WeightType::Q4_K, &q4k),
        Err(BlockError::NoGroups {
            ty: WeightType::Q4_K
        })
    );
    assert_eq!(
        [WeightType::Q4_0x8, WeightType::Q4_1x8, WeightType::Q8_0x8].map(WeightType::block_bytes),
        [144, 160, 272]
    );
}

/// Each run of a format with [`run_bases`] is its block's bases times integers of
/// −128..=127, bit for bit, over quantized blocks and random ones whose bases are finite.
#[test]
fn runs_are_their_bases_times_small_integers() {
    let x = uniform(7, 256 * 8, -3.0, 3.0);
    let mut factored = vec![];
    for ty in WeightType::ALL {
        let random: Vec<u8> = (0..8 * ty.block_bytes())
            .map(|i| (uniform(i as u64 + 99, 1, 0.0, 256.0)[0] as u32 & 255) as u8)
            .collect();
        for bytes in [quantize(ty, &x).unwrap(), random] {
            for block in bytes.chunks(ty.block_bytes()) {
                let Some((d, m)) = run_bases(ty, block) else {
                    continue;
                };
                if factored.last() != Some(&ty) {
                    factored.push(ty);
                }
                if !(d.is_finite() && m.is_finite() && d != 0.0) {
                    continue;
                }
                for r in runs(ty, block).unwrap() {
                    let s = r.scale / d;
                    let small = |v: f32| v.fract() == 0.0 && (-128.0..=127.0).contains(&v);
                    assert!(small(s), "{ty}: {} / {d}", r.scale);
                    assert_eq!((d * s).to_bits(), r.scale.to_bits(), "{ty}");
                    if m != 0.0 {
                        let n = r.min / m;
                        assert!(small(n), "{ty}: {} / {m}", r.min);
                        assert_eq!(m * n, r.min, "{ty}");
                    }
                }
            }
        }
    }
    assert_eq!(
        factored,
        [
            WeightType::Q3_K,
            WeightType::Q4_K,
            WeightType::Q5_K,
            WeightType::Q6_K,
            WeightType::IQ4_XS
        ]
        .into_iter()
        .filter(|t| WeightType::ALL.contains(t))
        .collect::<Vec<_>>()
    );
}
