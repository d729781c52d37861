//! The CUDA lowering of every conformance kernel, compiled by NVRTC with the CUDA backend's
//! options, must be a cubin (ELF, machine EM_CUDA). No GPU or driver is needed, only NVRTC.
//!
//! Without NVRTC the test says why and passes, unless `TRINE_REQUIRE_TOOLS` names `nvrtc`.
//! NVRTC comes with a CUDA toolkit, or from the `nvidia-cuda-nvrtc` Python wheel (point
//! `CUDA_PATH` at its `nvidia/cu13`, with `nvidia-cuda-runtime`'s headers beside it).

use trine_backends::cuda::{
    compile_for_arch, nvrtc_version, EM_CUDA, GROUP_MMA_ARCH, TILES_MIN_ARCH,
};
use trine_backends::BackendError;

fn required() -> bool {
    std::env::var("TRINE_REQUIRE_TOOLS").is_ok_and(|v| v.split(',').any(|t| t.trim() == "nvrtc"))
}

/// Architectures to compile for: Turing (the oldest CUDA 13 supports) and Hopper. NVRTC
/// refusing either fails the test.
const ARCHES: [u32; 2] = [75, 90];

#[test]
fn every_kernel_compiles_to_a_cubin() {
    match nvrtc_version() {
        Ok(((major, minor), path)) => println!("NVRTC {major}.{minor} from {}", path.display()),
        Err(e) => {
            assert!(
                !required(),
                "NVRTC is required (TRINE_REQUIRE_TOOLS) but: {e}"
            );
            println!("skipped: {e}");
            return;
        }
    }
    let kernels = trine_conformance::all_kernels();
    let mut failures = vec![];
    for arch in ARCHES {
        let (mut untiled, mut ungrouped) = (0, 0);
        for k in &kernels {
            // The backend gives such an arch no tiles, so it runs the fallbacks instead.
            if k.capabilities.tiles && arch < TILES_MIN_ARCH {
                untiled += 1;
                continue;
            }
            // Likewise warpgroup products, which are sm_90's alone.
            if k.capabilities.group_mma && arch != GROUP_MMA_ARCH {
                ungrouped += 1;
                continue;
            }
            match compile_for_arch(k, arch) {
                Ok(cubin) => {
                    let machine = cubin.get(18..20).map(|b| u16::from_le_bytes([b[0], b[1]]));
                    if !cubin.starts_with(b"\x7fELF") || machine != Some(EM_CUDA) {
                        failures.push(format!(
                            "{} sm_{arch}: not a cubin ({} bytes, machine {machine:?})",
                            k.name,
                            cubin.len()
                        ));
                    }
                }
                // Every arch listed is one this NVRTC must compile for: one it refuses is a
                // failure (once per arch, not once per kernel), not a reason to stop looking.
                Err(BackendError::Unsupported { what, .. }) => {
                    failures.push(format!("sm_{arch}: NVRTC refuses it: {what}"));
                    break;
                }
                Err(e) => failures.push(format!("{} sm_{arch}: {e}", k.name)),
            }
        }
        if untiled > 0 {
            println!(
                "sm_{arch}: {untiled} tiled kernels not compiled (tiles need sm_{TILES_MIN_ARCH})"
            );
        }
        if ungrouped > 0 {
            println!(
                "sm_{arch}: {ungrouped} kernels on warpgroup products not compiled (sm_{GROUP_MMA_ARCH} only)"
            );
        }
    }
    println!("{} kernels", kernels.len());
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
