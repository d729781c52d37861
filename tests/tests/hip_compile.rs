//! The HIP lowering of every conformance kernel, compiled by the real AMD compiler (hiprtc)
//! for three arches, must be an AMDGPU code object; an arch that makes the compiler abort must
//! be a typed error while this process lives on. No GPU is needed.
//!
//! Without hiprtc the tests say why and pass, unless `TRINE_REQUIRE_TOOLS` names `hiprtc`
//! (CI does). Debian 12: `apt-get install libamdhip64-dev libamd-comgr-dev hipcc`.
//!
//! Compiles that may abort run in a child process: this test binary started again with the
//! argument `__hip_compile`, which libtest takes as a filter selecting the test named
//! `__hip_compile` below, and `TRINE_HIP_COMPILE_CHILD` set, which makes that test serve the
//! compile instead of returning.

use std::path::PathBuf;
use trine_backends::hip::{self, CHILD_ENV};
use trine_backends::BackendError;

/// The child entry: inert in a normal test run, the compile child when started by
/// `compile_isolated` (see the module documentation).
#[test]
fn __hip_compile() {
    if std::env::var_os(CHILD_ENV).is_some() {
        hip::compile_child_main();
    }
}

fn required() -> bool {
    std::env::var("TRINE_REQUIRE_TOOLS").is_ok_and(|v| v.split(',').any(|t| t.trim() == "hiprtc"))
}

/// The compiler's ISA list, or `None` (with the reason printed) when hiprtc is absent and not
/// required.
fn compiler() -> Option<Option<Vec<String>>> {
    match hip::describe_runtime() {
        Ok(rt) if rt.hiprtc.is_some() => {
            println!(
                "ROCm {} from {}, hiprtc from {}",
                rt.version.as_deref().unwrap_or("?"),
                rt.library,
                rt.hiprtc.as_deref().unwrap_or("?")
            );
            Some(rt.compiler_isas)
        }
        Ok(rt) => {
            assert!(
                !required(),
                "hiprtc is required but missing: {:?}",
                rt.notes
            );
            println!("skipped: no hiprtc beside {}: {:?}", rt.library, rt.notes);
            None
        }
        Err(e) => {
            assert!(
                !required(),
                "hiprtc is required (TRINE_REQUIRE_TOOLS) but: {e}"
            );
            println!("skipped: {e}");
            None
        }
    }
}

/// ELF magic and `e_machine` (little-endian u16 at byte 18) == EM_AMDGPU (224), checked here
/// independently of the library's own check.
fn assert_amdgpu_elf(what: &str, code: &[u8]) {
    assert!(code.len() > 64, "{what}: only {} bytes", code.len());
    assert_eq!(&code[..4], b"\x7fELF", "{what}: not an ELF file");
    assert_eq!(
        u16::from_le_bytes([code[18], code[19]]),
        224,
        "{what}: e_machine is not EM_AMDGPU"
    );
}

