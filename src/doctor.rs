//! `trine doctor`: each backend probed in a child process — ok, unavailable (why), hung (in
//! which step) or crashed (how, in which step) — with the device it found, and for HIP the
//! runtime library loaded and the advice that applies.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;
use trine_backends::hip::{describe_runtime, quirks, RuntimeInfo};
use trine_backends::probe::{signal_name, ProbeOutcome};
use trine_backends::{probe_all, BackendKind, DeviceInfo, DeviceType};
use trine_llama::tuned::{self, Tuned, TunedError};

/// One backend's status.
pub struct Report {
    pub kind: BackendKind,
    pub outcome: ProbeOutcome,
    /// Facts about the runtime beyond the device (label, value), e.g. the HIP library loaded.
    pub runtime: Vec<(&'static str, String)>,
    /// What the user can do about it.
    pub advice: Vec<String>,
}

/// Probes every backend with `exe __probe <kind>`, each for at most `timeout`, and adds what
/// is known about the HIP runtime and the advice for it.
pub fn diagnose(exe: &Path, timeout: Duration) -> Vec<Report> {
    probe_all(exe, &BackendKind::ALL, timeout)
        .into_iter()
        .map(|(kind, outcome)| {
            let (runtime, advice) = match kind {
                BackendKind::Hip => hip_runtime(&outcome, timeout),
                _ => (vec![], vec![]),
            };
            Report {
                kind,
                outcome,
                runtime,
                advice,
            }
        })
        .collect()
}

/// The HIP library that loads here and its version (loading it touches no device, but it runs
/// the library's initialisers, so it gets the probe's timeout too), and the quirks advice for
/// the device the probe saw.
fn hip_runtime(
    outcome: &ProbeOutcome,
    timeout: Duration,
) -> (Vec<(&'static str, String)>, Vec<String>) {
    let (tx, rx) = mpsc::channel();
    // Detached: a library that never finishes loading is left behind when doctor exits.
    std::thread::spawn(move || {
        let _ = tx.send(describe_runtime());
    });
    let runtime = match rx.recv_timeout(timeout) {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err(format!(
            "loading the HIP runtime did not finish within {} s",
            timeout.as_secs_f64()
        )),
    };
    let device = outcome.device();
    let rows = match &runtime {
        // Notes the device already carries (the backend copies some) are not repeated.
        Ok(rt) => runtime_rows(rt)
            .into_iter()
            .filter(|(k, v)| *k != "note" || !device.is_some_and(|d| d.notes.contains(v)))
            .collect(),
        Err(why) => vec![("library", why.clone())],
    };
    let hung = match outcome {
        ProbeOutcome::Hung { step, .. } => Some(step.name()),
        _ => None,
    };
    let advice = quirks::advice(
        device.and_then(|d| d.arch.as_deref()),
        runtime.as_ref().ok().and_then(|rt| rt.version.as_deref()),
        device.is_some_and(|d| d.device_type == DeviceType::Integrated),
        hung,
    );
    (rows, advice)
}

fn runtime_rows(rt: &RuntimeInfo) -> Vec<(&'static str, String)> {
    let mut rows = vec![
        ("library", rt.library.clone()),
        (
            "version",
            rt.version.clone().unwrap_or_else(|| "unknown".into()),
        ),
        (
            "hiprtc",
            match (&rt.hiprtc, &rt.hiprtc_version) {
                (Some(lib), Some(v)) => format!("{lib} ({v})"),
                (Some(lib), None) => lib.clone(),
                (None, _) => "not found".into(),
            },
        ),
        (
            "compiler",
            match &rt.compiler_isas {
                Some(isas) => format!("{} ISAs: {}", isas.len(), isas.join(" ")),
                None => "ISA list unavailable (comgr not found): compiles run in a child".into(),
            },
        ),
    ];
    if rt.visible.len() > 1 {
        let all: Vec<String> = rt
            .visible
            .iter()
            .map(|i| format!("{} ({})", i.path, i.version))
            .collect();
        rows.push(("installs", all.join(", ")));
    }
    rows.extend(rt.notes.iter().map(|n| ("note", n.clone())));
    rows
}

pub fn to_json(reports: &[Report]) -> Value {
    Value::Array(
        reports
            .iter()
            .map(|r| {
                let mut v = json!({
                    "backend": r.kind.name(),
                    "status": r.outcome.status(),
                });
                if let Some(info) = r.outcome.device() {
                    v["info"] = json!(info);
                    v["tuning"] = json!(tuning(info));
                }
                match &r.outcome {
                    ProbeOutcome::Ok(_) => {}
                    ProbeOutcome::Unavailable(why) => v["reason"] = json!(why),
                    ProbeOutcome::Hung { step, .. } => v["step"] = json!(step.name()),
                    ProbeOutcome::Crashed(c) => {
                        v["step"] = json!(c.step.name());
                        v["signal"] = json!(c.signal);
                        v["signal_name"] = json!(c.signal.and_then(signal_name));
                        v["exit_code"] = json!(c.exit_code);
                        v["stderr"] = json!(c.stderr);
                    }
                }
                if !r.runtime.is_empty() {
                    v["runtime"] = r
                        .runtime
                        .iter()
                        .map(|(k, val)| (k.to_string(), json!(val)))
                        .collect::<serde_json::Map<_, _>>()
                        .into();
                }
                if !r.advice.is_empty() {
                    v["advice"] = json!(r.advice);
                }
                v
            })
            .collect(),
    )
}

fn bytes(n: u64) -> String {
    const GIB: f64 = (1u64 << 30) as f64;
    const MIB: f64 = (1u64 << 20) as f64;
    if n as f64 >= GIB {
        format!("{:.1} GiB", n as f64 / GIB)
    } else {
        format!("{:.0} MiB", n as f64 / MIB)
    }
}

/// Which kernel choices an executor on the device takes: a table `cargo xtask tune` stored
/// for it, or the defaults, and why where a table is there but refused.
fn tuning(i: &DeviceInfo) -> String {
    describe_tuning(Tuned::load(i), tuned::path(i))
}

/// [`tuning`]'s words for what loading the table at `path` gave.
fn describe_tuning(loaded: Result<Option<Tuned>, TunedError>, path: Option<PathBuf>) -> String {
    match loaded {
        Ok(Some(t)) => format!(
            "{} ({})",
            t.summary(),
            path.map_or_else(String::new, |p| p.display().to_string())
        ),
        Ok(None) => "defaults (`cargo xtask tune` measures this device's)".into(),
        Err(e) => format!("defaults: {e}"),
    }
}

fn device_rows(i: &DeviceInfo) -> Vec<(&'static str, String)> {
    let sg = if i.subgroup_ops {
        format!("{:?}", i.subgroup_sizes)
    } else {
        "no".to_string()
    };
    let mut rows = vec![
        (
            "device",
            format!("{} ({:?}, vendor {})", i.name, i.device_type, i.vendor),
        ),
        ("arch", i.arch.clone().unwrap_or_else(|| "-".into())),
        (
            "driver",
            format!("{} (runtime {})", i.driver, i.runtime_version),
        ),
        (
            "memory",
            format!(
                "{}{}{}",
                match (i.memory.device_local, i.memory.host_visible) {
                    // wgpu, for one, says nothing of memory sizes.
                    (0, 0) => "sizes not reported".into(),
                    (local, host) => {
                        format!(
                            "{} device-local, {} host-visible",
                            bytes(local),
                            bytes(host)
                        )
                    }
                },
                if i.memory.unified { ", unified" } else { "" },
                if i.memory.zero_copy {
                    ", zero-copy"
                } else {
                    ""
                }
            ),
        ),
        ("subgroups", sg),
        (
            "units",
            i.compute_units
                .map_or("compute units not reported".to_string(), |n| {
                    format!("{n} compute units")
                }),
        ),
        ("f16 / int8", format!("{} / {}", i.f16, i.int8)),
        (
            "limits",
            format!(
                "{} shared bytes, {} invocations, {:?} workgroups, {}",
                i.max_shared_bytes,
                i.max_invocations,
                i.max_workgroups,
                match i.max_binding_bytes {
                    // What a backend without a limit of its own reports (the CPU's).
                    u64::MAX => "no limit per binding".to_string(),
                    n => format!("{} per binding", bytes(n)),
                }
            ),
        ),
        ("timestamps", i.timestamps.to_string()),
        ("tuning", tuning(i)),
    ];
    rows.extend(i.notes.iter().map(|n| ("note", n.clone())));
    rows
}

pub fn to_text(reports: &[Report]) -> String {
    let mut out = String::new();
    for r in reports {
        let head = match &r.outcome {
            ProbeOutcome::Ok(_) => "ok".to_string(),
            ProbeOutcome::Unavailable(why) => format!("unavailable: {why}"),
            ProbeOutcome::Hung { step, .. } => {
                format!("hung in {step} (killed after the probe timeout)")
            }
            ProbeOutcome::Crashed(c) => format!("crashed: {c}"),
        };
        let rows = r.outcome.device().map(device_rows).unwrap_or_default();
        out += &format!("{}: {head}\n", r.kind);
        let advice = r.advice.iter().map(|a| ("advice", a.clone()));
        for (k, v) in rows.into_iter().chain(r.runtime.clone()).chain(advice) {
            out += &format!("  {k:<11} {v}\n");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use trine_backends::probe::{Crash, Step};

    fn reports() -> Vec<Report> {
        vec![
            Report {
                kind: BackendKind::Hip,
                outcome: ProbeOutcome::Hung {
                    step: Step::Init,
                    device: None,
                },
                runtime: vec![("library", "/opt/rocm/lib/libamdhip64.so".into())],
                advice: vec!["try HSA_ENABLE_SDMA=0".into()],
            },
            Report {
                kind: BackendKind::Cuda,
                outcome: ProbeOutcome::Crashed(Crash {
                    signal: Some(6),
                    exit_code: None,
                    step: Step::Compile,
                    stderr: "boom\n".into(),
                    device: None,
                }),
                runtime: vec![],
                advice: vec![],
            },
            Report {
                kind: BackendKind::Vulkan,
                outcome: ProbeOutcome::Unavailable("no loader".into()),
                runtime: vec![],
                advice: vec![],
            },
        ]
    }

    #[test]
    fn text_names_status_step_and_advice() {
        let t = to_text(&reports());
        assert!(t.contains("hip: hung in init"), "{t}");
        assert!(
            t.contains("  library     /opt/rocm/lib/libamdhip64.so\n"),
            "{t}"
        );
        assert!(t.contains("  advice      try HSA_ENABLE_SDMA=0\n"), "{t}");
        assert!(
            t.contains("cuda: crashed: SIGABRT (signal 6) in compile: boom"),
            "{t}"
        );
        assert!(t.contains("vulkan: unavailable: no loader"), "{t}");
    }

    #[test]
    fn a_binding_without_a_limit_says_so() {
        let mut info =
            trine_backends::Backend::info(&trine_backends::cpu::CpuBackend::interpreter()).clone();
        info.max_binding_bytes = u64::MAX;
        let limits = |i: &DeviceInfo| {
            device_rows(i)
                .into_iter()
                .find(|(k, _)| *k == "limits")
                .map(|(_, v)| v)
                .unwrap()
        };
        let l = limits(&info);
        assert!(l.ends_with(", no limit per binding"), "{l}");
        info.max_binding_bytes = 128 << 20;
        let l = limits(&info);
        assert!(l.ends_with(", 128 MiB per binding"), "{l}");
    }

    #[test]
    fn json_carries_the_same_facts() {
        let v = to_json(&reports());
        assert_eq!(v[0]["status"], "hung");
        assert_eq!(v[0]["step"], "init");
        assert_eq!(v[0]["runtime"]["library"], "/opt/rocm/lib/libamdhip64.so");
        assert_eq!(v[1]["status"], "crashed");
        assert_eq!(v[1]["signal_name"], "SIGABRT");
        assert_eq!(v[2]["reason"], "no loader");
    }

    #[test]
    fn tuning_says_table_defaults_or_refusal() {
        let path = PathBuf::from("/c/tuning/t.json");
        let t: Tuned = serde_json::from_value(json!({
            "format": 1, "device": "d", "products": [{
                "weights": "q6_k", "rows": 4096, "cols": 14336, "rows_per_team": 1,
                "team_width": 128, "units": 1, "steps": 1, "median_us": 24.4, "default_us": 27.5
            }]
        }))
        .unwrap();
        let used = describe_tuning(Ok(Some(t)), Some(path.clone()));
        assert_eq!(
            used,
            "kernel choices measured by `cargo xtask tune` for 1 decode products (/c/tuning/t.json)"
        );
        assert!(describe_tuning(Ok(None), None).starts_with("defaults ("));
        let refused = describe_tuning(Err(TunedError::Format { path, found: 0 }), None);
        assert!(
            refused.starts_with("defaults: the tuning table /c/tuning/t.json"),
            "{refused}"
        );
    }
}
