//! `cargo xtask emit --list` and `cargo xtask emit KERNEL --target hip|cuda|c|spirv|wgsl|ir
//! [-o FILE]`.

use std::collections::HashSet;
use std::fmt::Write;
use std::process::ExitCode;
use trine_codegen::{Dialect, SpirvOptions};
use trine_ir::{Access, Kernel};
use trine_ops::Family;

#[derive(Clone, Copy, clap::ValueEnum)]
enum Target {
    Ir,
    Hip,
    Cuda,
    /// C for the CPU backend, for its subgroup width.
    C,
    Spirv,
    Wgsl,
}

#[derive(clap::Args)]
pub struct Args {
    /// List every kernel, grouped by family, each with its buffers, parameters and needs.
    #[arg(long)]
    list: bool,
    /// The kernel to emit.
    kernel: Option<String>,
    #[arg(long, value_enum, default_value = "ir")]
    target: Target,
    /// Write here instead of standard output (SPIR-V is a binary module).
    #[arg(short, long)]
    output: Option<std::path::PathBuf>,
}

pub fn run(args: Args) -> Result<ExitCode, String> {
    if args.list {
        print!("{}", listing());
        return Ok(ExitCode::SUCCESS);
    }
    // Every kernel of the conformance suite: the foundation kernels, then the ops'.
    let kernels = trine_conformance::all_kernels();
    let name = args.kernel.ok_or("name a kernel, or pass --list")?;
    let kernel = kernels
        .iter()
        .find(|k| k.name == name)
        .ok_or_else(|| format!("no kernel named {name:?} (see --list)"))?;
    let bytes: Vec<u8> = match args.target {
        Target::Ir => trine_ir::print(kernel).into_bytes(),
        Target::Hip => trine_codegen::hip(kernel, Dialect::Hip)
            .map_err(|e| e.to_string())?
            .into_bytes(),
        Target::Cuda => trine_codegen::hip(kernel, Dialect::Cuda)
            .map_err(|e| e.to_string())?
            .into_bytes(),
        Target::C => trine_codegen::c(
            kernel,
            &trine_codegen::COptions::new(trine_backends::cpu::CPU_SUBGROUP_SIZE),
        )
        .map_err(|e| e.to_string())?
        .into_bytes(),
        Target::Wgsl => trine_codegen::wgsl(kernel)
            .map_err(|e| e.to_string())?
            .into_bytes(),
        Target::Spirv => {
            let out = trine_codegen::spirv(kernel, &SpirvOptions::default())
                .map_err(|e| e.to_string())?;
            out.words.iter().flat_map(|w| w.to_le_bytes()).collect()
        }
    };
    match args.output {
        Some(path) => {
            std::fs::write(&path, &bytes).map_err(|e| format!("writing {}: {e}", path.display()))?
        }
        None if matches!(args.target, Target::Spirv) => {
            return Err("SPIR-V is binary: write it to a file with -o".into())
        }
        None => print!("{}", String::from_utf8_lossy(&bytes)),
    }
    Ok(ExitCode::SUCCESS)
}

/// The two halves of the suite, in its order: the foundation kernels exercise the IR, the op
/// library is what the executor runs.
fn sections() -> [(&'static str, &'static [Family]); 2] {
    [
        (
            "Foundation kernels (each exercises a part of the IR)",
            &trine_ops::kernels::FAMILIES,
        ),
        (
            "Op library (what the Llama executor runs)",
            &trine_ops::FAMILIES,
        ),
    ]
}

/// A section of `--list`: its title, and each family with the kernels listed under it.
type Section = (&'static str, Vec<(&'static Family, Vec<Kernel>)>);

/// The kernels of `--list`: per section and family, each distinct kernel under the first family
/// whose cases use it (a variant or a fallback included), as [`trine_conformance::all_kernels`]
/// finds them.
fn grouped() -> Vec<Section> {
    let mut seen = HashSet::new();
    sections()
        .into_iter()
        .map(|(title, families)| {
            let families = families
                .iter()
                .map(|f| {
                    let kernels = (f.cases)()
                        .into_iter()
                        .flat_map(|c| std::iter::once(c.kernel).chain(c.fallback))
                        .filter(|k| seen.insert(k.name.clone()))
                        .collect();
                    (f, kernels)
                })
                .collect();
            (title, families)
        })
        .collect()
}

/// Every kernel, one line each, under its family's one-line description.
fn listing() -> String {
    let mut out = String::new();
    for (title, families) in grouped() {
        let _ = writeln!(out, "{title}\n");
        for (family, kernels) in families {
            let _ = writeln!(out, "{}: {}", family.name, family.about);
            let width = kernels.iter().map(|k| k.name.len()).max().unwrap_or(0);
            for k in &kernels {
                let _ = writeln!(out, "  {:<width$}  {}", k.name, signature(k));
            }
            out.push('\n');
        }
    }
    out
}

/// What a kernel's declarations say about it, in one line: the buffers it reads and writes
/// with their element types, its parameters, its workgroup and the capabilities it needs.
fn signature(k: &Kernel) -> String {
    let buffers = |pick: fn(Access) -> bool| {
        k.buffers
            .iter()
            .filter(|b| pick(b.access))
            .map(|b| format!("{}:{}", b.name, b.elem))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut parts = vec![];
    for (what, list) in [
        ("in", buffers(|a| a == Access::Read)),
        ("out", buffers(|a| a != Access::Read)),
    ] {
        if !list.is_empty() {
            parts.push(format!("{what} {list}"));
        }
    }
    if !k.params.is_empty() {
        let params: Vec<String> = k
            .params
            .iter()
            .map(|p| format!("{}:{}", p.name, p.ty))
            .collect();
        parts.push(format!("params {}", params.join(" ")));
    }
    let [x, y, z] = k.workgroup_size;
    parts.push(match (y, z) {
        (1, 1) => format!("workgroup {x}"),
        (_, 1) => format!("workgroup {x}×{y}"),
        _ => format!("workgroup {x}×{y}×{z}"),
    });
    let c = &k.capabilities;
    let needs: Vec<String> = [
        (c.subgroup, "subgroups".to_string()),
        (c.tiles, "matrix tiles".to_string()),
        (c.async_copy, "async copies".to_string()),
        (c.group_mma, "warpgroup products".to_string()),
    ]
    .into_iter()
    .filter_map(|(on, what)| on.then_some(what))
    .chain(c.subgroup_width.map(|w| format!("subgroup width {w}")))
    .collect();
    if !needs.is_empty() {
        parts.push(format!("needs {}", needs.join(", ")));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--list` and `emit NAME` agree: every listed kernel can be emitted, and none is
    /// left out of the listing.
    #[test]
    fn the_listing_covers_every_kernel_once() {
        let listed: Vec<String> = grouped()
            .into_iter()
            .flat_map(|(_, families)| families)
            .flat_map(|(_, kernels)| kernels)
            .map(|k| k.name)
            .collect();
        let all: Vec<String> = trine_conformance::all_kernels()
            .into_iter()
            .map(|k| k.name)
            .collect();
        assert_eq!(listed, all);
    }
}
