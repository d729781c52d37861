//! What is known to go wrong with ROCm on particular chips and versions, as data, and the
//! advice `trine doctor` prints for the machine it probed.
//!
//! Three tables: arches ROCm runs only when told to treat them as a supported sibling
//! (`HSA_OVERRIDE_GFX_VERSION`), (arch, ROCm version) pairs known not to work, and a step
//! of the probe hanging on an APU. Arches not in [`OVERRIDES`] (gfx1030, gfx1100, gfx90a, …)
//! are ones ROCm supports natively and get no override advice.

use super::comgr::isa_of;
use super::loader::parse_version;

/// An arch that runs ROCm's code only as a sibling arch with the same instruction set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Override {
    pub arch: &'static str,
    /// The value for `HSA_OVERRIDE_GFX_VERSION` (the sibling's `major.minor.stepping`).
    pub gfx_version: &'static str,
    pub why: &'static str,
}

pub const OVERRIDES: &[Override] = &[
    Override {
        arch: "gfx1103",
        gfx_version: "11.0.0",
        why: "Phoenix / Hawk Point iGPU (Radeon 740M-780M): ROCm's libraries (rocBLAS) carry no \
              gfx1103 code, even in 7.x; it runs gfx1100 code",
    },
    Override {
        arch: "gfx1012",
        gfx_version: "10.3.0",
        why: "Navi 14 (RDNA1) is not supported by ROCm; it runs gfx1030 code",
    },
    Override {
        arch: "gfx1013",
        gfx_version: "10.3.0",
        why: "Cyan Skillfish (BC-250) is not supported by ROCm; it runs gfx1030 code",
    },
    Override {
        arch: "gfx90c",
        gfx_version: "9.0.0",
        why: "Renoir / Cezanne / Lucienne iGPU (Vega) is not supported by ROCm; it runs gfx900 \
              code",
    },
    Override {
        arch: "gfx1031",
        gfx_version: "10.3.0",
        why: "Navi 22 is not in ROCm's support list; its ISA is gfx1030's",
    },
    Override {
        arch: "gfx1032",
        gfx_version: "10.3.0",
        why: "Navi 23 is not in ROCm's support list; its ISA is gfx1030's",
    },
    Override {
        arch: "gfx1034",
        gfx_version: "10.3.0",
        why: "Navi 24 is not in ROCm's support list; its ISA is gfx1030's",
    },
    Override {
        arch: "gfx1035",
        gfx_version: "10.3.0",
        why: "Rembrandt iGPU (Radeon 660M/680M) is not in ROCm's support list; its ISA is \
              gfx1030's",
    },
    Override {
        arch: "gfx1036",
        gfx_version: "10.3.0",
        why: "Raphael / Granite Ridge iGPU is not in ROCm's support list; its ISA is gfx1030's",
    },
];

/// Arches that do not work with a range of ROCm versions (inclusive, `major.minor`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KnownBad {
    pub arches: &'static [&'static str],
    pub first: (u32, u32),
    pub last: (u32, u32),
    pub why: &'static str,
}

pub const KNOWN_BAD: &[KnownBad] = &[KnownBad {
    arches: &[
        "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx940",
    ],
    first: (5, 0),
    last: (5, 2),
    why: "its compiler does not know this ISA and hiprtc aborts the whole process \
          (munmap_chunk(): invalid pointer; seen with Debian 12's HIP 5.2.3); trine compiles \
          in a child process and reports it, but nothing will run: use a newer ROCm or the \
          Vulkan backend",
}];

/// Probe steps that move data to the device; a hang there on an APU is the SDMA engine.
const UPLOAD_STEPS: [&str; 3] = ["upload", "copy", "write"];

