//! The on-disk cache of compiled code (HIP code objects, CUDA cubins), so that a second start
//! finds every kernel already compiled.
//!
//! Entries live at `<cache_dir>/<ns>/<key>`. The caller puts everything that changes the bytes
//! into the key (kernel hash, target architecture, compiler version). A store writes a
//! temporary file and renames it into place, so a reader never sees half an entry, and two
//! processes storing the same key both leave a complete one. The cache is an optimisation:
//! every failure to read it is a miss, and a failure to write it is only reported.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use thiserror::Error;

/// Overrides the cache directory.
pub const CACHE_DIR_ENV: &str = "TRINE_CACHE_DIR";

/// `$TRINE_CACHE_DIR`, else `$XDG_CACHE_HOME/trine`, else `$HOME/.cache/trine`; `None` when
/// none of them is set to an absolute path.
pub fn cache_dir() -> Option<PathBuf> {
    let var = |name| std::env::var_os(name).map(PathBuf::from);
    cache_dir_from(var(CACHE_DIR_ENV), var("XDG_CACHE_HOME"), var("HOME"))
}

/// [`cache_dir`] from the three variables' values. Empty or relative values count as unset:
/// the XDG base directory specification says to ignore a relative `XDG_CACHE_HOME`, and a
/// relative path would name a different directory in every working directory.
fn cache_dir_from(
    trine: Option<PathBuf>,
    xdg: Option<PathBuf>,
    home: Option<PathBuf>,
) -> Option<PathBuf> {
    let absolute = |p: Option<PathBuf>| p.filter(|p| p.is_absolute());
    absolute(trine)
        .or_else(|| absolute(xdg).map(|x| x.join("trine")))
        .or_else(|| absolute(home).map(|h| h.join(".cache").join("trine")))
}

/// Why the cache cannot keep what is compiled: every run then compiles its kernels again.
#[derive(Debug, Error)]
pub enum Unusable {
    #[error(
        "there is no cache directory (none of {CACHE_DIR_ENV}, XDG_CACHE_HOME and HOME is an \
         absolute path)"
    )]
    NoDirectory,
    #[error("the cache directory {} cannot be written: {source}", .dir.display())]
    NotWritable { dir: PathBuf, source: io::Error },
}

impl Unusable {
    /// What a user does about it.
    pub const ADVICE: &'static str = "set TRINE_CACHE_DIR to a writable directory";
}

/// [`cache_dir`], after checking that a file can be written there (creating the directory
/// where it is missing): the cache fails silently by design, so this is what says so.
pub fn writable_dir() -> Result<PathBuf, Unusable> {
    let dir = cache_dir().ok_or(Unusable::NoDirectory)?;
    check_writable(&dir).map_err(|source| Unusable::NotWritable {
        dir: dir.clone(),
        source,
    })?;
    Ok(dir)
}

fn check_writable(dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let probe = dir.join(format!(
        ".writable.{}.{}.tmp",
        std::process::id(),
        SERIAL.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::File::create(&probe)?;
    std::fs::remove_file(&probe)
}

/// Unique per process and per use, so concurrent writers never share a temporary file.
static SERIAL: AtomicU64 = AtomicU64::new(0);

/// The bytes stored under `key` in namespace `ns`, if there are any.
pub fn load(ns: &str, key: &str) -> Option<Vec<u8>> {
    load_in(&cache_dir()?, ns, key)
}

/// Stores `bytes` under `key` in namespace `ns`, replacing what was there.
///
/// Errors: no cache directory, a namespace or key that is not a plain file name
/// (`[A-Za-z0-9._-]`, not starting with a dot), or the file system's error.
pub fn store(ns: &str, key: &str, bytes: &[u8]) -> io::Result<()> {
    let dir = cache_dir().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("no cache directory: set {CACHE_DIR_ENV}, XDG_CACHE_HOME or HOME"),
        )
    })?;
    store_in(&dir, ns, key, bytes)
}

fn load_in(dir: &Path, ns: &str, key: &str) -> Option<Vec<u8>> {
    let path = entry(dir, ns, key).ok()?;
    std::fs::read(path).ok()
}

fn store_in(dir: &Path, ns: &str, key: &str, bytes: &[u8]) -> io::Result<()> {
    let path = entry(dir, ns, key)?;
    let parent = dir.join(ns);
    std::fs::create_dir_all(&parent)?;
    let tmp = parent.join(format!(
        ".{key}.{}.{}.tmp",
        std::process::id(),
        SERIAL.fetch_add(1, Ordering::Relaxed)
    ));
    let written = std::fs::File::create(&tmp).and_then(|mut f| {
        f.write_all(bytes)?;
        f.sync_all()
    });
    match written.and_then(|()| std::fs::rename(&tmp, &path)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// The path of an entry, after checking that `ns` and `key` cannot leave the cache directory
/// or collide with temporary files.
fn entry(dir: &Path, ns: &str, key: &str) -> io::Result<PathBuf> {
    for (what, name) in [("namespace", ns), ("key", key)] {
        let plain = !name.is_empty()
            && !name.starts_with('.')
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if !plain {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cache {what} {name:?} is not a plain file name ([A-Za-z0-9._-])"),
            ));
        }
    }
    Ok(dir.join(ns).join(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("trine-cache-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn precedence_of_the_variables() {
        let p = |s: &str| Some(PathBuf::from(s));
        assert_eq!(
            cache_dir_from(p("/t"), p("/x"), p("/h")),
            Some(PathBuf::from("/t"))
        );
        assert_eq!(
            cache_dir_from(None, p("/x"), p("/h")),
            Some(PathBuf::from("/x/trine"))
        );
        assert_eq!(
            cache_dir_from(p(""), p("rel"), p("/h")),
            Some(PathBuf::from("/h/.cache/trine"))
        );
        assert_eq!(cache_dir_from(None, None, None), None);
    }

    #[test]
    fn store_then_load_round_trips_and_replaces() {
        let dir = scratch("roundtrip");
        assert_eq!(load_in(&dir, "hip", "k1"), None);
        store_in(&dir, "hip", "k1", b"first").unwrap();
        store_in(&dir, "hip", "k1", b"second").unwrap();
        assert_eq!(load_in(&dir, "hip", "k1").as_deref(), Some(&b"second"[..]));
        // Only the entry remains: every temporary file was renamed away.
        let names: Vec<_> = std::fs::read_dir(dir.join("hip"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["k1"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_directory_that_cannot_be_made_is_unwritable_and_says_why() {
        let dir = scratch("unwritable");
        std::fs::create_dir_all(&dir).unwrap();
        // A path under a plain file: no one can create it, not even root.
        let file = dir.join("file");
        std::fs::write(&file, b"").unwrap();
        let e = check_writable(&file.join("trine")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotADirectory, "{e}");
        check_writable(&dir.join("fresh")).unwrap();
        assert_eq!(std::fs::read_dir(dir.join("fresh")).unwrap().count(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn names_that_could_escape_are_refused() {
        let dir = scratch("escape");
        for (ns, key) in [
            ("hip", "../x"),
            ("..", "k"),
            ("hip", ".hidden"),
            ("hip", ""),
        ] {
            let e = store_in(&dir, ns, key, b"x").unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{ns}/{key}");
            assert_eq!(load_in(&dir, ns, key), None);
        }
        assert!(!dir.exists());
    }
}
