//! Global memory as the interpreter sees it: byte-addressed views over 32-bit words.
//!
//! Words are atomics so that workgroups can run on many threads at once without unsafe code;
//! a racy kernel then gets some order of its writes, as on a GPU, but never undefined
//! behaviour in the interpreter. Sub-word stores use compare-and-swap.

use std::sync::atomic::{AtomicU32, Ordering};

/// Storage for one buffer: its words and its length in bytes.
#[derive(Debug)]
pub struct Words {
    words: Vec<AtomicU32>,
    len: u64,
}

impl Words {
    /// `len` zero bytes (rounded up to whole words internally).
    pub fn zeroed(len: u64) -> Words {
        let n = len.div_ceil(4) as usize;
        Words {
            words: (0..n).map(|_| AtomicU32::new(0)).collect(),
            len,
        }
    }

    pub fn from_bytes(bytes: &[u8]) -> Words {
        let w = Words::zeroed(bytes.len() as u64);
        w.write(0, bytes);
        w
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    /// The words themselves, for a backend that hands them to compiled code (an `AtomicU32`
    /// has the layout of a `u32`).
    pub fn as_atomics(&self) -> &[AtomicU32] {
        &self.words
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies `data` in at byte `offset`; the caller has checked the range.
    pub fn write(&self, offset: u64, data: &[u8]) {
        for (i, &b) in data.iter().enumerate() {
            self.store_byte(offset + i as u64, b);
        }
    }

    /// Copies bytes out from `offset`; the caller has checked the range.
    pub fn read(&self, offset: u64, out: &mut [u8]) {
        for (i, o) in out.iter_mut().enumerate() {
            *o = self.load_byte(offset + i as u64);
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = vec![0; self.len as usize];
        self.read(0, &mut v);
        v
    }

    fn load_byte(&self, addr: u64) -> u8 {
        let w = self.words[(addr / 4) as usize].load(Ordering::Relaxed);
        (w >> ((addr % 4) * 8)) as u8
    }

    fn store_byte(&self, addr: u64, b: u8) {
        self.store_bits(addr, b as u32, 1);
    }

    /// Loads `size` (1, 2 or 4) bytes at byte address `addr`, which is aligned to `size`.
    pub(crate) fn load_bits(&self, addr: u64, size: u64) -> u32 {
        let w = self.words[(addr / 4) as usize].load(Ordering::Relaxed);
        let shift = (addr % 4) * 8;
        match size {
            4 => w,
            _ => (w >> shift) & ((1u32 << (size * 8)) - 1),
        }
    }

    /// Stores the low `size` bytes of `bits` at byte address `addr` (aligned to `size`).
    pub(crate) fn store_bits(&self, addr: u64, bits: u32, size: u64) {
        let word = &self.words[(addr / 4) as usize];
        if size == 4 {
            word.store(bits, Ordering::Relaxed);
            return;
        }
        let shift = (addr % 4) * 8;
        let mask = ((1u32 << (size * 8)) - 1) << shift;
        // The closure always returns Some, so fetch_update cannot fail.
        let _ = word.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| {
            Some((w & !mask) | ((bits << shift) & mask))
        });
    }
}

/// The part of a buffer bound to one kernel buffer slot: `len` bytes from byte `offset`.
#[derive(Clone, Copy, Debug)]
pub struct View<'a> {
    pub words: &'a Words,
    pub offset: u64,
    pub len: u64,
}

impl<'a> View<'a> {
    pub fn whole(words: &'a Words) -> View<'a> {
        View {
            words,
            offset: 0,
            len: words.len(),
        }
    }
}
