//! Golden snapshots of every kernel's IR text, HIP and CUDA C++, and WGSL. A change to a
//! lowering shows up here as a reviewed diff (`cargo insta review`).

use trine_codegen::Dialect;

#[test]
fn ir_text() {
    for k in trine_ops::kernels::kernels() {
        insta::assert_snapshot!(format!("ir__{}", k.name), trine_ir::print(&k));
    }
}

#[test]
fn hip_text() {
    for k in trine_ops::kernels::kernels() {
        if k.capabilities.async_copy || k.capabilities.group_mma {
            // HIP devices run the variant that stages through registers, on their own
            // matrix instructions.
            assert!(trine_codegen::hip(&k, Dialect::Hip).is_err(), "{}", k.name);
            continue;
        }
        let text =
            trine_codegen::hip(&k, Dialect::Hip).unwrap_or_else(|e| panic!("{}: {e}", k.name));
        insta::assert_snapshot!(format!("hip__{}", k.name), text);
    }
}

#[test]
fn cuda_text() {
    for k in trine_ops::kernels::kernels() {
        let text =
            trine_codegen::hip(&k, Dialect::Cuda).unwrap_or_else(|e| panic!("{}: {e}", k.name));
        insta::assert_snapshot!(format!("cuda__{}", k.name), text);
    }
}

#[test]
fn wgsl_text() {
    for k in trine_ops::kernels::kernels() {
        if k.capabilities.async_copy || k.capabilities.group_mma {
            // Vulkan and WebGPU have no copy that bypasses registers, nor warpgroup products.
            assert!(trine_codegen::wgsl(&k).is_err(), "{}", k.name);
            continue;
        }
        let text = trine_codegen::wgsl(&k).unwrap_or_else(|e| panic!("{}: {e}", k.name));
        insta::assert_snapshot!(format!("wgsl__{}", k.name), text);
    }
}

#[test]
fn c_text() {
    // The CPU backend's subgroup width, so that subgroup kernels show their lowering.
    let options = trine_codegen::COptions::new(trine_backends::cpu::CPU_SUBGROUP_SIZE);
    for k in trine_ops::kernels::kernels() {
        // The CPU stages through its caches, and has no warpgroups.
        if k.capabilities.async_copy || k.capabilities.group_mma {
            assert!(trine_codegen::c(&k, &options).is_err(), "{}", k.name);
            continue;
        }
        let text = trine_codegen::c(&k, &options).unwrap_or_else(|e| panic!("{}: {e}", k.name));
        insta::assert_snapshot!(format!("c__{}", k.name), text);
    }
}