/// The advice that applies to a device of `arch` (features such as `:xnack-` are ignored)
/// under ROCm `runtime_version` (`6.3.42134`), integrated or not, whose probe hung at
/// `hung_step` (if it hung). Empty when nothing applies.
pub fn advice(
    arch: Option<&str>,
    runtime_version: Option<&str>,
    integrated: bool,
    hung_step: Option<&str>,
) -> Vec<String> {
    let mut out = vec![];
    let isa = arch.map(isa_of);
    let version = runtime_version
        .and_then(parse_version)
        .map(|(major, minor, _)| (major, minor));
    if let Some(o) = isa.and_then(|a| OVERRIDES.iter().find(|o| o.arch == a)) {
        out.push(format!(
            "{}: set HSA_OVERRIDE_GFX_VERSION={} ({})",
            o.arch, o.gfx_version, o.why
        ));
    }
    if let (Some(a), Some(v)) = (isa, version) {
        for bad in KNOWN_BAD {
            if bad.arches.contains(&a) && (bad.first..=bad.last).contains(&v) {
                out.push(format!("{a} with ROCm {}.{}: {}", v.0, v.1, bad.why));
            }
        }
    }
    if let Some(step) = hung_step {
        let lower = step.to_ascii_lowercase();
        if integrated && UPLOAD_STEPS.iter().any(|s| lower.contains(s)) {
            out.push(format!(
                "ROCm hung at {step:?} on an APU: try HSA_ENABLE_SDMA=0 (copies then go \
                 through shader kernels instead of the SDMA engine, which hangs on several \
                 APUs)"
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_for_the_chips_that_need_them() {
        let one = |arch: &str| advice(Some(arch), Some("6.3.42134"), true, None);
        for (arch, value) in [
            ("gfx1103", "11.0.0"),
            ("gfx1012", "10.3.0"),
            ("gfx1013", "10.3.0"),
            ("gfx90c", "9.0.0"),
            ("gfx90c:xnack-", "9.0.0"),
        ] {
            let a = one(arch);
            assert_eq!(a.len(), 1, "{arch}: {a:?}");
            assert!(
                a[0].contains(&format!("HSA_OVERRIDE_GFX_VERSION={value}")),
                "{arch}: {a:?}"
            );
        }
    }

    #[test]
    fn nothing_for_natively_supported_arches() {
        for arch in [
            "gfx1030",
            "gfx1100",
            "gfx90a:sramecc+:xnack-",
            "gfx942",
            "gfx1151",
        ] {
            assert_eq!(
                advice(Some(arch), Some("6.3.42134"), false, None),
                Vec::<String>::new(),
                "{arch}"
            );
        }
        assert!(advice(None, None, false, None).is_empty());
    }

    #[test]
    fn known_bad_pairs_depend_on_the_version() {
        let old = advice(Some("gfx1100"), Some("5.2.21153"), false, None);
        assert_eq!(old.len(), 1, "{old:?}");
        assert!(old[0].starts_with("gfx1100 with ROCm 5.2:"), "{old:?}");
        assert!(advice(Some("gfx1100"), Some("6.0.32830"), false, None).is_empty());
        assert!(advice(Some("gfx1100"), None, false, None).is_empty());
        // An override and a known-bad pair both apply to gfx1103 on 5.2.
        assert_eq!(advice(Some("gfx1103"), Some("5.2.3"), true, None).len(), 2);
    }

    #[test]
    fn sdma_advice_only_for_an_upload_hang_on_an_apu() {
        let apu = advice(None, None, true, Some("async upload"));
        assert_eq!(apu.len(), 1);
        assert!(apu[0].contains("HSA_ENABLE_SDMA=0"), "{apu:?}");
        assert!(advice(None, None, false, Some("upload")).is_empty());
        assert!(advice(None, None, true, Some("launch")).is_empty());
        assert!(advice(None, None, true, None).is_empty());
    }

    #[test]
    fn tables_are_consistent() {
        for (i, o) in OVERRIDES.iter().enumerate() {
            assert!(o.arch.starts_with("gfx"), "{o:?}");
            assert!(parse_version(o.gfx_version).is_some(), "{o:?}");
            assert!(
                OVERRIDES[..i].iter().all(|p| p.arch != o.arch),
                "{} listed twice",
                o.arch
            );
        }
        for b in KNOWN_BAD {
            assert!(b.first <= b.last, "{b:?}");
        }
    }
}
