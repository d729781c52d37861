//! Every kernel on every backend (cpu, vulkan, wgpu, hip, cuda) against the reference interpreter,
//! and the interpreter against each case's plain-Rust reference. Absent backends are skipped
//! with their reason, unless `TRINE_REQUIRE_BACKENDS` names them.

use trine_conformance::{Status, Summary};

#[test]
fn every_kernel_on_every_backend_matches_the_reference() {
    let names = ["cpu", "vulkan", "wgpu", "hip", "cuda"].map(String::from);
    let columns = trine_conformance::columns(&names);
    for c in &columns {
        if let Err(why) = &c.backend {
            println!("{} skipped: {why}", c.name);
        }
    }
    let cases = trine_conformance::suite();
    let records = trine_conformance::run_suite(&cases, &columns, |_| {});
    println!("{}", trine_conformance::matrix(&records));
    let s = Summary::of(&records);
    let failed: Vec<String> = records
        .iter()
        .filter(|r| r.status == Status::Fail)
        .map(|r| {
            format!(
                "{} on {}: {}",
                r.case,
                r.backend,
                r.reason.as_deref().unwrap_or("")
            )
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{} failures:\n{}",
        s.fail,
        failed.join("\n")
    );
    // The interpreter column always runs: a suite that compared nothing must not pass.
    assert!(s.pass >= cases.len(), "only {} records passed", s.pass);
    // Nor may a required backend that ran nothing: each must pass every case it does not
    // skip, at least one, and skip only for a capability its device lacks (the harness skips
    // a refusal only where the device's description confirms the lack, see
    // `trine_conformance::lacking`) or as a case declared known bad.
    for c in columns.iter().filter(|c| c.required) {
        let mine: Vec<_> = records.iter().filter(|r| r.backend == c.name).collect();
        let passed = mine.iter().filter(|r| r.status == Status::Pass).count();
        assert!(
            passed > 0,
            "required backend {} passed none of {} cases",
            c.name,
            cases.len()
        );
        for r in mine.iter().filter(|r| r.status == Status::Skip) {
            let why = r.reason.as_deref().unwrap_or("");
            assert!(
                why.starts_with(trine_conformance::LACKS)
                    || why.starts_with(trine_conformance::expectations::KNOWN_BAD_REASON),
                "{} skipped on required backend {} without a capability its device lacks: {why}",
                r.case,
                c.name
            );
        }
    }
}
