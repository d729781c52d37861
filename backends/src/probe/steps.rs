//! The work of a probe on any backend: a small upload, one tiny kernel compiled and launched, a
//! download and a comparison, each step announced before it starts.

use super::protocol::{Line, Step};
use crate::backend::{Backend, Binding, BufferHandle, Dispatch};
use crate::error::BackendError;
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar};

/// Elements in the probe's buffers: one workgroup of 64, a width every backend supports.
const N: u32 = 64;

/// `out[i] = in[i] * 2 + 1` for `i < n`.
pub fn kernel() -> Kernel {
    let k = KernelBuilder::new("probe_affine", [N, 1, 1]);
    let input = k.buffer("input", Scalar::F32, Access::Read);
    let out = k.buffer("out", Scalar::F32, Access::Write);
    let n = k.param("n", Scalar::U32);
    let i = k.global_id(0);
    k.if_(i.lt(n), || {
        k.store(out, i, k.load(input, i) * k.f32(2.0) + k.f32(1.0));
    });
    k.finish()
}

/// Inputs whose results are exact in f32 (small multiples of 1/4), negative ones included.
fn input() -> Vec<f32> {
    (0..N).map(|i| i as f32 * 0.25 - 4.0).collect()
}

/// A step that failed, and why.
pub struct Failed {
    pub step: Step,
    pub reason: String,
}

/// A backend error in words, without the "unavailable: " its display starts with (the
/// outcome already says so).
pub fn reason(e: BackendError) -> String {
    match e {
        BackendError::Unavailable(why) => why,
        e => e.to_string(),
    }
}

/// The error of `step` from a backend error.
fn failed(step: Step) -> impl Fn(BackendError) -> Failed {
    move |e| Failed {
        step,
        reason: reason(e),
    }
}

/// Runs every step after [`Step::Init`] on `backend`, calling `emit` with each event.
pub fn run<B: Backend + ?Sized>(backend: &B, emit: &mut dyn FnMut(Line)) -> Result<(), Failed> {
    emit(Line::Start(Step::Query));
    emit(Line::Info(Box::new(backend.info().clone())));
    emit(Line::Done(Step::Query));

    emit(Line::Start(Step::Upload));
    let bytes = u64::from(N) * 4;
    let input_buf = backend.alloc(bytes).map_err(failed(Step::Upload))?;
    let out_buf = match backend.alloc(bytes) {
        Ok(b) => b,
        Err(e) => {
            backend.free(input_buf);
            return Err(failed(Step::Upload)(e));
        }
    };
    let result = run_with(backend, input_buf, out_buf, emit);
    backend.free(out_buf);
    backend.free(input_buf);
    result
}

fn run_with<B: Backend + ?Sized>(
    backend: &B,
    input_buf: BufferHandle,
    out_buf: BufferHandle,
    emit: &mut dyn FnMut(Line),
) -> Result<(), Failed> {
    let x = input();
    let data: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    backend
        .write(input_buf, 0, &data)
        .map_err(failed(Step::Upload))?;
    emit(Line::Done(Step::Upload));

    emit(Line::Start(Step::Compile));
    let program = backend.compile(&kernel()).map_err(failed(Step::Compile))?;
    emit(Line::Done(Step::Compile));

    emit(Line::Start(Step::Launch));
    let bindings = [input_buf, out_buf].map(|buffer| Binding {
        buffer,
        offset: 0,
        size: u64::from(N) * 4,
    });
    backend
        .dispatch(&Dispatch {
            program,
            grid: [1, 1, 1],
            bindings: &bindings,
            params: &[ParamValue::U32(N)],
        })
        .map_err(failed(Step::Launch))?;
    emit(Line::Done(Step::Launch));

    emit(Line::Start(Step::Synchronize));
    backend.synchronize().map_err(failed(Step::Synchronize))?;
    emit(Line::Done(Step::Synchronize));

    emit(Line::Start(Step::Download));
    let mut out = vec![0u8; data.len()];
    backend
        .read(out_buf, 0, &mut out)
        .map_err(failed(Step::Download))?;
    emit(Line::Done(Step::Download));

    emit(Line::Start(Step::Compare));
    compare(&x, &out).map_err(|reason| Failed {
        step: Step::Compare,
        reason,
    })?;
    emit(Line::Done(Step::Compare));
    Ok(())
}

/// Checks `out` (little-endian f32) against `2x + 1`, exactly.
fn compare(x: &[f32], out: &[u8]) -> Result<(), String> {
    for (i, (&x, got)) in x.iter().zip(out.chunks_exact(4)).enumerate() {
        let got = f32::from_le_bytes([got[0], got[1], got[2], got[3]]);
        let want = x * 2.0 + 1.0;
        if got.to_bits() != want.to_bits() {
            return Err(format!(
                "element {i}: the kernel wrote {got}, expected {want} (2 * {x} + 1)"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::CpuBackend;

    #[test]
    fn the_steps_pass_on_the_cpu_backend_in_order() {
        let mut lines = vec![];
        let r = run(&CpuBackend::new(), &mut |l| lines.push(l));
        assert!(
            r.is_ok(),
            "{}",
            r.err().map(|f| f.reason).unwrap_or_default()
        );
        let starts: Vec<Step> = lines
            .iter()
            .filter_map(|l| match l {
                Line::Start(s) => Some(*s),
                _ => None,
            })
            .collect();
        use Step::*;
        assert_eq!(
            starts,
            [
                Query,
                Upload,
                Compile,
                Launch,
                Synchronize,
                Download,
                Compare
            ]
        );
        assert!(lines
            .iter()
            .any(|l| matches!(l, Line::Info(i) if i.backend == "cpu")));
    }

    #[test]
    fn the_probe_kernel_lowers_for_every_gpu_backend() {
        let k = kernel();
        for dialect in [trine_codegen::Dialect::Hip, trine_codegen::Dialect::Cuda] {
            let text = trine_codegen::hip(&k, dialect);
            assert!(text.is_ok(), "{dialect:?}: {:?}", text.err());
        }
        assert!(trine_codegen::spirv(&k, &Default::default()).is_ok());
    }

    #[test]
    fn a_wrong_result_names_the_element() {
        let x = input();
        let mut out: Vec<u8> = x
            .iter()
            .flat_map(|v| (v * 2.0 + 1.0).to_le_bytes())
            .collect();
        assert!(compare(&x, &out).is_ok());
        out[8..12].copy_from_slice(&0f32.to_le_bytes());
        let err = compare(&x, &out).unwrap_err();
        assert!(err.starts_with("element 2:"), "{err}");
    }
}
