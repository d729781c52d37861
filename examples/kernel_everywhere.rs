//! One kernel, written once in trine's IR, run on every backend that opens here, each result
//! checked against plain Rust and the other backends' (`--features wgpu` adds wgpu on Linux).

use std::process::ExitCode;
use trine::backends::{self, Backend, BackendError, BackendKind, Binding, Dispatch};
use trine::ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar};

const WG: u32 = 64;
/// A device may fuse a * x + y into one rounding where Rust rounds twice.
const BOUND: f32 = 1e-6;

/// y = a * x + y, one invocation per element.
fn saxpy() -> Kernel {
    let k = KernelBuilder::new("saxpy", [WG, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let y = k.buffer("y", Scalar::F32, Access::ReadWrite);
    let a = k.param("a", Scalar::F32);
    let n = k.param("n", Scalar::U32);
    let i = k.global_id(0);
    k.if_(i.lt(n), || k.store(y, i, a * k.load(x, i) + k.load(y, i)));
    k.finish()
}

fn run(b: &dyn Backend, a: f32, x: &[f32], y: &[f32]) -> Result<Vec<f32>, BackendError> {
    let (n, size) = (x.len() as u32, 4 * x.len() as u64);
    let (bx, by) = (b.alloc(size)?, b.alloc(size)?);
    b.write(bx, 0, &bytes(x))?;
    b.write(by, 0, &bytes(y))?;
    let bindings = [bx, by].map(|buffer| Binding {
        buffer,
        offset: 0,
        size,
    });
    b.dispatch(&Dispatch {
        program: b.compile(&saxpy())?,
        grid: [n.div_ceil(WG), 1, 1],
        bindings: &bindings,
        params: &[ParamValue::F32(a), ParamValue::U32(n)],
    })?;
    let mut out = vec![0u8; size as usize];
    b.read(by, 0, &mut out)?; // waits for the dispatch
    b.free(bx);
    b.free(by);
    Ok(out
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|f| f.to_le_bytes()).collect()
}

fn max_diff(p: &[f32], q: &[f32]) -> f32 {
    p.iter().zip(q).fold(0.0, |m, (p, q)| m.max((p - q).abs()))
}

fn main() -> ExitCode {
    if let Some(code) = trine::start() {
        return code;
    }
    let a = 1.75f32;
    let x: Vec<f32> = (0..100_000).map(|i| (i as f32 * 0.37).sin()).collect();
    let y: Vec<f32> = x.iter().map(|v| (3.0 * v).cos()).collect();
    let want: Vec<f32> = x.iter().zip(&y).map(|(x, y)| a * x + y).collect();
    let (mut results, mut agree) = (Vec::<Vec<f32>>::new(), true);
    for kind in BackendKind::ALL {
        let name = kind.name();
        let backend = match backends::open(kind) {
            Ok(b) => b,
            Err(e) => {
                println!("{name:<7} not here: {e}");
                continue;
            }
        };
        let device = &backend.info().name;
        let got = match run(&*backend, a, &x, &y) {
            Ok(got) => got,
            Err(e) => {
                println!("{name:<7} {device}: failed: {e}");
                agree = false;
                continue;
            }
        };
        let rust = max_diff(&got, &want);
        let others = results.iter().fold(0.0, |m, r| max_diff(&got, r).max(m));
        println!("{name:<7} {device}: {rust:.1e} from Rust, {others:.1e} from those above");
        agree &= rust.max(others) <= BOUND;
        results.push(got);
    }
    if agree && !results.is_empty() {
        return ExitCode::SUCCESS;
    }
    println!("the backends do not agree within {BOUND:.0e}, or none ran");
    ExitCode::FAILURE
}
