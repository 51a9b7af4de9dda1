//! The primitive encodings of a JFR chunk, read and written: big-endian header fields, JFR's
//! LEB128 integers (at most 9 bytes, the 9th carrying 8 whole bits), floats, and strings (null,
//! empty, constant-pool reference, UTF-8, UTF-16 chars, Latin-1).
//!
//! Every read is bounds-checked against the cursor's window and fails with the absolute byte
//! offset in the file; nothing allocates more than the bytes left in the window can hold.

use crate::error::{Error, Result};

pub(super) const FORMAT: &str = "jfr";

/// A string as stored in a value.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Str {
    Null,
    Text(String),
    /// A key into the `java.lang.String` constant pool.
    Ref(i64),
}

/// A read position inside a window `[start, end)` of the file.
#[derive(Clone, Copy)]
pub(super) struct Cursor<'a> {
    data: &'a [u8],
    pub pos: usize,
    pub end: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor over `data[pos..end]`; `end` is clamped to the data.
    pub fn new(data: &'a [u8], pos: usize, end: usize) -> Cursor<'a> {
        let end = end.min(data.len());
        Cursor {
            data,
            pos: pos.min(end),
            end,
        }
    }

    pub fn remaining(&self) -> usize {
        self.end - self.pos
    }

    /// An error about the value that starts at byte `at`: truncated if the window ends there.
    fn short(&self, at: usize, what: &str) -> Error {
        if self.end == self.data.len() {
            Error::truncated(
                FORMAT,
                format!("the file ends at byte {} inside {what}", self.end),
            )
        } else {
            Error::invalid(
                FORMAT,
                format!(
                    "{what} at byte {at} runs past the end of its event (byte {})",
                    self.end
                ),
            )
        }
    }

    pub fn bytes(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.short(self.pos, what));
        }
        let b = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(b)
    }

    pub fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.bytes(1, what)?[0])
    }

    pub fn be_u16(&mut self, what: &str) -> Result<u16> {
        let b = self.bytes(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    pub fn be_u32(&mut self, what: &str) -> Result<u32> {
        let b = self.bytes(4, what)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn be_u64(&mut self, what: &str) -> Result<u64> {
        let b = self.bytes(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    /// A JFR compressed integer: 7 bits a byte, low bits first, the 9th byte whole.
    pub fn varint(&mut self, what: &str) -> Result<u64> {
        let start = self.pos;
        let mut v = 0u64;
        for i in 0..9 {
            let Some(&b) = self.data[..self.end].get(self.pos) else {
                return Err(self.short(start, what));
            };
            self.pos += 1;
            if i == 8 {
                return Ok(v | (u64::from(b) << 56));
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Ok(v)
    }

    /// A varint read as a signed long (JFR's longs are two's complement).
    pub fn varlong(&mut self, what: &str) -> Result<i64> {
        Ok(self.varint(what)? as i64)
    }

    /// A count of items that each take at least one byte: at most the bytes left.
    pub fn count(&mut self, what: &str) -> Result<usize> {
        let at = self.pos;
        let n = self.varint(what)?;
        if n > self.remaining() as u64 {
            return Err(Error::invalid(
                FORMAT,
                format!(
                    "{what} at byte {at} is {n}, more than the {} bytes left",
                    self.remaining()
                ),
            ));
        }
        Ok(n as usize)
    }

    pub fn string(&mut self, what: &str) -> Result<Str> {
        let at = self.pos;
        Ok(match self.u8(what)? {
            0 => Str::Null,
            1 => Str::Text(String::new()),
            2 => Str::Ref(self.varlong(what)?),
            3 => {
                let n = self.count(what)?;
                Str::Text(String::from_utf8_lossy(self.bytes(n, what)?).into_owned())
            }
            4 => {
                let n = self.count(what)?;
                let mut units = Vec::with_capacity(n);
                for _ in 0..n {
                    units.push(self.varint(what)? as u16);
                }
                Str::Text(String::from_utf16_lossy(&units))
            }
            5 => {
                let n = self.count(what)?;
                Str::Text(self.bytes(n, what)?.iter().map(|&b| b as char).collect())
            }
            e => {
                return Err(Error::invalid(
                    FORMAT,
                    format!("{what} at byte {at} has unknown string encoding {e}"),
                ));
            }
        })
    }
}

/// Appends JFR encodings to a byte vector.
#[derive(Default)]
pub(super) struct Out {
    pub buf: Vec<u8>,
}

impl Out {
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }

    pub fn varint(&mut self, mut v: u64) {
        for _ in 0..8 {
            if v < 0x80 {
                self.buf.push(v as u8);
                return;
            }
            self.buf.push((v as u8 & 0x7f) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    pub fn varlong(&mut self, v: i64) {
        self.varint(v as u64);
    }

    /// A UTF-8 string (encoding 3).
    pub fn string(&mut self, s: &str) {
        if s.is_empty() {
            self.u8(1);
        } else {
            self.u8(3);
            self.varint(s.len() as u64);
            self.buf.extend_from_slice(s.as_bytes());
        }
    }

    /// Appends `body` as one event or checkpoint: its size (counting the size field itself)
    /// then the body.
    pub fn sized(&mut self, body: &[u8]) {
        let n = body.len() as u64;
        let mut k = 1;
        while varint_len(n + k) as u64 != k {
            k += 1;
        }
        self.varint(n + k);
        self.buf.extend_from_slice(body);
    }
}

pub(super) fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 && n < 9 {
        v >>= 7;
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_including_nine_byte_values() {
        for v in [
            0u64,
            1,
            127,
            128,
            300,
            1 << 21,
            u64::from(u32::MAX),
            1 << 56,
            u64::MAX,
            (-5i64) as u64,
        ] {
            let mut out = Out::default();
            out.varint(v);
            assert_eq!(out.buf.len(), varint_len(v), "{v}");
            let mut c = Cursor::new(&out.buf, 0, out.buf.len());
            assert_eq!(c.varint("v").unwrap(), v);
            assert_eq!(c.remaining(), 0);
        }
    }

    #[test]
    fn sized_counts_its_own_size_field() {
        for n in [
            0usize, 1, 125, 126, 127, 128, 16_380, 16_381, 16_383, 16_384,
        ] {
            let mut out = Out::default();
            out.sized(&vec![0u8; n]);
            let mut c = Cursor::new(&out.buf, 0, out.buf.len());
            assert_eq!(c.varint("size").unwrap() as usize, out.buf.len(), "{n}");
        }
    }

    #[test]
    fn reads_fail_with_the_offset() {
        let data = [0x80u8, 0x80];
        let mut c = Cursor::new(&data, 0, 2);
        assert_eq!(
            c.varint("the event size").unwrap_err().to_string(),
            "truncated jfr file: the file ends at byte 2 inside the event size"
        );
        let data = [3u8, 0x7f, 1, 2];
        let mut c = Cursor::new(&data, 0, 4);
        assert_eq!(
            c.string("a name").unwrap_err().to_string(),
            "invalid jfr data: a name at byte 1 is 127, more than the 2 bytes left"
        );
        let data = [3u8, 2, b'h', b'i', 9];
        let mut c = Cursor::new(&data, 0, 5);
        assert_eq!(c.string("s").unwrap(), Str::Text("hi".into()));
        assert!(
            c.string("s")
                .unwrap_err()
                .to_string()
                .contains("unknown string encoding 9")
        );
    }
}
