//! The HIP lowering of every kernel on matrix tiles, compiled for RDNA3 and RDNA 3.5 (gfx1103,
//! gfx1151) into AMDGPU assembly, must multiply with `v_wmma_f32_16x16x16_f16`, and the
//! packed 8-bit dot products must take gfx11's `v_dot4_i32_iu8` and `v_dot4_u32_u8`.
//!
//! hiprtc would be the compiler of record, but Debian 12's (HIP 5.2, comgr 2.4) aborts the
//! process for every gfx11 arch (`hip_compile` checks that this stays a typed error). The
//! check therefore runs clang's own AMDGPU back end, Debian's `clang-19`, on the text hiprtc
//! compiles at run time: hiprtc provides the runtime header itself, so the test includes
//! `hip/hip_runtime.h` (Debian's HIP 5.2 headers) before it, and `-nogpulib` leaves out the
//! device libraries, which these kernels do not call.
//!
//! Without `clang-19` the test says why and passes, unless `TRINE_REQUIRE_TOOLS` names it
//! (CI does). Debian 12: `apt-get install clang-19 libamdhip64-dev`.

use std::path::Path;
use std::process::Command;

const CLANG: &str = "clang-19";

/// Two of the arches whose devices the HIP backend gives tiles (every gfx11): the 780M's
/// RDNA3 (gfx1103) and Strix Halo's RDNA 3.5 (gfx1151).
const ARCHES: [&str; 2] = ["gfx1103", "gfx1151"];

fn required() -> bool {
    std::env::var("TRINE_REQUIRE_TOOLS").is_ok_and(|v| v.split(',').any(|t| t.trim() == CLANG))
}

/// Whether `clang-19` runs here; the reason it is skipped otherwise.
fn clang_present() -> bool {
    match Command::new(CLANG).arg("--version").output() {
        Ok(out) if out.status.success() => true,
        other => {
            assert!(
                !required(),
                "{CLANG} is required (TRINE_REQUIRE_TOOLS) but does not run: {other:?}"
            );
            println!("skipped: {CLANG} does not run here ({other:?})");
            false
        }
    }
}

