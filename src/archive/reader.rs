//! Reading an archive line by line: strict framing (every line ends in a
//! newline, none is longer than `MAX_LINE_BYTES`), each parsed into a record.

use std::io::{BufRead as _, Read as _};
use std::path::Path;

use anyhow::{Context as _, bail};
use serde_json::{Map, Value};

use super::format::{MAX_LINE_BYTES, TABLES, Table, Val};

/// One parsed line.
pub enum Record {
    Header(Map<String, Value>),
    Row(usize, Vec<Val>),
    Blob {
        sha256: String,
        size: u64,
        bytes: Vec<u8>,
    },
    Footer(Map<String, Value>),
}

pub struct ArchiveReader {
    input: std::io::BufReader<std::fs::File>,
    buf: Vec<u8>,
    /// The number of the line last read (1-based).
    pub line_no: u64,
}

impl ArchiveReader {
    /// Opens the archive at `path`, which must be a regular file: a FIFO
    /// would block the open, and an import reads the archive three times.
    pub fn open(path: &Path) -> anyhow::Result<ArchiveReader> {
        use super::source_files::{self, Links, Opened};
        let file = match source_files::open(path, Links::Follow)
            .with_context(|| format!("opening {}", path.display()))?
        {
            Opened::Regular(file, _) => file,
            Opened::Absent => bail!("{} does not exist", path.display()),
            Opened::Special(what) => bail!("{} is {what}, not a regular file", path.display()),
        };
        Ok(ArchiveReader {
            input: std::io::BufReader::with_capacity(1 << 20, file),
            buf: Vec::new(),
            line_no: 0,
        })
    }

    /// The next line's bytes including its newline, `None` at the end.
    pub fn next_line(&mut self) -> anyhow::Result<Option<&[u8]>> {
        self.buf.clear();
        let n = (&mut self.input)
            .take(MAX_LINE_BYTES + 1)
            .read_until(b'\n', &mut self.buf)?;
        if n == 0 {
            return Ok(None);
        }
        self.line_no += 1;
        if self.buf.last() != Some(&b'\n') {
            if n as u64 > MAX_LINE_BYTES {
                bail!(
                    "line {} is longer than {MAX_LINE_BYTES} bytes",
                    self.line_no
                );
            }
            bail!("truncated: line {} has no newline", self.line_no);
        }
        Ok(Some(&self.buf))
    }

    /// Parses the line just read (without its newline) into a record.
    pub fn parse(&self) -> anyhow::Result<Record> {
        let text = &self.buf[..self.buf.len() - 1];
        let at = || format!("line {}", self.line_no);
        let value: Value =
            serde_json::from_slice(text).with_context(|| format!("{}: not a JSON object", at()))?;
        let Value::Object(object) = value else {
            bail!("{}: not a JSON object", at());
        };
        let kind = object
            .get("type")
            .and_then(Value::as_str)
            .with_context(|| format!("{}: no string `type`", at()))?
            .to_string();
        let record = match kind.as_str() {
            "header" => Record::Header(object),
            "footer" => Record::Footer(object),
            "blob" => parse_blob(&object).with_context(at)?,
            other => {
                let Some(index) = TABLES.iter().position(|t| t.record == other) else {
                    bail!("{}: unknown record type {other:?}", at());
                };
                let table: &Table = &TABLES[index];
                let row = table
                    .decode(&object)
                    .map_err(|why| anyhow::anyhow!("{}: {why}", at()))?;
                Record::Row(index, row)
            }
        };
        Ok(record)
    }
}

fn parse_blob(object: &Map<String, Value>) -> anyhow::Result<Record> {
    if object.len() != 4 {
        bail!("a blob has exactly `type`, `sha256`, `size` and `base64`");
    }
    let sha256 = object
        .get("sha256")
        .and_then(Value::as_str)
        .context("a blob lacks its `sha256`")?;
    if sha256.len() != 64
        || !sha256
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        bail!("blob sha256 {sha256:?} is not 64 lowercase hex digits");
    }
    let size = object
        .get("size")
        .and_then(Value::as_u64)
        .context("a blob lacks its `size`")?;
    let text = object
        .get("base64")
        .and_then(Value::as_str)
        .context("a blob lacks its `base64`")?;
    let bytes = crate::protocol::base64::decode(text, MAX_LINE_BYTES as usize)
        .map_err(|_| anyhow::anyhow!("blob {sha256}: its base64 is malformed"))?;
    Ok(Record::Blob {
        sha256: sha256.to_string(),
        size,
        bytes,
    })
}
