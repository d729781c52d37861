//! `XDG_RUNTIME_DIR` for headless runs.
//!
//! Mesa's Vulkan drivers (lavapipe among them) set up their Wayland window-system support while
//! the loader enumerates devices, and libwayland prints "error: XDG_RUNTIME_DIR is invalid or
//! not set in the environment" when the variable is missing: on a server, in CI or over ssh,
//! every command that opens Vulkan would print it although no window is ever made. Pointing the
//! variable at a private directory silences it and changes nothing else trine does.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::PathBuf;

const VAR: &str = "XDG_RUNTIME_DIR";

/// Sets `XDG_RUNTIME_DIR` to a directory of this user's, mode 0700 as the XDG specification
/// asks, under the temporary directory, when it is unset. Returns the directory it set, or
/// `None` when the variable was already set or no private directory could be made (then the
/// driver's warning is all that is lost).
///
/// Call it first thing in `main`, before any thread starts: changing the environment while
/// another thread reads it is undefined behaviour in C libraries (hence `set_var`'s warning),
/// and the Vulkan loader reads it from whichever thread opens a backend.
pub fn ensure_runtime_dir() -> Option<PathBuf> {
    if std::env::var_os(VAR).is_some() {
        return None;
    }
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let dir = std::env::temp_dir().join(format!("trine-runtime-{uid}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(_) => return None,
    }
    // Someone else's directory of that name, or one others can read, is not private: leave
    // the variable unset rather than point a runtime directory at it.
    let meta = std::fs::symlink_metadata(&dir).ok()?;
    if !meta.is_dir() || meta.uid() != uid || meta.permissions().mode() & 0o077 != 0 {
        return None;
    }
    std::env::set_var(VAR, &dir);
    Some(dir)
}
