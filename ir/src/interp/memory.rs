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

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies `data` in at byte `offset`; the caller has checked the range. Whole words go in
    /// one store each (a model's weights are hundreds of megabytes); only the bytes before the
    /// first word boundary and after the last take the sub-word path.
    pub fn write(&self, offset: u64, data: &[u8]) {
        let head = (offset.next_multiple_of(4) - offset).min(data.len() as u64) as usize;
        let (first, rest) = data.split_at(head);
        for (i, &b) in first.iter().enumerate() {
            self.store_byte(offset + i as u64, b);
        }
        let at = offset + head as u64;
        let words = rest.chunks_exact(4);
        let tail = words.remainder();
        let start = (at / 4) as usize;
        for (w, chunk) in self.words[start..].iter().zip(words) {
            w.store(
                u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]),
                Ordering::Relaxed,
            );
        }
        let tail_at = at + (rest.len() - tail.len()) as u64;
        for (i, &b) in tail.iter().enumerate() {
            self.store_byte(tail_at + i as u64, b);
        }
    }

    /// Copies bytes out from `offset`; the caller has checked the range. Whole words as for
    /// [`Words::write`].
    pub fn read(&self, offset: u64, out: &mut [u8]) {
        let head = (offset.next_multiple_of(4) - offset).min(out.len() as u64) as usize;
        let (first, rest) = out.split_at_mut(head);
        for (i, o) in first.iter_mut().enumerate() {
            *o = self.load_byte(offset + i as u64);
        }
        let at = offset + head as u64;
        let whole = rest.len() - rest.len() % 4;
        let (body, tail) = rest.split_at_mut(whole);
        let start = (at / 4) as usize;
        for (w, chunk) in self.words[start..].iter().zip(body.chunks_exact_mut(4)) {
            chunk.copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
        }
        let tail_at = at + whole as u64;
        for (i, o) in tail.iter_mut().enumerate() {
            *o = self.load_byte(tail_at + i as u64);
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

#[cfg(test)]
mod tests {
    use super::Words;

    /// Every offset and length around the word boundaries, against a plain byte array: the
    /// whole-word path and the sub-word edges together write exactly the bytes asked, and
    /// read them back.
    #[test]
    fn write_and_read_match_a_byte_array() {
        for offset in 0..9u64 {
            for len in 0..14usize {
                let words = Words::from_bytes(&[0xee; 27]);
                let mut model = vec![0xeeu8; 27];
                let data: Vec<u8> = (0..len as u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
                words.write(offset, &data);
                model[offset as usize..offset as usize + len].copy_from_slice(&data);
                assert_eq!(words.to_bytes(), model, "offset {offset}, length {len}");
                let mut back = vec![0; len];
                words.read(offset, &mut back);
                assert_eq!(back, data, "offset {offset}, length {len}");
            }
        }
    }
}
