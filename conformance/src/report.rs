//! The conformance matrix: kernel × backend, cases passed and worst NMSE, then every failure
//! and skip with its reason.

use crate::run::{Record, Status};
use std::fmt::Write;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub pass: usize,
    pub fail: usize,
    pub skip: usize,
}

impl Summary {
    pub fn of(records: &[Record]) -> Summary {
        let mut s = Summary::default();
        for r in records {
            match r.status {
                Status::Pass => s.pass += 1,
                Status::Fail => s.fail += 1,
                Status::Skip => s.skip += 1,
            }
        }
        s
    }
}

/// The family a case belongs to: its name up to the first `/`.
fn family(case: &str) -> &str {
    case.split('/').next().unwrap_or(case)
}

fn cell(records: &[&Record]) -> String {
    let total = records.len();
    let pass = records.iter().filter(|r| r.status == Status::Pass).count();
    let fail = records.iter().filter(|r| r.status == Status::Fail).count();
    let worst = records
        .iter()
        .filter_map(|r| r.nmse)
        .fold(None, |w: Option<f64>, e| Some(w.map_or(e, |w| w.max(e))));
    let nmse = worst.map_or(String::new(), |e| format!(" {e:.1e}"));
    if fail > 0 {
        format!("FAIL {pass}/{total}{nmse}")
    } else if pass == total {
        format!("PASS {pass}/{total}{nmse}")
    } else if pass == 0 {
        "SKIP".to_string()
    } else {
        format!("PASS {pass}/{total} SKIP {}{nmse}", total - pass)
    }
}

/// Renders the matrix as a text table (also valid Markdown).
pub fn matrix(records: &[Record]) -> String {
    let mut backends: Vec<&str> = vec![];
    let mut families: Vec<&str> = vec![];
    for r in records {
        if !backends.contains(&r.backend.as_str()) {
            backends.push(&r.backend);
        }
        if !families.contains(&family(&r.case)) {
            families.push(family(&r.case));
        }
    }
    let mut rows = vec![];
    for f in &families {
        let mut row = vec![f.to_string()];
        for b in &backends {
            let rs: Vec<&Record> = records
                .iter()
                .filter(|r| family(&r.case) == *f && r.backend == *b)
                .collect();
            row.push(cell(&rs));
        }
        rows.push(row);
    }
    let header: Vec<String> = std::iter::once("kernel".to_string())
        .chain(backends.iter().map(|b| b.to_string()))
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            rows.iter()
                .map(|r| r[c].len())
                .chain([header[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &[String]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        format!("| {} |\n", padded.join(" | "))
    };
    let mut out = line(&header);
    out += &line(&widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>());
    for r in &rows {
        out += &line(r);
    }
    // Failures, skips, and passes that carry a note (a known-bad entry no longer needed).
    let notes: Vec<&Record> = records
        .iter()
        .filter(|r| r.status != Status::Pass || r.reason.is_some())
        .collect();
    if !notes.is_empty() {
        out.push('\n');
        for r in notes {
            let status = match r.status {
                Status::Fail => "FAIL",
                Status::Skip => "SKIP",
                Status::Pass => "NOTE",
            };
            let _ = writeln!(
                out,
                "{status} {} on {}: {}",
                r.case,
                r.backend,
                r.reason.as_deref().unwrap_or("")
            );
        }
    }
    let s = Summary::of(records);
    let _ = writeln!(
        out,
        "\n{} passed, {} failed, {} skipped",
        s.pass, s.fail, s.skip
    );
    out
}
