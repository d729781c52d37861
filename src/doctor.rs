//! `trine doctor`: what each backend found on this machine, or why it is unavailable.

use serde_json::{json, Value};
use trine_backends::{open_all, BackendKind, DeviceInfo};

/// One backend's status.
pub struct Report {
    pub backend: &'static str,
    pub info: Result<DeviceInfo, String>,
}

pub fn diagnose() -> Vec<Report> {
    open_all(&BackendKind::ALL)
        .into_iter()
        .map(|o| Report {
            backend: o.kind.name(),
            info: o
                .backend
                .map(|b| b.info().clone())
                .map_err(|e| e.to_string()),
        })
        .collect()
}

pub fn to_json(reports: &[Report]) -> Value {
    Value::Array(
        reports
            .iter()
            .map(|r| match &r.info {
                Ok(info) => json!({"backend": r.backend, "status": "ok", "info": info}),
                Err(why) => json!({"backend": r.backend, "status": "unavailable", "reason": why}),
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

pub fn to_text(reports: &[Report]) -> String {
    let mut out = String::new();
    for r in reports {
        match &r.info {
            Err(why) => out += &format!("{}: unavailable: {why}\n", r.backend),
            Ok(i) => {
                out += &format!("{}: ok\n", r.backend);
                let sg = if i.subgroup_ops {
                    format!("{:?}", i.subgroup_sizes)
                } else {
                    "no".to_string()
                };
                let rows = [
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
                            "{} device-local, {} host-visible{}{}",
                            bytes(i.memory.device_local),
                            bytes(i.memory.host_visible),
                            if i.memory.unified { ", unified" } else { "" },
                            if i.memory.zero_copy {
                                ", zero-copy"
                            } else {
                                ""
                            }
                        ),
                    ),
                    ("subgroups", sg),
                    ("f16 / int8", format!("{} / {}", i.f16, i.int8)),
                    (
                        "limits",
                        format!(
                            "{} shared bytes, {} invocations, {:?} workgroups, {} per binding",
                            i.max_shared_bytes,
                            i.max_invocations,
                            i.max_workgroups,
                            bytes(i.max_binding_bytes.min(1 << 50))
                        ),
                    ),
                    ("timestamps", i.timestamps.to_string()),
                ];
                for (k, v) in rows {
                    out += &format!("  {k:<11} {v}\n");
                }
                for n in &i.notes {
                    out += &format!("  note        {n}\n");
                }
            }
        }
    }
    out
}
