//! The HTTP side of the ClickHouse store: one query or insert at a time per call, errors said
//! with ClickHouse's first line.

/// The HTTP side: one query or insert at a time per call.
#[derive(Clone)]
pub(super) struct Client {
    pub(super) url: String,
    pub(super) db: String,
    pub(super) agent: ureq::Agent,
}

impl Client {
    /// Runs `sql` with `body` (RowBinary rows for an INSERT) and returns the answer.
    pub(super) fn run(&self, sql: &str, body: &[u8]) -> anyhow::Result<Vec<u8>> {
        let resp = self
            .agent
            .post(&self.url)
            .query("query", sql)
            .send_bytes(body);
        match resp {
            Ok(r) => {
                let mut out = Vec::new();
                std::io::Read::read_to_end(&mut r.into_reader(), &mut out)?;
                Ok(out)
            }
            Err(ureq::Error::Status(code, r)) => {
                let text = r.into_string().unwrap_or_default();
                let first = text.lines().next().unwrap_or("").trim();
                anyhow::bail!("ClickHouse answered {code}: {first}")
            }
            Err(e) => anyhow::bail!("cannot reach ClickHouse at {}: {e}", self.url),
        }
    }

    pub(super) fn exec(&self, sql: &str) -> anyhow::Result<()> {
        self.run(sql, &[]).map(|_| ())
    }

    pub(super) fn query(&self, sql: &str) -> anyhow::Result<Vec<u8>> {
        self.run(&format!("{sql} FORMAT RowBinary"), &[])
    }
}
