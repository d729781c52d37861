//! Known-bad cases: the one place where a case that is expected to fail on a backend and
//! driver is declared, with the reason (as wgpu's test expectations do).
//!
//! A listed case still runs and is still reported; it does not fail the run:
//! - when it fails, its record becomes `skip` with the reason
//!   `known bad on <driver>: <reason>, got: <what happened>`;
//! - when it passes, its record stays `pass` and carries a note to delete the entry, which the
//!   matrix prints;
//! - when it is skipped for another reason (a missing capability), the record is unchanged.

use crate::run::{Record, Status};
use trine_backends::DeviceInfo;

/// How the reason of a known-bad case's skip starts.
pub const KNOWN_BAD_REASON: &str = "known bad on ";

/// One known-bad case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expectation {
    /// Backend name as in the matrix: "cpu", "vulkan", "hip", "cuda".
    pub backend: &'static str,
    /// A substring of the device's driver string (`DeviceInfo::driver`, what `trine doctor`
    /// prints, e.g. "llvmpipe Mesa 22.3.6" or "NVIDIA 580"); empty matches every driver.
    pub driver: &'static str,
    /// A prefix of the case names it covers: one case, or a family such as "rope/neox/f16/".
    pub case: &'static str,
    /// Why it fails: the driver bug or limitation, with a link where there is one.
    pub reason: &'static str,
}

/// Every known-bad case. Empty: every case passes on every backend and driver the suite has
/// run on (lavapipe and the CPU interpreter in CI; NVIDIA through Vulkan, see
/// `docs/conformance/`).
pub const KNOWN_BAD: &[Expectation] = &[];

impl Expectation {
    pub fn covers(&self, backend: &str, driver: &str, case: &str) -> bool {
        self.backend == backend && driver.contains(self.driver) && case.starts_with(self.case)
    }
}

/// The first entry of `list` that covers `case` on `backend` with this device.
pub fn lookup<'a>(
    list: &'a [Expectation],
    backend: &str,
    info: &DeviceInfo,
    case: &str,
) -> Option<&'a Expectation> {
    list.iter().find(|e| e.covers(backend, &info.driver, case))
}

