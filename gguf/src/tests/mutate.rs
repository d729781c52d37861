//! Random damage to a valid file: the reader must answer Ok or Err, never panic, and a file it
//! accepts must be usable throughout.

use super::small_file;
use crate::Gguf;
use proptest::prelude::*;

/// Opens `bytes` and, when that succeeds, reads every tensor and metadata value.
fn open_and_touch(bytes: Vec<u8>) {
    if let Ok(g) = Gguf::from_bytes(bytes) {
        for t in g.tensors() {
            assert_eq!(g.tensor_data(t).len() as u64, t.n_bytes);
        }
        for (k, v) in g.metadata() {
            let _ = (k.len(), v.to_string());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_byte_changes_never_panic(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
    ) {
        let mut bytes = small_file();
        for (at, byte) in edits {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        open_and_touch(bytes);
    }

    #[test]
    fn random_length_fields_never_panic(
        at in any::<prop::sample::Index>(),
        value in prop_oneof![any::<u64>(), 0u64..4096, Just(u64::MAX), (0u32..64).prop_map(|s| 1u64 << s)],
    ) {
        // Overwrites 8 bytes anywhere with a count-like value, as a hostile length would be.
        let mut bytes = small_file();
        let i = at.index(bytes.len() - 8);
        bytes[i..i + 8].copy_from_slice(&value.to_le_bytes());
        open_and_touch(bytes);
    }

    #[test]
    fn splices_never_panic(
        at in any::<prop::sample::Index>(),
        cut in 0usize..64,
        insert in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut bytes = small_file();
        let i = at.index(bytes.len());
        let end = (i + cut).min(bytes.len());
        bytes.splice(i..end, insert);
        open_and_touch(bytes);
    }
}
