//! Arrays set aside in unlinked temporary files while a step of the analysis does not need them.
//!
//! Peak memory is what bounds the analysis of a big dump, and a per-object array of a 20-million
//! object dump is 80 MB: each step keeps in RAM only the arrays it works on and writes the others
//! here, with plain write() and read() through the page cache (which a process's resident set does
//! not count), to be read back whole, streamed in order, or read one element at a time. The files
//! live in the temporary directory (`TMPDIR`) and are unlinked as soon as they are created, so
//! nothing is left behind when the process ends, however it ends.

use crate::error::{Error, Result};
use std::fs::File;
use std::io::Write;
use std::marker::PhantomData;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::atomic::{AtomicU64, Ordering};

/// A fixed-size little-endian value that an array of can be spilled.
pub trait Word: Copy + Default {
    const SIZE: usize;
    fn write(self, out: &mut Vec<u8>);
    fn read(bytes: &[u8]) -> Self;
}

macro_rules! word {
    ($t:ty) => {
        impl Word for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn write(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn read(bytes: &[u8]) -> Self {
                <$t>::from_le_bytes(bytes.try_into().expect("word size"))
            }
        }
    };
}
word!(u16);
word!(u32);
word!(u64);

/// The error of a failed temporary file, naming its directory.
fn failed(e: std::io::Error) -> Error {
    Error::Spill {
        dir: std::env::temp_dir(),
        source: e,
    }
}

/// Bytes moved per read() or write().
const CHUNK: usize = 1 << 20;

/// A new temporary file, already unlinked.
fn temp_file() -> Result<File> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir();
    loop {
        let path = dir.join(format!(
            "jvmprof-heap-{}-{}.tmp",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        // 0600: another user who opened it before the unlink would read the heap's contents.
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(f) => {
                std::fs::remove_file(&path).map_err(failed)?;
                return Ok(f);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(failed(e)),
        }
    }
}

/// An array of `T` in a temporary file.
pub struct Spill<T: Word> {
    file: File,
    len: usize,
    _t: PhantomData<T>,
}

/// Appends values to a new [`Spill`].
pub struct SpillWriter<T: Word> {
    file: File,
    buf: Vec<u8>,
    len: usize,
    _t: PhantomData<T>,
}

impl<T: Word> SpillWriter<T> {
    pub fn new() -> Result<SpillWriter<T>> {
        Ok(SpillWriter {
            file: temp_file()?,
            buf: Vec::with_capacity(CHUNK),
            len: 0,
            _t: PhantomData,
        })
    }

    pub fn push(&mut self, v: T) -> Result<()> {
        v.write(&mut self.buf);
        self.len += 1;
        if self.buf.len() >= CHUNK {
            self.file.write_all(&self.buf).map_err(failed)?;
            self.buf.clear();
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn finish(mut self) -> Result<Spill<T>> {
        self.file.write_all(&self.buf).map_err(failed)?;
        Ok(Spill {
            file: self.file,
            len: self.len,
            _t: PhantomData,
        })
    }
}

impl<T: Word> Spill<T> {
    /// Writes `values` to a new temporary file.
    pub fn from_slice(values: &[T]) -> Result<Spill<T>> {
        let mut w = SpillWriter::new()?;
        for &v in values {
            w.push(v)?;
        }
        w.finish()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The whole array, in a vector of exactly its length.
    pub fn load(&self) -> Result<Vec<T>> {
        self.load_as(|v| v)
    }

    /// The whole array with each value converted, in a vector of exactly its length.
    pub fn load_as<U>(&self, convert: impl Fn(T) -> U) -> Result<Vec<U>> {
        let mut out = Vec::with_capacity(self.len);
        let mut r = self.reader();
        for _ in 0..self.len {
            out.push(convert(r.next_value()?));
        }
        Ok(out)
    }

    /// Element `i`, read on its own.
    pub fn get(&self, i: usize) -> Result<T> {
        let mut b = [0u8; 8];
        let b = &mut b[..T::SIZE];
        if i >= self.len {
            return Err(failed(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("element {i} of a spilled array of {}", self.len),
            )));
        }
        self.file
            .read_exact_at(b, (i * T::SIZE) as u64)
            .map_err(failed)?;
        Ok(T::read(b))
    }

    /// Reads the elements in order, from the first.
    pub fn reader(&self) -> SpillReader<'_, T> {
        SpillReader {
            spill: self,
            buf: Vec::new(),
            at: 0,
            next: 0,
        }
    }
}

/// Reads a [`Spill`] in order.
pub struct SpillReader<'s, T: Word> {
    spill: &'s Spill<T>,
    buf: Vec<u8>,
    /// Read position in `buf`.
    at: usize,
    /// Index of the element after the buffer's last.
    next: usize,
}

impl<T: Word> SpillReader<'_, T> {
    /// The next element; an error past the end.
    pub fn next_value(&mut self) -> Result<T> {
        if self.at == self.buf.len() {
            let n = (CHUNK / T::SIZE).min(self.spill.len - self.next);
            if n == 0 {
                return Err(failed(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "read past the end of a spilled array",
                )));
            }
            self.buf.resize(n * T::SIZE, 0);
            self.spill
                .file
                .read_exact_at(&mut self.buf, (self.next * T::SIZE) as u64)
                .map_err(failed)?;
            self.next += n;
            self.at = 0;
        }
        let v = T::read(&self.buf[self.at..self.at + T::SIZE]);
        self.at += T::SIZE;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_come_back_whole_in_order_and_one_at_a_time() {
        let values: Vec<u32> = (0..700_000u32)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        let s = Spill::from_slice(&values).unwrap();
        assert_eq!(s.len(), values.len());
        assert_eq!(s.load().unwrap(), values);
        let mut r = s.reader();
        for &v in &values {
            assert_eq!(r.next_value().unwrap(), v);
        }
        assert!(r.next_value().is_err());
        assert_eq!(s.get(123_457).unwrap(), values[123_457]);
        assert!(s.get(values.len()).is_err());
        let wide = Spill::from_slice(&[u64::MAX, 1, 1 << 40]).unwrap();
        assert_eq!(
            wide.load_as(|v| v >> 1).unwrap(),
            vec![u64::MAX >> 1, 0, 1 << 39]
        );
        let empty = Spill::<u16>::from_slice(&[]).unwrap();
        assert!(empty.load().unwrap().is_empty());
    }
}
