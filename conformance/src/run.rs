//! Running cases: the interpreter gives the reference, every backend is compared with it, and
//! the interpreter itself is compared with each case's plain-Rust reference.

use crate::expectations::{self, Expectation};
use serde::Serialize;
use std::sync::Arc;
use trine_backends::{Backend, BackendError, Binding, DeviceInfo, Dispatch};
use trine_ir::{Kernel, Scalar};
use trine_ops::case::{decode, Case};
use trine_ops::compare::{judge, Verdict};

/// Name of the interpreter's column in the matrix.
pub const INTERPRETER: &str = "interpreter";

/// Byte pattern written around every output; any change is a write out of bounds.
const SENTINEL: u8 = 0xA5;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Fail,
    Skip,
}

/// One case on one backend: the `--json` record.
#[derive(Clone, Debug, Serialize)]
pub struct Record {
    pub case: String,
    pub backend: String,
    pub status: Status,
    /// Worst NMSE over the case's outputs, when they could be compared.
    pub nmse: Option<f64>,
    pub reason: Option<String>,
    /// The kernel that ran (the fallback's name where the backend lacked a capability).
    pub kernel: String,
}

/// Output buffers of a case after the interpreter ran it.
pub struct Reference {
    pub outputs: Result<Vec<Vec<u8>>, String>,
}

/// Runs `case` on the interpreter ([`Case::interpret`]).
pub fn reference(case: &Case) -> Reference {
    Reference {
        outputs: case.interpret(),
    }
}

fn record(
    case: &Case,
    backend: &str,
    kernel: &str,
    verdicts: Result<Vec<Verdict>, String>,
) -> Record {
    let mut rec = Record {
        case: case.name.clone(),
        backend: backend.into(),
        status: Status::Pass,
        nmse: None,
        reason: None,
        kernel: kernel.into(),
    };
    match verdicts {
        Err(reason) => {
            rec.status = Status::Fail;
            rec.reason = Some(reason);
        }
        Ok(vs) => {
            for v in vs {
                let (e, reason) = match v {
                    Verdict::Pass { nmse } => (Some(nmse), None),
                    Verdict::Fail { nmse, reason } => (nmse, Some(reason)),
                };
                if let Some(e) = e {
                    rec.nmse = Some(rec.nmse.map_or(e, |w: f64| w.max(e)));
                }
                if let Some(r) = reason {
                    rec.status = Status::Fail;
                    rec.reason.get_or_insert(r);
                }
            }
        }
    }
    rec
}

/// The interpreter against the plain-Rust references.
pub fn check_interpreter(case: &Case, reference: &Reference) -> Record {
    let verdicts = reference
        .outputs
        .as_ref()
        .map(|outs| case.judge_expected(outs))
        .map_err(Clone::clone);
    record(case, INTERPRETER, &case.kernel.name, verdicts)
}

/// Runs `case` on `backend` and compares it with the interpreter's `reference`. A case
/// declared known-bad for this backend and driver in [`expectations::KNOWN_BAD`] is settled as
/// that file says: reported, never failing the run.
pub fn check_backend(case: &Case, backend: &Arc<dyn Backend>, reference: &Reference) -> Record {
    check_backend_expecting(case, backend, reference, expectations::KNOWN_BAD)
}

/// [`check_backend`] with `known_bad` as the list of known-bad cases.
pub fn check_backend_expecting(
    case: &Case,
    backend: &Arc<dyn Backend>,
    reference: &Reference,
    known_bad: &[Expectation],
) -> Record {
    let rec = compare_backend(case, backend, reference);
    let info = backend.info();
    match expectations::lookup(known_bad, backend.name(), info, &case.name) {
        Some(entry) => expectations::settle(rec, entry, &info.driver),
        None => rec,
    }
}

/// The kernel a device described by `info` runs for `case`: its own, or its fallback where
/// the device lacks a capability the kernel declares. `Err` names what is missing where it
/// can run neither (the fallback's lack, where it has one).
pub fn kernel_for<'c>(case: &'c Case, info: &DeviceInfo) -> Result<&'c Kernel, &'static str> {
    let Some(what) = lacks(&case.kernel, info) else {
        return Ok(&case.kernel);
    };
    match &case.fallback {
        Some(f) => lacks(f, info).map_or(Ok(f), Err),
        None => Err(what),
    }
}

