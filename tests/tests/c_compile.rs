//! The C of kernels with packed dot products compiles with the system C compiler for each
//! x86 instruction set the lowering's prelude tells apart: AVX-512 with VNNI, AVX2, and the
//! x86-64 baseline (the hosts that run the tests have one of them; the others are compiled
//! here so that a branch no host takes still builds). Without a C compiler the test says so
//! and passes.

use std::process::Command;
use trine_codegen::{c, COptions};

#[test]
fn packed_dot_kernels_compile_for_each_instruction_set() {
    if !cfg!(target_arch = "x86_64") {
        println!("skipped: the instruction sets compiled for are x86's");
        return;
    }
    let cc = trine_backends::cpu::compiler_from_env();
    if Command::new(&cc).arg("--version").output().is_err() {
        println!("skipped: no C compiler {cc:?} (Debian: apt-get install gcc)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("trine-c-compile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let names = ["dot4_lanes", "matvec_q8_q6_k_rows16_t8_add"];
    let kernels: Vec<_> = trine_conformance::all_kernels()
        .into_iter()
        .filter(|k| names.contains(&k.name.as_str()))
        .collect();
    assert_eq!(kernels.len(), names.len(), "{names:?}");
    let mut failures = vec![];
    for k in &kernels {
        let path = dir.join(format!("{}.c", k.name));
        std::fs::write(&path, c(k, &COptions::new(8)).unwrap()).unwrap();
        for isa in [
            &["-march=x86-64-v4", "-mavx512vnni"][..],
            &["-march=x86-64-v3"],
            &["-march=x86-64"],
        ] {
            let out = Command::new(&cc)
                .args(["-O1", "-fopenmp-simd", "-fPIC", "-c", "-o"])
                .arg(dir.join(format!("{}.o", k.name)))
                .args(isa)
                .arg(&path)
                .output()
                .unwrap();
            if !out.status.success() {
                failures.push(format!(
                    "{} {isa:?}: {}",
                    k.name,
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
