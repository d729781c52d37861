//! The compiled CPU backend against the interpreter run at the CPU's own subgroup width
//! (`CPU_SUBGROUP_SIZE`; the suite's reference runs at `REFERENCE_SUBGROUP`, a width no device
//! has, so there the two may only agree within each case's NMSE bound). At the same width the
//! C lowering promises the interpreter's results bit for bit (docs/architecture.md, "The CPU
//! path": reductions in lane order, `-ffp-contract=off`, transcendentals through libm's double
//! functions as the interpreter's, e^x through one shared sequence of double operations), so
//! every output byte of every case must be equal.
//!
//! No case is exempt. The transcendental functions, where an exemption would be expected, are
//! no exception: the interpreter computes them with Rust's f64 functions and the lowering with
//! C's `log`, `sin`, … on doubles, and both call the same libm in the same process; e^x is
//! [`trine_ir::exp`] in both. What is not compared is listed when the test runs: kernels the
//! CPU refuses by its own description (matrix tiles, asynchronous copies, warpgroup products).

use std::sync::Arc;
use trine_backends::cpu::{CpuBackend, CPU_SUBGROUP_SIZE, INTERPRETER_DRIVER};
use trine_backends::Backend;
use trine_conformance::run::run_on;
use trine_conformance::{lacking, required_backends, suite};
use trine_ops::case::{decode, Case};

/// What differs between two runs of one output buffer, in words.
fn first_difference(case: &Case, buffer: usize, want: &[u8], got: &[u8]) -> Option<String> {
    let b = &case.buffers[buffer];
    let size = b.elem.size();
    let at = want.iter().zip(got).position(|(w, g)| w != g)?;
    let element = at / size;
    let span = element * size..(element + 1) * size;
    let differing = want
        .chunks_exact(size)
        .zip(got.chunks_exact(size))
        .filter(|(w, g)| w != g)
        .count();
    Some(format!(
        "{}: {differing} of {} elements differ, the first at {element}: interpreter {:?} \
         ({:?}), compiled {:?} ({:?})",
        b.name,
        want.len() / size,
        decode(b.elem, &want[span.clone()])[0],
        &want[span.clone()],
        decode(b.elem, &got[span.clone()])[0],
        &got[span],
    ))
}

#[test]
fn compiled_cpu_matches_the_interpreter_bit_for_bit() {
    let cpu: Arc<dyn Backend> = Arc::new(CpuBackend::new());
    let info = cpu.info().clone();
    if info.driver == INTERPRETER_DRIVER {
        // Then there is no compiled code to compare; the interpreter against itself proves
        // nothing.
        assert!(
            !required_backends().iter().any(|b| b == "cpu"),
            "cpu is required but interprets: {:?}",
            info.notes
        );
        println!("skipped: no compiled CPU here: {:?}", info.notes);
        return;
    }
    let (mut exact, mut not_run, mut failures) = (0, vec![], vec![]);
    // Each case's kernel and, where it has one, the fallback a device without subgroups
    // runs, over the fallback's own grid: the same lowering, so the same promise.
    let runs = suite().into_iter().flat_map(|case| {
        let fallback = case.fallback.clone().map(|f| Case {
            name: format!("{} (fallback {})", case.name, f.name),
            grid: case.grid_for(&f),
            kernel: f,
            fallback: None,
            ..case.clone()
        });
        std::iter::once(case).chain(fallback)
    });
    for case in runs {
        let lacks = lacking(&case.kernel, &info);
        if !lacks.is_empty() {
            // A dispatch the backend refuses by its own description: nothing to compare.
            not_run.push(format!("{}: device lacks {}", case.name, lacks.join(", ")));
            continue;
        }
        let want = match case.interpret_at(CPU_SUBGROUP_SIZE) {
            Ok(w) => w,
            Err(e) => {
                failures.push(format!("{}: the interpreter failed: {e}", case.name));
                continue;
            }
        };
        let (got, faults) = match run_on(&case, &case.kernel, cpu.as_ref()) {
            Ok(r) => r,
            Err(e) => {
                failures.push(format!("{}: the compiled CPU failed: {e}", case.name));
                continue;
            }
        };
        failures.extend(faults.into_iter().map(|f| format!("{}: {f}", case.name)));
        let differences: Vec<String> = (0..case.buffers.len())
            .filter(|&i| case.buffers[i].output)
            .filter_map(|i| first_difference(&case, i, &want[i], &got[i]))
            .collect();
        if differences.is_empty() {
            exact += 1;
        } else {
            failures.push(format!("{}: {}", case.name, differences.join("; ")));
        }
    }
    println!("{exact} runs bit-identical to the interpreter at subgroup width {CPU_SUBGROUP_SIZE}");
    for n in &not_run {
        println!("not run: {n}");
    }
    assert!(exact > 0, "no case was compared");
    assert!(
        failures.is_empty(),
        "{} runs differ from the interpreter:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