/// What of `kernel`'s needs the device lacks: a capability it declares, or the shared memory
/// it takes (a kernel sized for larger devices, which an executor picks only where it fits).
fn lacks(kernel: &Kernel, info: &DeviceInfo) -> Option<&'static str> {
    info.lacks(kernel.capabilities).or_else(|| {
        (kernel.shared_bytes() > info.max_shared_bytes).then_some("the kernel's shared memory")
    })
}

fn compare_backend(case: &Case, backend: &Arc<dyn Backend>, reference: &Reference) -> Record {
    let info = backend.info();
    let kernel = match kernel_for(case, info) {
        Ok(kernel) => kernel,
        Err(what) => {
            let mut r = record(case, backend.name(), &case.kernel.name, Ok(vec![]));
            r.status = Status::Skip;
            r.reason = Some(format!("{LACKS}{what}"));
            return r;
        }
    };
    let want = match &reference.outputs {
        Ok(w) => w,
        Err(e) => {
            let reason = format!("the interpreter failed, so there is no reference: {e}");
            return record(case, backend.name(), &kernel.name, Err(reason));
        }
    };
    let run = run_on(case, kernel, backend.as_ref()).map(|(got, guard_faults)| {
        let mut verdicts: Vec<Verdict> = guard_faults
            .into_iter()
            .map(|reason| Verdict::Fail { nmse: None, reason })
            .collect();
        for ((b, got), want) in case.buffers.iter().zip(got).zip(want) {
            if b.output {
                verdicts.push(judge(
                    &b.name,
                    &decode(b.elem, want),
                    &decode(b.elem, &got),
                    b.bound(case.bound),
                ));
            }
        }
        verdicts
    });
    match run {
        // A refusal is a skip only where the device's own description confirms it: a backend
        // that refuses a kernel its DeviceInfo says it can run is broken, not limited, and a
        // backend that refused everything would otherwise pass the suite having run nothing.
        Err(BackendError::Unsupported { what, .. }) => {
            let lacking = lacking(kernel, info);
            let mut r = record(case, backend.name(), &kernel.name, Ok(vec![]));
            if lacking.is_empty() {
                r.status = Status::Fail;
                r.reason = Some(format!(
                    "refused ({what}), although the device reports every capability the \
                     kernel needs"
                ));
            } else {
                r.status = Status::Skip;
                r.reason = Some(format!("{LACKS}{} ({what})", lacking.join(", ")));
            }
            r
        }
        run => record(
            case,
            backend.name(),
            &kernel.name,
            run.map_err(|e| e.to_string()),
        ),
    }
}

/// How the reason of every skip for a missing capability starts.
pub const LACKS: &str = "device lacks ";

/// What `kernel` needs that `info` says the device does not have, in words: subgroup
/// operations, f16, 8-bit storage. (Shared memory and invocations beyond the device's limits
/// are refused earlier, by validation, as errors rather than as unsupported.)
pub fn lacking(kernel: &Kernel, info: &DeviceInfo) -> Vec<String> {
    let any = |ty: &dyn Fn(Scalar) -> bool| {
        kernel.buffers.iter().any(|b| ty(b.elem))
            || kernel.shared.iter().any(|s| ty(s.elem))
            || kernel.vars.iter().any(|v| ty(v.ty))
            || trine_ir::validate(kernel, &info.limits())
                .is_ok_and(|i| i.types.iter().any(|&t| ty(t)))
    };
    let mut out: Vec<String> = info
        .missing_features(kernel.capabilities)
        .map(String::from)
        .collect();
    if let Some(w) = kernel.capabilities.subgroup_width {
        if !info.runs_subgroup_width(w) {
            out.push(format!("subgroups of exactly {w}"));
        }
    }
    if !info.f16 && any(&|t| t == Scalar::F16) {
        out.push("f16".to_string());
    }
    if !info.int8 && any(&|t| matches!(t, Scalar::U8 | Scalar::I8)) {
        out.push("8-bit storage".to_string());
    }
    out
}

