//! What the GGUF reader allocates for a file's metadata stays within a small multiple of the
//! file's size, however large the counts it declares: a file is untrusted input, and parsing
//! one must not be a way to make the process allocate gigabytes.
//!
//! A counting global allocator (this test binary's own) measures the peak of live bytes
//! while [`Gguf::from_bytes`] runs, on top of what was live before the call.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use trine_gguf::{Gguf, GgufError};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; the counters only observe.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::SeqCst) + layout.size();
        PEAK.fetch_max(live, Ordering::SeqCst);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    // Forwarded rather than left to the default (a new block, a copy, a free), so that a
    // growing vector is measured as the system allocator grows it: large blocks in place.
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size >= layout.size() {
            let live = LIVE.fetch_add(new_size - layout.size(), Ordering::SeqCst) + new_size
                - layout.size();
            PEAK.fetch_max(live, Ordering::SeqCst);
        } else {
            LIVE.fetch_sub(layout.size() - new_size, Ordering::SeqCst);
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The tests share the counters: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// GGUF's type codes of arrays and of u8 and bool elements.
const ARRAY: u32 = 9;
const U8: u32 = 0;
const BOOL: u32 = 7;

/// A v3 file with no tensors and one metadata entry: an array of `n` elements of type `elem`,
/// each encoded as the one byte 7.
fn array_file(elem: u32, n: usize) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend(0u64.to_le_bytes()); // tensors
    out.extend(1u64.to_le_bytes()); // metadata entries
    out.extend(1u64.to_le_bytes());
    out.push(b'a');
    out.extend(ARRAY.to_le_bytes());
    out.extend(elem.to_le_bytes());
    out.extend((n as u64).to_le_bytes());
    out.resize(out.len() + n, 7);
    out
}

/// Parses `bytes`, returning the result and the peak of bytes allocated meanwhile.
fn parse_measured(bytes: Vec<u8>) -> (Result<Gguf, GgufError>, usize) {
    let before = LIVE.load(Ordering::SeqCst);
    PEAK.store(before, Ordering::SeqCst);
    let g = Gguf::from_bytes(bytes);
    (g, PEAK.load(Ordering::SeqCst) - before)
}

/// 4 MiB of u8 elements: each would decode to a 32-byte `Value`, 128 MiB for a 4 MiB file.
const N: usize = 4 << 20;

#[test]
fn an_array_that_fails_at_its_first_element_allocates_no_more_than_the_file() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // The count is as large as the bytes that remain allow, but 7 is no bool: parsing stops
    // at the first element. The input vector is allocated here, before the measurement.
    let bytes = array_file(BOOL, N);
    let len = bytes.len();
    let (g, peak) = parse_measured(bytes);
    assert!(
        matches!(g, Err(GgufError::InvalidBool { byte: 7, .. })),
        "expected InvalidBool"
    );
    assert!(peak <= 2 * len, "peak {peak} bytes for a {len}-byte file");
}

#[test]
fn metadata_that_would_decode_far_beyond_the_file_is_a_typed_error() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bytes = array_file(U8, N);
    let len = bytes.len();
    let (g, peak) = parse_measured(bytes);
    match g {
        Err(GgufError::MetadataTooLarge {
            limit, file_len, ..
        }) => {
            assert_eq!(file_len, len as u64);
            assert!(limit < 32 * len as u64, "limit {limit}");
        }
        Err(e) => panic!("expected MetadataTooLarge, got {e}"),
        Ok(_) => panic!("expected MetadataTooLarge, the file parsed"),
    }
    assert!(peak <= 16 * len, "peak {peak} bytes for a {len}-byte file");
}

#[test]
fn small_arrays_in_small_files_still_parse() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let g = Gguf::from_bytes(array_file(U8, 1000)).unwrap();
    assert_eq!(g.get_array("a").unwrap().len(), 1000);
}
