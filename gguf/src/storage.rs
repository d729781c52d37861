//! The bytes of a GGUF file: a read-only memory map of the file, or a buffer the caller owns.

use super::error::GgufError;
use memmap2::Mmap;
use std::path::Path;

pub(crate) enum Storage {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl Storage {
    pub(crate) fn map(path: &Path) -> Result<Storage, GgufError> {
        let io = |source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        if file.metadata().map_err(io)?.len() == 0 {
            // Mapping zero bytes fails on some systems; an empty file is just too short.
            return Ok(Storage::Owned(Vec::new()));
        }
        // SAFETY: the map is read-only and lives as long as the `Gguf` that owns it. If another
        // process truncates or rewrites the file while it is mapped, reads may fault or see new
        // bytes; that is the standing contract of reading model files through mmap (llama.cpp
        // does the same), and trine never writes a file it has mapped.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        Ok(Storage::Mapped(map))
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mapped(m) => m,
            Storage::Owned(v) => v,
        }
    }
}