/// Uploads the case with sentinel guards around each buffer, runs `kernel` (the case's kernel
/// or its fallback) on `backend`, and returns every buffer's contents and any guard that
/// changed.
pub fn run_on(
    case: &Case,
    kernel: &trine_ir::Kernel,
    backend: &dyn Backend,
) -> Result<(Vec<Vec<u8>>, Vec<String>), BackendError> {
    let program = backend.compile(kernel)?;
    let guard = backend.info().min_binding_alignment.max(256);
    let mut handles = vec![];
    let result = (|| {
        let mut bindings = vec![];
        for b in &case.buffers {
            let len = b.data.len() as u64;
            let total = guard + len.next_multiple_of(guard) + guard;
            let h = backend.alloc(total)?;
            handles.push(h);
            let mut init = vec![SENTINEL; total as usize];
            init[guard as usize..(guard + len) as usize].copy_from_slice(&b.data);
            backend.write(h, 0, &init)?;
            bindings.push(Binding {
                buffer: h,
                offset: guard,
                size: len,
            });
        }
        backend.dispatch(&Dispatch {
            program,
            grid: case.grid_for(kernel),
            bindings: &bindings,
            params: &case.params,
        })?;
        backend.synchronize()?;
        let mut outs = vec![];
        let mut faults = vec![];
        for (b, binding) in case.buffers.iter().zip(&bindings) {
            let len = b.data.len() as u64;
            let total = guard + len.next_multiple_of(guard) + guard;
            let mut all = vec![0u8; total as usize];
            backend.read(binding.buffer, 0, &mut all)?;
            let (lo, hi) = (guard as usize, (guard + len) as usize);
            let bad = all[..lo]
                .iter()
                .enumerate()
                .chain(all[hi..].iter().enumerate().map(|(i, v)| (i + hi, v)))
                .find(|(_, &v)| v != SENTINEL);
            if let Some((at, _)) = bad {
                let rel = at as i64 - lo as i64;
                faults.push(format!(
                    "{}: write outside the buffer at byte {rel} (relative to its start)",
                    b.name
                ));
            }
            outs.push(all[lo..hi].to_vec());
        }
        Ok((outs, faults))
    })();
    for h in handles {
        backend.free(h);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use trine_backends::proxy::{Hooks, Proxy};
    use trine_backends::{BackendKind, ProgramId};
    use trine_ir::{Access, KernelBuilder};
    use trine_ops::case::NMSE_EXACT;

    /// A driver that can run nothing: it refuses every kernel as unsupported.
    struct Refusing;

    impl Hooks for Refusing {
        fn compile(&self, _: &dyn Backend, kernel: &Kernel) -> Result<ProgramId, BackendError> {
            Err(BackendError::Unsupported {
                kernel: kernel.name.clone(),
                what: "anything at all".into(),
            })
        }
    }

    /// A CPU that describes itself with or without f16 and refuses every kernel.
    fn refusing(f16: bool) -> Arc<dyn Backend> {
        let inner = trine_backends::open(BackendKind::Cpu).unwrap();
        Arc::new(Proxy::new(inner, "refusing", |i| i.f16 = f16, Refusing))
    }

    /// Copies one element of `elem` from x to y.
    fn copy_case(elem: Scalar) -> Case {
        let k = KernelBuilder::new("copy_one", [1, 1, 1]);
        let x = k.buffer("x", elem, Access::Read);
        let y = k.buffer("y", elem, Access::Write);
        k.store(y, k.u32(0), k.load(x, k.u32(0)));
        // 1.0 then 0.0 as f16 (the second element is not copied); 15360 as one u32.
        let bytes = vec![0x00, 0x3c, 0, 0];
        let want = if elem == Scalar::F16 {
            vec![1.0, 0.0]
        } else {
            vec![15360.0]
        };
        Case::new("copy", k.finish(), [1, 1, 1])
            .input("x", elem, bytes)
            .output("y", elem, vec![0; 4], want)
            .bound(NMSE_EXACT)
    }

    #[test]
    fn a_refusal_is_a_skip_only_where_the_device_lacks_what_the_kernel_needs() {
        // A kernel that needs nothing special, refused: a failure.
        let plain = copy_case(Scalar::U32);
        let refused = check_backend(&plain, &refusing(false), &reference(&plain));
        assert_eq!(refused.status, Status::Fail, "{refused:?}");
        assert!(refused.reason.unwrap().contains("anything at all"));
        // An f16 kernel: a skip naming f16 where the device says it lacks f16, a failure
        // where it says it has it.
        let f16 = copy_case(Scalar::F16);
        let without_f16 = check_backend(&f16, &refusing(false), &reference(&f16));
        assert_eq!(without_f16.status, Status::Skip);
        assert_eq!(
            without_f16.reason.as_deref(),
            Some("device lacks f16 (anything at all)")
        );
        let with_f16 = check_backend(&f16, &refusing(true), &reference(&f16));
        assert_eq!(with_f16.status, Status::Fail, "{with_f16:?}");
        // And both pass where the kernel runs.
        let cpu = trine_backends::open(BackendKind::Cpu).unwrap();
        for case in [f16, plain] {
            let r = check_backend(&case, &cpu, &reference(&case));
            assert_eq!(r.status, Status::Pass, "{r:?}");
        }
    }
}
