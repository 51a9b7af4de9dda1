//! Bounds-checked big-endian reading and plain writing.

use crate::error::{RawError, RawResult};

/// A cursor over untrusted bytes; every read is checked. `base` is the absolute offset of
/// `data[0]` in the class file, so errors report class-file offsets.
pub(crate) struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
    base: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(data: &'a [u8], base: usize) -> Self {
        Cursor { data, pos: 0, base }
    }
    /// Absolute offset of the next byte.
    pub fn offset(&self) -> usize {
        self.base + self.pos
    }
    /// The whole buffer this cursor reads.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }
    pub fn pos(&self) -> usize {
        self.pos
    }
    pub fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }
    pub fn err(&self, what: impl Into<String>) -> RawError {
        RawError::new(self.offset(), what)
    }
    pub fn bytes(&mut self, n: usize, what: &str) -> RawResult<&'a [u8]> {
        if self.remaining() < n {
            return Err(self.err(format!(
                "truncated {what}: need {n} bytes, {} left",
                self.remaining()
            )));
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    pub fn u1(&mut self, what: &str) -> RawResult<u8> {
        Ok(self.bytes(1, what)?[0])
    }
    pub fn u2(&mut self, what: &str) -> RawResult<u16> {
        let b = self.bytes(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    pub fn u4(&mut self, what: &str) -> RawResult<u32> {
        let b = self.bytes(4, what)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn i4(&mut self, what: &str) -> RawResult<i32> {
        Ok(self.u4(what)? as i32)
    }
    pub fn skip(&mut self, n: usize, what: &str) -> RawResult<()> {
        self.bytes(n, what).map(|_| ())
    }
}

pub(crate) fn put_u2(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_be_bytes());
}
pub(crate) fn put_u4(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}