/// `source` compiled for `arch` to assembly, or the compiler's message.
fn assemble(dir: &Path, name: &str, source: &str, arch: &str) -> Result<String, String> {
    let input = dir.join(format!("{name}-{arch}.hip"));
    let output = dir.join(format!("{name}-{arch}.s"));
    std::fs::write(&input, format!("#include <hip/hip_runtime.h>\n{source}")).unwrap();
    let out = Command::new(CLANG)
        .args(["-x", "hip", "--cuda-device-only", "-nogpulib", "-O3", "-S"])
        .arg(format!("--offload-arch={arch}"))
        .arg("-o")
        .arg(&output)
        .arg(&input)
        .output()
        .map_err(|e| format!("{CLANG}: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    std::fs::read_to_string(&output).map_err(|e| e.to_string())
}

#[test]
fn every_tiled_kernel_compiles_to_wmma_for_gfx11() {
    if !clang_present() {
        return;
    }
    // Asynchronous copies have no HIP lowering: those kernels' variants without them serve.
    let kernels: Vec<_> = trine_conformance::all_kernels()
        .into_iter()
        .filter(|k| k.capabilities.tiles && !k.capabilities.async_copy)
        .collect();
    assert!(!kernels.is_empty(), "no kernel on tiles in the suite");
    let dir = std::env::temp_dir().join(format!("trine-gfx11-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let jobs: Vec<_> = kernels
        .iter()
        .flat_map(|k| ARCHES.map(|arch| (k, arch)))
        .collect();
    // About 1.5 s a compile.
    let failures: Vec<String> = trine_tests::on_every_core(&jobs, |&(k, arch)| {
        let source = trine_codegen::hip(k, trine_codegen::Dialect::Hip)
            .map_err(|e| e.to_string())
            .and_then(|source| assemble(&dir, &k.name, &source, arch));
        match source {
            Ok(asm) if asm.contains("v_wmma_f32_16x16x16_f16") => None,
            Ok(_) => Some(format!("{} for {arch}: no v_wmma in its assembly", k.name)),
            Err(e) => Some(format!("{} for {arch}: {e}", k.name)),
        }
    })
    .into_iter()
    .flatten()
    .collect();
    std::fs::remove_dir_all(&dir).ok();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    println!(
        "{} kernels on tiles × {} arches",
        kernels.len(),
        ARCHES.len()
    );
}

#[test]
fn packed_dot_products_take_the_dot_instructions_on_gfx11() {
    if !clang_present() {
        return;
    }
    let kernels = trine_ops::kernels::kernels();
    let dot4 = kernels
        .iter()
        .find(|k| k.name == "dot4")
        .expect("the dot4 kernel");
    let source = trine_codegen::hip(dot4, trine_codegen::Dialect::Hip).unwrap();
    let dir = std::env::temp_dir().join(format!("trine-gfx11-dot4-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for arch in ARCHES {
        let asm = assemble(&dir, "dot4", &source, arch).unwrap_or_else(|e| panic!("{arch}: {e}"));
        for op in ["v_dot4_i32_iu8", "v_dot4_u32_u8"] {
            assert!(asm.contains(op), "dot4 for {arch}: no {op}");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// The helpers put every element where RDNA3's WMMA reads and writes it. With no AMD GPU here,
/// the HIP prelude's tile helpers are compiled for this host (by `clang-19`, for its
/// `ext_vector_type`) and run for the 32 lanes of a wave in turn; the harness then applies
/// the instruction as the RDNA3 ISA lays out its operands (A: lane `i` holds row `i % 16`; B:
/// column `i % 16`; D: element `e` of lane `i` is (2e + i / 16, i % 16); lanes 16–31 repeat
/// the operands of lanes 0–15) and checks the stored product against the plain one, for
/// every layout of every operand.
#[test]
fn the_helpers_place_elements_where_wmma_takes_them() {
    if !clang_present() {
        return;
    }
    let kernel = trine_conformance::all_kernels()
        .into_iter()
        .find(|k| k.capabilities.tiles && !k.capabilities.async_copy)
        .expect("a kernel on tiles");
    let text = trine_codegen::hip(&kernel, trine_codegen::Dialect::Hip).unwrap();
    let start = text
        .find("typedef _Float16 trine_half16")
        .expect("the HIP tile helpers");
    let end = start + text[start..].find("extern \"C\"").expect("the kernel");
    let helpers = &text[start..end];
    let source = format!("{HARNESS_HEAD}{helpers}{HARNESS_MAIN}");
    let dir = std::env::temp_dir().join(format!("trine-wmma-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, exe) = (dir.join("layout.cpp"), dir.join("layout"));
    std::fs::write(&src, source).unwrap();
    let built = Command::new(CLANG)
        .args(["-x", "c++", "-std=c++17", "-O1", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{out}");
    // Four layouts (A and B each row- or column-major), through global and shared loads.
    assert_eq!(out.matches("ok").count(), 8, "{out}");
    println!("{out}");
}

/// The host's stand-ins for HIP's qualifiers, before the helpers.
const HARNESS_HEAD: &str = r#"#include <cstdio>
#include <cmath>
#include <cstdlib>
#define __device__
#define __forceinline__ inline
#define __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(a, b, c) (c)
typedef _Float16 trine_f16;
"#;

/// A, B and an addend C, loaded by every lane with each layout and offsets and strides like
/// the kernels' (a tile inside a larger padded matrix), multiplied as RDNA3's WMMA does, and
/// stored back; exits non-zero at the first misplaced element.
const HARNESS_MAIN: &str = r#"
static const unsigned O = 24, S = 40;
static unsigned at(bool row_major, unsigned r, unsigned c) { return row_major ? O + r * S + c : O + c * S + r; }
static void wmma(trine_tile_acc (&d)[32], const trine_tile_a (&a)[32], const trine_tile_b (&b)[32]) {
    for (unsigned l = 16; l < 32; l++)
        for (unsigned e = 0; e < 16; e++)
            if (a[l].v[e] != a[l - 16].v[e] || b[l].v[e] != b[l - 16].v[e]) { std::printf("lane %u does not repeat lane %u\n", l, l - 16); std::exit(1); }
    for (unsigned l = 0; l < 32; l++)
        for (unsigned e = 0; e < 8; e++) {
            const unsigned row = 2 * e + l / 16, col = l % 16;
            float sum = d[l].v[e];
            for (unsigned k = 0; k < 16; k++) sum += (float)a[row].v[k] * (float)b[col].v[k];
            d[l].v[e] = sum;
        }
}
int main() {
    alignas(16) static trine_f16 A[O + 16 * S], B[O + 16 * S];
    static float C[O + 16 * S], D[O + 16 * S];
    float a[16][16], b[16][16], c[16][16];
    for (unsigned r = 0; r < 16; r++)
        for (unsigned k = 0; k < 16; k++) {
            a[r][k] = (float)((int)((r * 7 + k * 3) % 11) - 5) / 4.0f;
            b[r][k] = (float)((int)((r * 5 + k * 9) % 13) - 6) / 8.0f;
            c[r][k] = (float)(r * 16 + k) / 64.0f;
        }
    for (int shared = 0; shared < 2; shared++)
    for (int arm = 0; arm < 2; arm++)
    for (int brm = 0; brm < 2; brm++) {
        for (unsigned i = 0; i < 16; i++)
            for (unsigned j = 0; j < 16; j++) {
                A[at(arm, i, j)] = (trine_f16)a[i][j];
                B[at(brm, i, j)] = (trine_f16)b[i][j];
                C[at(true, i, j)] = c[i][j];
            }
        trine_tile_a ta[32]; trine_tile_b tb[32]; trine_tile_acc tc[32];
        for (unsigned l = 0; l < 32; l++) {
            trine_tile_zero(tc[l]);
            if (shared) {
                trine_tile_load_shared(ta[l], A, O, S, arm, l);
                trine_tile_load_shared(tb[l], B, O, S, brm, l);
            } else {
                trine_tile_load(ta[l], A, O, S, arm, l);
                trine_tile_load(tb[l], B, O, S, brm, l);
            }
            trine_tile_load(tc[l], C, O, S, true, l);
        }
        wmma(tc, ta, tb);
        for (unsigned l = 0; l < 32; l++) trine_tile_store(tc[l], D, O, S, false, l);
        for (unsigned i = 0; i < 16; i++)
            for (unsigned j = 0; j < 16; j++) {
                float want = c[i][j];
                for (unsigned k = 0; k < 16; k++) want += a[i][k] * b[k][j];
                const float got = D[at(false, i, j)];
                if (std::fabs(got - want) > 1e-4f) {
                    std::printf("shared %d, A %s, B %s: (%u, %u) is %g, not %g\n", shared, arm ? "rows" : "columns", brm ? "rows" : "columns", i, j, got, want);
                    return 1;
                }
            }
        std::printf("shared %d, A %s, B %s: ok\n", shared, arm ? "row-major" : "column-major", brm ? "row-major" : "column-major");
    }
    return 0;
}
"#;
