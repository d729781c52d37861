//! `cargo xtask emit --list` and `cargo xtask emit KERNEL --target hip|cuda|c|spirv|wgsl|ir
//! [-o FILE]`.

use std::process::ExitCode;
use trine_codegen::{Dialect, SpirvOptions};

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
    /// List every kernel.
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
    // Every kernel of the conformance suite: the foundation kernels, then the ops'.
    let kernels = trine_conformance::all_kernels();
    if args.list {
        for k in &kernels {
            println!("{}", k.name);
        }
        return Ok(ExitCode::SUCCESS);
    }
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
