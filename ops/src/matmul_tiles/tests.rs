//! Unit tests of the tiled product: shape errors, shared memory per block, the variants'
//! fallbacks, the block and depth a product takes.

use crate::elementwise::Glu;
use crate::shape::ShapeError;
use trine_gguf::quant::WeightType;

use super::*;

#[test]
fn shapes_are_checked() {
    assert!(matches!(
        check(64, 48, 1),
        Err(ShapeError::NotMultiple { what: "cols", .. })
    ));
    assert!(matches!(check(0, 32, 1), Err(ShapeError::Zero { .. })));
    assert!(matches!(
        check(u32::MAX, 64, 2),
        Err(ShapeError::TooLarge { .. })
    ));
}

/// Every variant the executor picks (steps up to [`MAX_DEPTH`] blocks) fits the smallest
/// device's 32 KiB of shared memory (lavapipe's), but the large block, which only
/// devices with tiles run, 48 KiB (NVIDIA's); steps of four blocks of the others, 48 KiB.
#[test]
fn blocks_fit_shared_memory() {
    for block in [BlockSize::Small, BlockSize::Medium, BlockSize::Large] {
        let spec = TilesSpec {
            weights: WeightType::Q4_1,
            add: true,
            tiles: None,
            block,
            depth: MAX_DEPTH,
            copies: false,
            half_x: false,
            group: false,
            glu: None,
            part: false,
            experts: false,
            split: false,
            half_y: false,
        };
        let k = kernel(spec.scalar()).unwrap();
        assert!(k.shared_bytes() <= 32 * 1024, "{}", k.shared_bytes());
        let limits: &[(u32, u64)] = if block == BlockSize::Large {
            &[(1, 48), (MAX_DEPTH, 48)]
        } else {
            &[(1, 32), (MAX_DEPTH, 32), (4, 48)]
        };
        for width in [32, 64] {
            for &(depth, limit) in limits {
                let spec = TilesSpec {
                    tiles: Some(width),
                    depth,
                    copies: false,
                    half_x: false,
                    group: false,
                    ..spec
                };
                let k = kernel(spec).unwrap();
                assert!(
                    k.shared_bytes() <= limit * 1024,
                    "{block:?} {}",
                    k.shared_bytes()
                );
            }
        }
    }
}

/// The warpgroup products fit a Hopper workgroup's shared memory, copied or put, with or
/// without SwiGLU: their stages and one warpgroup's block of y.
#[test]
fn warpgroup_blocks_fit_shared_memory() {
    for (weights, glu) in [
        (WeightType::F16, None),
        (WeightType::Q4_1, Some(Glu::Swiglu)),
    ] {
        let spec = TilesSpec {
            weights,
            add: false,
            tiles: Some(32),
            block: BlockSize::Large,
            depth: MAX_DEPTH,
            copies: false,
            half_x: weights == WeightType::F16,
            group: false,
            glu,
            part: false,
            experts: false,
            split: false,
            half_y: false,
        }
        .copied()
        .grouped();
        assert!(spec.group, "{}", spec.name());
        let bytes = kernel(spec).unwrap().shared_bytes();
        assert!(
            bytes <= crate::matmul_group::SHARED_LIMIT,
            "{}: {bytes}",
            spec.name()
        );
    }
}

/// The large block falls back to the medium one on tiles, then to the scalar variant,
/// each with the grid of its own block.
#[test]
fn large_blocks_fall_back_to_medium_ones() {
    let spec = TilesSpec {
        weights: WeightType::Q4_1,
        add: true,
        tiles: Some(32),
        block: BlockSize::Large,
        depth: 2,
        copies: false,
        half_x: false,
        group: false,
        glu: None,
        part: false,
        experts: false,
        split: false,
        half_y: false,
    };
    let variants = spec.variants();
    let blocks: Vec<_> = variants.iter().map(|v| (v.block, v.tiles)).collect();
    assert_eq!(
        blocks,
        [
            (BlockSize::Large, Some(32)),
            (BlockSize::Medium, Some(32)),
            (BlockSize::Medium, None)
        ]
    );
    let grids: Vec<_> = variants.iter().map(|v| v.grid(4096, 512)).collect();
    assert_eq!(grids, [[4, 32, 1], [8, 64, 1], [8, 64, 1]]);
    for v in &variants {
        assert_eq!(kernel(*v).unwrap().name, v.name());
    }
    let untiled = TilesSpec {
        tiles: None,
        ..spec
    };
    assert_eq!(untiled.variants(), [spec.scalar()]);
}

/// Big products take the large block (from half the rows on warpgroup products), small ones
/// the small block.
#[test]
fn blocks_follow_the_product() {
    let shapes = [
        (576, 512, BlockSize::Small),
        (1152, 512, BlockSize::Medium),
        (4096, 512, BlockSize::Large),
        (4096, 100, BlockSize::Medium),
    ];
    for warpgroups in [false, true] {
        for (rows, tokens, block) in shapes {
            let got = BlockSize::for_product(rows, tokens, warpgroups);
            assert_eq!(got, block, "{rows} rows, {tokens} tokens");
        }
    }
    assert_eq!(BlockSize::for_product(2048, 512, false), BlockSize::Medium);
    assert_eq!(BlockSize::for_product(2048, 512, true), BlockSize::Large);
    let spec = TilesSpec {
        weights: WeightType::F16,
        add: false,
        tiles: None,
        block: BlockSize::Large,
        depth: 1,
        copies: false,
        half_x: false,
        group: false,
        glu: None,
        part: false,
        experts: false,
        split: false,
        half_y: false,
    };
    assert!(matches!(kernel(spec), Err(ShapeError::Unsupported { .. })));
    assert_eq!(spec.scalar().grid(4096, 512), [8, 64, 1]);
    let tiled = TilesSpec {
        tiles: Some(32),
        ..spec
    };
    assert_eq!(tiled.grid(4096, 512), [4, 32, 1]);
}

/// Steps are as deep as K allows, and a depth the kernel has no staging for is refused.
#[test]
fn depth_divides_k() {
    assert_eq!(TilesSpec::depth_for(576), 2);
    assert_eq!(TilesSpec::depth_for(1536), MAX_DEPTH);
    assert_eq!(TilesSpec::depth_for(96), 1);
    assert_eq!(TilesSpec::depth_for(32), 1);
    let spec = TilesSpec {
        weights: WeightType::F16,
        add: false,
        tiles: Some(32),
        block: BlockSize::Medium,
        depth: 3,
        copies: false,
        half_x: false,
        group: false,
        glu: None,
        part: false,
        experts: false,
        split: false,
        half_y: false,
    };
    assert!(matches!(kernel(spec), Err(ShapeError::Unsupported { .. })));
}

/// A width that cannot divide the block's tiles evenly is refused, not miscomputed.
#[test]
fn widths_that_do_not_divide_the_tiles_are_refused() {
    let spec = TilesSpec {
        weights: WeightType::F16,
        add: false,
        tiles: Some(8),
        block: BlockSize::Small,
        depth: 1,
        copies: false,
        half_x: false,
        group: false,
        glu: None,
        part: false,
        experts: false,
        split: false,
        half_y: false,
    };
    assert!(matches!(kernel(spec), Err(ShapeError::Unsupported { .. })));
    assert!(kernel(TilesSpec {
        block: BlockSize::Medium,
        ..spec
    })
    .is_ok());
}
