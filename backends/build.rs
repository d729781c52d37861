//! `cfg(trine_wgpu)`: the wgpu backend is built, by the `wgpu` feature or because the target is
//! macOS or Windows, where wgpu is the portable path and always a dependency.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(trine_wgpu)");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if std::env::var_os("CARGO_FEATURE_WGPU").is_some() || os == "macos" || os == "windows" {
        println!("cargo::rustc-cfg=trine_wgpu");
    }
}
