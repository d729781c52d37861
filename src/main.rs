//! The `trine` command.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "trine",
    version,
    about = "Kernels written once, run on Vulkan, HIP, CUDA and the CPU"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Probe every backend and print its status and device information.
    Doctor {
        /// Print JSON for tools.
        #[arg(long)]
        json: bool,
    },
}

fn main() {
    let cli = Cli::parse();
    match cli.command {
        Command::Doctor { json } => {
            let reports = trine::doctor::diagnose();
            if json {
                let v = trine::doctor::to_json(&reports);
                println!(
                    "{}",
                    serde_json::to_string_pretty(&v).unwrap_or_else(|e| e.to_string())
                );
            } else {
                print!("{}", trine::doctor::to_text(&reports));
            }
        }
    }
}