/// Applies a known-bad entry to the record of a case it covers (see the module
/// documentation). `driver` is the device's driver string.
pub fn settle(mut rec: Record, entry: &Expectation, driver: &str) -> Record {
    match rec.status {
        Status::Fail => {
            let got = rec.reason.take().unwrap_or_else(|| "a failure".into());
            rec.status = Status::Skip;
            rec.reason = Some(format!(
                "{KNOWN_BAD_REASON}{driver}: {}, got: {got}",
                entry.reason
            ));
        }
        Status::Pass => {
            rec.reason = Some(format!(
                "passes although listed as known bad ({}): remove its entry from \
                 conformance/src/expectations.rs",
                entry.reason
            ));
        }
        Status::Skip => {}
    }
    rec
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::matrix;
    use crate::run::{check_backend_expecting, reference};
    use trine_ir::{Access, KernelBuilder, Scalar};
    use trine_ops::case::{Case, NMSE_EXACT, REFERENCE_SUBGROUP};

    const ENTRY: Expectation = Expectation {
        backend: "vulkan",
        driver: "llvmpipe",
        case: "rope/neox/",
        reason: "sin is off by 1e-3",
    };

    fn record(status: Status, reason: Option<&str>) -> Record {
        Record {
            case: "rope/neox/f32/7x9x64".into(),
            backend: "vulkan".into(),
            status,
            nmse: Some(1e-3),
            reason: reason.map(String::from),
            kernel: "rope_neox_f32".into(),
        }
    }

    #[test]
    fn entries_match_backend_driver_and_case_prefix() {
        let mesa = "llvmpipe Mesa 22.3.6 (LLVM 15.0.6)";
        assert!(ENTRY.covers("vulkan", mesa, "rope/neox/f32/7x9x64"));
        assert!(!ENTRY.covers("cpu", mesa, "rope/neox/f32/7x9x64"));
        assert!(!ENTRY.covers("vulkan", "NVIDIA 580.159", "rope/neox/f32/7x9x64"));
        assert!(!ENTRY.covers("vulkan", mesa, "rope/normal/f32/7x9x64"));
        let any_driver = Expectation {
            driver: "",
            ..ENTRY
        };
        assert!(any_driver.covers("vulkan", "NVIDIA 580.159", "rope/neox/f16/1x1x2"));
    }

    #[test]
    fn a_listed_failure_is_reported_as_a_skip_with_what_happened() {
        let rec = settle(
            record(Status::Fail, Some("y: NMSE 1.0e-3 exceeds 1e-7")),
            &ENTRY,
            "llvmpipe Mesa 22.3.6",
        );
        assert_eq!(rec.status, Status::Skip);
        assert_eq!(
            rec.reason.as_deref(),
            Some(
                "known bad on llvmpipe Mesa 22.3.6: sin is off by 1e-3, \
                 got: y: NMSE 1.0e-3 exceeds 1e-7"
            )
        );
        assert_eq!(rec.nmse, Some(1e-3), "the measurement is kept");
    }

    #[test]
    fn a_listed_case_that_passes_says_to_remove_the_entry() {
        let rec = settle(record(Status::Pass, None), &ENTRY, "llvmpipe");
        assert_eq!(rec.status, Status::Pass);
        assert!(rec.reason.unwrap().contains("remove its entry"));
        let skipped = settle(record(Status::Skip, Some("device lacks f16")), &ENTRY, "x");
        assert_eq!(skipped.status, Status::Skip);
        assert_eq!(skipped.reason.as_deref(), Some("device lacks f16"));
    }

    #[test]
    fn the_declared_list_is_well_formed() {
        for e in KNOWN_BAD {
            assert!(
                ["cpu", "vulkan", "hip", "cuda"].contains(&e.backend),
                "{e:?}"
            );
            assert!(!e.case.is_empty() && !e.reason.is_empty(), "{e:?}");
        }
    }

    /// A case that writes `value`, or the subgroup width when `value` is `None`: the
    /// interpreter runs with 16 lanes and the CPU backend with 8, so that one fails there.
    fn store_case(name: &str, value: Option<u32>) -> Case {
        let k = KernelBuilder::new("store_one", [1, 1, 1]);
        k.require_subgroups();
        let y = k.buffer("y", Scalar::U32, Access::Write);
        let v = value.map_or_else(|| k.subgroup_size(), |v| k.u32(v));
        k.store(y, k.u32(0), v);
        let want = value.unwrap_or(REFERENCE_SUBGROUP) as f64;
        Case::new(name, k.finish(), [1, 1, 1])
            .output("y", Scalar::U32, vec![0; 4], vec![want])
            .bound(NMSE_EXACT)
    }

    #[test]
    fn check_backend_settles_the_cases_a_list_declares() {
        let cpu = trine_backends::open(trine_backends::BackendKind::Cpu).unwrap();
        // Any driver: the CPU backend's driver string names its compiler, which varies.
        let entry = Expectation {
            backend: "cpu",
            driver: "",
            case: "width/",
            reason: "reads the subgroup width",
        };
        let failing = store_case("width/u32/1", None);
        let want = reference(&failing);
        let plain = check_backend_expecting(&failing, &cpu, &want, &[]);
        assert_eq!(plain.status, Status::Fail);
        let listed = check_backend_expecting(&failing, &cpu, &want, &[entry]);
        assert_eq!(listed.status, Status::Skip);
        let why = listed.reason.clone().unwrap();
        assert!(
            why.starts_with(&format!(
                "known bad on {}: reads the subgroup width, got: y: NMSE",
                cpu.info().driver
            )),
            "{why}"
        );

        let passing = store_case("width/u32/fixed", Some(7));
        let fixed = check_backend_expecting(&passing, &cpu, &reference(&passing), &[entry]);
        assert_eq!(fixed.status, Status::Pass);
        let text = matrix(&[listed, fixed]);
        assert!(
            text.contains("SKIP width/u32/1 on cpu: known bad on"),
            "{text}"
        );
        assert!(
            text.contains("NOTE width/u32/fixed on cpu: passes although listed"),
            "{text}"
        );
        assert!(text.contains("1 passed, 0 failed, 1 skipped"), "{text}");
    }
}