#[test]
fn every_kernel_compiles_for_gfx1030_gfx1013_and_gfx90c() {
    if compiler().is_none() {
        return;
    }
    // Asynchronous copies and warpgroup products have no HIP lowering
    // (every_op_kernel_compiles_for_gfx1030 checks that they are refused).
    let kernels: Vec<_> = trine_ops::kernels::kernels()
        .into_iter()
        .filter(|k| !k.capabilities.async_copy && !k.capabilities.group_mma)
        .collect();
    let mut failures = vec![];
    for arch in ["gfx1030", "gfx1013", "gfx90c"] {
        for k in &kernels {
            match hip::compile_for_arch(k, arch) {
                Ok(code) => assert_amdgpu_elf(&format!("{} for {arch}", k.name), &code),
                Err(e) => failures.push(format!("{} for {arch}: {e}", k.name)),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    println!("{} kernels × 3 arches compiled", kernels.len());
}

/// `kernels` compiled for `arch` by compile children ([`hip::compile_isolated`]), one per
/// core at a time: the compiler in this process takes one kernel at a time, and the op
/// library's few hundred kernels are most of the test suite's time on CI's two cores.
fn compile_in_children(
    kernels: &[trine_ir::Kernel],
    arch: &str,
) -> Vec<(String, Result<Vec<u8>, String>)> {
    let exe = std::env::current_exe().unwrap();
    trine_tests::on_every_core(kernels, |k| {
        let code = trine_codegen::hip(k, trine_codegen::Dialect::Hip)
            .map_err(|e| e.to_string())
            .and_then(|source| {
                hip::compile_isolated(&exe, &k.name, &source, arch).map_err(|e| e.to_string())
            });
        (k.name.clone(), code)
    })
}

#[test]
fn every_op_kernel_compiles_for_gfx1030() {
    if compiler().is_none() {
        return;
    }
    // Kernels on matrix tiles take RDNA3's WMMA, which gfx1030 lacks: the backend gives
    // them to gfx11 devices only, and `gfx11_compile` compiles them for those.
    let kernels: Vec<_> = trine_conformance::all_kernels()
        .into_iter()
        .filter(|k| !k.capabilities.tiles || k.capabilities.async_copy)
        .collect();
    // Kernels with asynchronous copies or warpgroup products have no HIP lowering (their
    // other variants run there): they must be refused as such, and every other kernel must
    // compile.
    let refused: std::collections::HashSet<&str> = kernels
        .iter()
        .filter(|k| k.capabilities.async_copy || k.capabilities.group_mma)
        .map(|k| k.name.as_str())
        .collect();
    let failures: Vec<String> = compile_in_children(&kernels, "gfx1030")
        .into_iter()
        .filter_map(
            |(name, code)| match (code, refused.contains(name.as_str())) {
                (Ok(code), false) => {
                    assert_amdgpu_elf(&format!("{name} for gfx1030"), &code);
                    None
                }
                (Err(e), true)
                    if e.contains("no asynchronous copies")
                        || e.contains("no warpgroup products") =>
                {
                    None
                }
                (Ok(_), true) => Some(format!("{name}: compiled for HIP, which it cannot be")),
                (Err(e), _) => Some(format!("{name}: {e}")),
            },
        )
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    println!("{} kernels compiled for gfx1030", kernels.len());
}

#[test]
fn an_arch_the_compiler_does_not_know_is_a_typed_error_and_the_process_survives() {
    let Some(isas) = compiler() else {
        return;
    };
    let kernel = &trine_ops::kernels::kernels()[0];
    let result = hip::compile_for_arch(kernel, "gfx1100");
    match isas {
        // A ROCm whose compiler knows gfx1100 compiles it in process.
        Some(isas) if isas.iter().any(|i| i == "gfx1100") => {
            assert_amdgpu_elf("gfx1100", &result.expect("gfx1100 is listed by comgr"));
        }
        // HIP 5.2's hiprtc aborts for gfx1100 (the child dies of SIGABRT); others may reject
        // it with an error. Either way: a compile error, and this process is still here.
        _ => match result {
            Err(BackendError::Compile {
                kernel: name,
                message,
            }) => {
                assert_eq!(name, kernel.name);
                println!("gfx1100: {message}");
                assert!(!message.is_empty());
            }
            other => panic!("gfx1100 with a compiler that does not list it: {other:?}"),
        },
    }
}

#[test]
fn a_child_process_compiles_as_the_process_itself_does() {
    if compiler().is_none() {
        return;
    }
    let kernel = &trine_ops::kernels::kernels()[0];
    let source = trine_codegen::hip(kernel, trine_codegen::Dialect::Hip).unwrap();
    let exe = std::env::current_exe().unwrap();
    let code = hip::compile_isolated(&exe, &kernel.name, &source, "gfx1030").unwrap();
    assert_amdgpu_elf("child gfx1030", &code);
    assert_eq!(code, hip::compile_for_arch(kernel, "gfx1030").unwrap());

    // The compiler's own error comes back through the child as a compile error with its log.
    let broken = source.replace("__global__", "__global__ syntax error here");
    match hip::compile_isolated(&exe, &kernel.name, &broken, "gfx1030") {
        Err(BackendError::Compile { message, .. }) => {
            assert!(message.contains("error"), "{message}")
        }
        other => panic!("a broken source compiled: {other:?}"),
    }

    // An executable that is not a compile child: a typed error naming its exit status.
    let not_a_child = PathBuf::from("/bin/false");
    match hip::compile_isolated(&not_a_child, &kernel.name, &source, "gfx1030") {
        Err(BackendError::Compile { message, .. }) => {
            assert!(message.contains("exited with status 1"), "{message}")
        }
        other => panic!("/bin/false compiled: {other:?}"),
    }
}
