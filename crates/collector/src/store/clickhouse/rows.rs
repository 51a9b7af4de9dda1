//! ClickHouse's RowBinary format: rows appended to a buffer for an INSERT ([`Rows`], and a VM's
//! row, [`vm_row`]), and answers read back ([`Reader`]).

use crate::store::types::VmRecord;

/// One day, in ms (a `Date` column counts days).
pub(super) const DAY_MS: u64 = 86_400_000;

/// RowBinary values appended to a buffer.
#[derive(Default)]
pub(super) struct Rows {
    pub(super) bytes: Vec<u8>,
    pub(super) count: usize,
}

impl Rows {
    pub(super) fn leb(&mut self, mut n: u64) {
        loop {
            let b = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                self.bytes.push(b);
                return;
            }
            self.bytes.push(b | 0x80);
        }
    }
    pub(super) fn u8(&mut self, v: u8) {
        self.bytes.push(v);
    }
    pub(super) fn u16(&mut self, v: u16) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }
    pub(super) fn u32(&mut self, v: u32) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }
    pub(super) fn u64(&mut self, v: u64) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }
    pub(super) fn i64(&mut self, v: i64) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }
    pub(super) fn str(&mut self, s: &[u8]) {
        self.leb(s.len() as u64);
        self.bytes.extend_from_slice(s);
    }
    pub(super) fn strs<'a>(&mut self, v: impl ExactSizeIterator<Item = &'a str>) {
        self.leb(v.len() as u64);
        for s in v {
            self.str(s.as_bytes());
        }
    }
    pub(super) fn u64s(&mut self, v: &[u64]) {
        self.leb(v.len() as u64);
        for x in v {
            self.u64(*x);
        }
    }
    /// A `Date`: days since the epoch.
    pub(super) fn date(&mut self, unix_ms: u64) {
        self.u16((unix_ms / DAY_MS).min(u16::MAX as u64) as u16);
    }
}

/// Reads RowBinary answers; every read names what was cut short.
pub(super) struct Reader<'a> {
    pub(super) b: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(super) fn done(&self) -> bool {
        self.b.is_empty()
    }
    pub(super) fn take(&mut self, n: usize) -> anyhow::Result<&'a [u8]> {
        anyhow::ensure!(self.b.len() >= n, "ClickHouse's answer is cut short");
        let (head, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(head)
    }
    pub(super) fn leb(&mut self) -> anyhow::Result<u64> {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.take(1)?[0];
            n |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                return Ok(n);
            }
        }
        anyhow::bail!("a bad length in ClickHouse's answer")
    }
    pub(super) fn u8(&mut self) -> anyhow::Result<u8> {
        Ok(self.take(1)?[0])
    }
    pub(super) fn u32(&mut self) -> anyhow::Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into()?))
    }
    pub(super) fn u64(&mut self) -> anyhow::Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into()?))
    }
    pub(super) fn i64(&mut self) -> anyhow::Result<i64> {
        Ok(i64::from_le_bytes(self.take(8)?.try_into()?))
    }
    pub(super) fn bytes(&mut self) -> anyhow::Result<&'a [u8]> {
        let n = self.leb()? as usize;
        self.take(n)
    }
    pub(super) fn string(&mut self) -> anyhow::Result<String> {
        Ok(String::from_utf8_lossy(self.bytes()?).into_owned())
    }
    pub(super) fn strings(&mut self) -> anyhow::Result<Vec<String>> {
        let n = self.leb()? as usize;
        (0..n).map(|_| self.string()).collect()
    }
    pub(super) fn u64s(&mut self) -> anyhow::Result<Vec<u64>> {
        let n = self.leb()? as usize;
        anyhow::ensure!(n <= self.b.len() / 8, "ClickHouse's answer is cut short");
        (0..n).map(|_| self.u64()).collect()
    }
}

pub(super) fn vm_row(rows: &mut Rows, vm: &VmRecord, deleted: bool) {
    rows.u64(vm.id);
    rows.u32(vm.pid);
    rows.str(vm.command.as_bytes());
    rows.str(vm.host.as_bytes());
    rows.str(vm.jvm.as_bytes());
    rows.str(vm.os.as_bytes());
    rows.str(vm.agent_version.as_bytes());
    rows.u64(vm.start_unix_ms);
    rows.u64(vm.connected_at);
    rows.u64(vm.last_seen);
    rows.u64(vm.dropped_snapshots);
    rows.u64(vm.dropped_sample_batches);
    rows.u64(vm.dropped_samples);
    rows.strs(vm.labels.iter().map(|(k, _)| k.as_str()));
    rows.strs(vm.labels.iter().map(|(_, v)| v.as_str()));
    rows.u8(deleted as u8);
    // Newer rows win (ReplacingMergeTree's version): the time, in ns.
    rows.u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    );
    rows.count += 1;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_binary_round_trips() {
        let mut w = Rows::default();
        w.u64(300);
        w.str(b"caf\xc3\xa9");
        w.strs(["a", "bc"].into_iter());
        w.u64s(&[1, 2, 1 << 40]);
        w.i64(-5);
        let mut r = Reader { b: &w.bytes };
        assert_eq!(r.u64().unwrap(), 300);
        assert_eq!(r.string().unwrap(), "café");
        assert_eq!(r.strings().unwrap(), vec!["a", "bc"]);
        assert_eq!(r.u64s().unwrap(), vec![1, 2, 1 << 40]);
        assert_eq!(r.i64().unwrap(), -5);
        assert!(r.done());
        // Cut short anywhere: an error, never a panic.
        for n in 0..w.bytes.len() {
            let mut r = Reader { b: &w.bytes[..n] };
            let all = (|| -> anyhow::Result<()> {
                r.u64()?;
                r.string()?;
                r.strings()?;
                r.u64s()?;
                r.i64()?;
                Ok(())
            })();
            assert!(all.is_err(), "{n}");
        }
    }
}
