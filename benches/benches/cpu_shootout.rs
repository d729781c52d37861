//! The CPU shootout, in one run: the compiled CPU backend, the reference
//! interpreter and the `gemm` crate on matrix products and matrix-vector products at model
//! shapes, next to the machine's copy bandwidth measured in the same run.
//!
//! `cargo bench -p trine-benches --bench cpu_shootout` prints a Markdown table (results go to
//! docs/bench/ by hand, with the machine and date). Each figure is the median of several runs
//! after one warm-up; the interpreter, three orders of magnitude slower, runs smaller shapes.

use rayon::prelude::*;
use std::time::{Duration, Instant};
use trine_backends::cpu::CpuBackend;
use trine_backends::{Backend, Binding, Dispatch};
use trine_benches::gemm_peer::{f16, Product};
use trine_gguf::quant::WeightType;
use trine_ir::Scalar;
use trine_ops::case::Case;
use trine_ops::matmul::{self, MatmulShape, MatmulSpec};
use trine_ops::matvec::{self, Reduce};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Median time of `runs` calls of `f` after one warm-up call.
fn time(runs: usize, mut f: impl FnMut()) -> Duration {
    f();
    median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed()
            })
            .collect(),
    )
}

/// Copy bandwidth over all cores: bytes read plus bytes written per second.
fn copy_bandwidth() -> f64 {
    let n = 64 << 20; // 256 MiB of f32, far past any cache
    let src = vec![1f32; n];
    let mut dst = vec![0f32; n];
    let chunk = n / (rayon::current_num_threads() * 8);
    let t = time(5, || {
        dst.par_chunks_mut(chunk)
            .zip(src.par_chunks(chunk))
            .for_each(|(d, s)| d.copy_from_slice(s))
    });
    (2 * n * 4) as f64 / t.as_secs_f64() / 1e9
}

/// Median dispatch time of a conformance case on a backend.
fn run_case(b: &dyn Backend, case: &Case, runs: usize) -> Duration {
    let kernel = if case.kernel.capabilities.subgroup && !b.info().subgroup_ops {
        case.fallback
            .as_ref()
            .expect("subgroup kernels have a fallback")
    } else {
        &case.kernel
    };
    let program = b.compile(kernel).expect("compiling a bench kernel");
    let bindings: Vec<Binding> = case
        .buffers
        .iter()
        .map(|cb| {
            let h = b.alloc(cb.data.len() as u64).expect("allocating");
            b.write(h, 0, &cb.data).expect("uploading");
            Binding {
                buffer: h,
                offset: 0,
                size: cb.data.len() as u64,
            }
        })
        .collect();
    let d = Dispatch {
        program,
        grid: case.grid_for(kernel),
        bindings: &bindings,
        params: &case.params,
    };
    let t = time(runs, || b.dispatch(&d).expect("dispatch"));
    for x in bindings {
        b.free(x.buffer);
    }
    t
}

struct Row {
    what: String,
    engine: &'static str,
    time: Duration,
    bytes: f64,
    flops: f64,
}

impl Row {
    fn print(&self, copy: f64) {
        let s = self.time.as_secs_f64();
        let gbs = self.bytes / s / 1e9;
        println!(
            "| {} | {} | {:.3} | {:.1} | {:.2} | {:.0}% |",
            self.what,
            self.engine,
            s * 1e3,
            gbs,
            self.flops / s / 1e9,
            100.0 * gbs / copy
        );
    }
}

fn weight_bytes(ty: WeightType, rows: usize, cols: usize) -> f64 {
    (rows * cols / ty.block_elems() * ty.block_bytes()) as f64
}

/// GEMV through `gemm`: y[rows] = W[rows × cols] · x, W row-major in f32 or f16.
fn gemm_gemv(ty: WeightType, rows: usize, cols: usize) -> Duration {
    match ty {
        WeightType::F16 => {
            let (fill, zero, one) = (f16::from_f32(0.5), f16::ZERO, f16::ONE);
            let mut p = Product::new(1, rows, cols, fill, zero, one);
            time(10, || p.run())
        }
        _ => {
            let mut p = Product::new(1, rows, cols, 0.5f32, 0.0, 1.0);
            time(10, || p.run())
        }
    }
}

/// C[m × n] = A[m × k] · Bᵀ with B stored [n × k] (weights), f32, through `gemm`.
fn gemm_matmul(m: usize, n: usize, k: usize) -> Duration {
    let mut p = Product::new(m, n, k, 0.5f32, 0.0, 1.0);
    time(10, || p.run())
}

fn main() {
    let compiled = CpuBackend::new();
    let interp = CpuBackend::interpreter();
    let threads = rayon::current_num_threads();
    let copy = copy_bandwidth();
    println!("CPU: {}", compiled.info().name);
    println!("compiled backend: {}", compiled.info().driver);
    println!("rayon threads: {threads}; copy bandwidth (read + write): {copy:.1} GB/s\n");
    println!("| workload | engine | ms | GB/s | GFLOP/s | of copy bandwidth |");
    println!("| --- | --- | --- | --- | --- | --- |");

    let gemv_types = [
        WeightType::F32,
        WeightType::F16,
        WeightType::Q8_0,
        WeightType::Q4_0,
    ];
    for (rows, cols) in [(4096usize, 4096usize), (1536, 576)] {
        for ty in gemv_types {
            let what = format!("GEMV {} {rows}×{cols}", ty.name());
            let case = matvec::case(ty, rows as u32, cols as u32, Reduce::Subgroup, 1)
                .expect("a matvec case");
            let bytes = weight_bytes(ty, rows, cols);
            let flops = 2.0 * (rows * cols) as f64;
            let mut rows_out = vec![Row {
                what: what.clone(),
                engine: "trine cpu (compiled)",
                time: run_case(&compiled, &case, 20),
                bytes,
                flops,
            }];
            if rows * cols <= 1 << 20 {
                rows_out.push(Row {
                    what: what.clone(),
                    engine: "trine interpreter",
                    time: run_case(&interp, &case, 2),
                    bytes,
                    flops,
                });
            }
            if matches!(ty, WeightType::F32 | WeightType::F16) {
                rows_out.push(Row {
                    what: what.clone(),
                    engine: "gemm crate",
                    time: gemm_gemv(ty, rows, cols),
                    bytes,
                    flops,
                });
            }
            for r in rows_out {
                r.print(copy);
            }
        }
    }

    for (m, n, k) in [
        (64usize, 1536usize, 576usize),
        (512, 512, 512),
        (16, 576, 576),
    ] {
        let what = format!("matmul f32 {m}×{n}×{k} (B as weights)");
        let spec = MatmulSpec::new(Scalar::F32, Scalar::F32, true);
        let shape = MatmulShape::packed(1, m, n, k, true, false);
        let case = matmul::case(spec, shape, 1).expect("a matmul case");
        let bytes = ((m * k + n * k + m * n) * 4) as f64;
        let flops = 2.0 * (m * n * k) as f64;
        let mut rows_out = vec![Row {
            what: what.clone(),
            engine: "trine cpu (compiled)",
            time: run_case(&compiled, &case, 10),
            bytes,
            flops,
        }];
        if m * n * k <= 1 << 23 {
            rows_out.push(Row {
                what: what.clone(),
                engine: "trine interpreter",
                time: run_case(&interp, &case, 2),
                bytes,
                flops,
            });
        }
        rows_out.push(Row {
            what,
            engine: "gemm crate",
            time: gemm_matmul(m, n, k),
            bytes,
            flops,
        });
        for r in rows_out {
            r.print(copy);
        }
    }
}
