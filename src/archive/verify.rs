//! `abstore verify` (and the first pass of every import): the whole archive
//! checked before anything trusts it — framing, record order, canonical
//! form, every row against its write route's checks (`checks`), event
//! sequences, every blob's hash, the counts and the digest.

use std::collections::HashSet;
use std::path::Path;

use anyhow::{Context as _, bail};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use super::format::{self, Counts, FORMAT_NAME, FORMAT_VERSION, OLDEST_VERSION, TABLES, Val};
use super::progress::Progress;
use super::reader::{ArchiveReader, Record};
use crate::blobs::blob_ref;

/// What a valid archive holds.
#[derive(Debug)]
pub struct Summary {
    pub source: String,
    pub created_at: String,
    pub counts: Counts,
    pub sha256: String,
}

pub fn verify(path: &Path, quiet: bool) -> anyhow::Result<Summary> {
    let mut reader = ArchiveReader::open(path)?;
    let mut progress = Progress::new("verify", quiet);
    let mut digest = Sha256::new();
    let mut counts = Counts::default();

    // The header.
    if reader.next_line()?.is_none() {
        bail!("the archive is empty");
    }
    let (source, created_at, version) = check_header(&reader)?;
    let tables = format::tables_of(version);

    // Records, in order; `section` is the index of the current record type
    // (TABLES, then blobs at TABLES.len()).
    let blob_section = TABLES.len();
    let mut section = 0;
    let mut previous: Option<Vec<Val>> = None;
    let mut previous_blob: Option<String> = None;
    let mut referenced: HashSet<String> = HashSet::new();
    let footer = loop {
        let Some(line) = reader.next_line()? else {
            bail!(
                "truncated: the archive ends after line {} without a footer",
                reader.line_no
            );
        };
        let bytes = line.len() as u64;
        let canonical_text = String::from_utf8_lossy(&line[..line.len() - 1]).into_owned();
        let at = reader.line_no;
        let record = reader.parse()?;
        let canonical = match &record {
            Record::Header(_) => bail!("line {at}: a second header"),
            Record::Footer(footer) => break footer.clone(),
            Record::Row(index, row) => {
                let table = &TABLES[*index];
                if *index >= tables {
                    bail!(
                        "line {at}: a {} record in a version {version} archive",
                        table.record
                    );
                }
                if *index < section {
                    bail!(
                        "line {at}: {} out of order: a {} after the {} records",
                        table.describe_key(row),
                        table.record,
                        section_name(section)
                    );
                }
                if *index == section {
                    if let Some(previous) = &previous {
                        if table.compare_keys(previous, row).is_ge() {
                            bail!(
                                "line {at}: {} out of order (after {})",
                                table.describe_key(row),
                                table.describe_key(previous)
                            );
                        }
                        check_sequence(table.record, previous, row)
                            .map_err(|why| anyhow::anyhow!("line {at}: {why}"))?;
                    } else {
                        check_sequence(table.record, &[], row)
                            .map_err(|why| anyhow::anyhow!("line {at}: {why}"))?;
                    }
                } else {
                    check_sequence(table.record, &[], row)
                        .map_err(|why| anyhow::anyhow!("line {at}: {why}"))?;
                }
                super::checks::row(*index, row).map_err(|why| {
                    anyhow::anyhow!(
                        "line {at}: {} is not one abstore's write routes would store: {why}",
                        table.describe_key(row)
                    )
                })?;
                section = *index;
                note_references(table.record, row, &mut referenced).map_err(|why| {
                    anyhow::anyhow!("line {at}: {} has {why}", table.describe_key(row))
                })?;
                counts.rows[*index] += 1;
                let canonical = table.encode(row);
                previous = Some(row.clone());
                canonical
            }
            Record::Blob {
                sha256,
                size,
                bytes,
            } => {
                section = blob_section;
                if previous_blob.as_ref().is_some_and(|p| p >= sha256) {
                    bail!("line {at}: blob {sha256} out of order");
                }
                if *size != bytes.len() as u64 {
                    bail!(
                        "line {at}: blob {sha256} says {size} bytes but holds {}",
                        bytes.len()
                    );
                }
                if blob_ref(bytes) != *sha256 {
                    bail!("line {at}: blob {sha256} is corrupt: its bytes hash differently");
                }
                if !referenced.remove(sha256) {
                    bail!(
                        "line {at}: blob {sha256} is referenced by no artifact, stream or ticket asset"
                    );
                }
                counts.blobs += 1;
                counts.blob_bytes += *size;
                previous_blob = Some(sha256.clone());
                format::blob_line(sha256, bytes)
            }
        };
        if canonical != canonical_text {
            bail!("line {at}: not in canonical form (member order, escaping or spacing)");
        }
        digest.update(canonical_text.as_bytes());
        digest.update(b"\n");
        progress.add(1, bytes);
    };

    let at = reader.line_no;
    if reader.next_line()?.is_some() {
        bail!("line {}: data after the footer (line {at})", reader.line_no);
    }
    let stated = footer
        .get("counts")
        .and_then(|counts| Counts::from_json(counts, version))
        .with_context(|| format!("line {at}: the footer's counts are malformed"))?;
    if stated != counts {
        bail!("line {at}: the footer counts ({stated}) do not match the records ({counts})");
    }
    let sha256 = hex::encode(digest.finalize());
    match footer.get("sha256").and_then(Value::as_str) {
        Some(stated) if stated == sha256 => {}
        Some(_) => bail!("line {at}: the archive digest does not match its contents"),
        None => bail!("line {at}: the footer has no sha256"),
    }
    if footer.len() != 3 {
        bail!("line {at}: the footer has unknown members");
    }
    if let Some(missing) = referenced.iter().min() {
        bail!(
            "blob {missing} is referenced but missing ({} blobs missing)",
            referenced.len()
        );
    }
    progress.finish();
    Ok(Summary {
        source,
        created_at,
        counts,
        sha256,
    })
}

fn section_name(section: usize) -> &'static str {
    TABLES.get(section).map_or("blob", |t| t.record)
}

/// The header's source, time and format version (one this build reads).
fn check_header(reader: &ArchiveReader) -> anyhow::Result<(String, String, i64)> {
    let Record::Header(header) = reader.parse()? else {
        bail!("line 1: the archive does not start with a header");
    };
    if header.get("format").and_then(Value::as_str) != Some(FORMAT_NAME) {
        bail!("line 1: not an {FORMAT_NAME} header");
    }
    let version = match header.get("version").and_then(Value::as_i64) {
        Some(v) if (OLDEST_VERSION..=FORMAT_VERSION).contains(&v) => v,
        other => bail!(
            "line 1: format version {other:?} is not one this abstore reads \
             ({OLDEST_VERSION} to {FORMAT_VERSION})"
        ),
    };
    let text = |name: &str| {
        header
            .get(name)
            .and_then(Value::as_str)
            .map(str::to_string)
            .with_context(|| format!("line 1: the header lacks `{name}`"))
    };
    let (source, created_at, abstore) = (text("source")?, text("created_at")?, text("abstore")?);
    let mut expected = serde_json::from_str::<serde_json::Map<String, Value>>(
        &format::header_line(&source, &created_at),
    )?;
    expected.insert("abstore".into(), Value::from(abstore));
    expected.insert("version".into(), Value::from(version));
    if expected != header {
        bail!("line 1: the header has unexpected members");
    }
    Ok((source, created_at, version))
}

/// Events, chunks, ticket comments and ticket histories are numbered 1, 2,
/// 3… per resource, stream or ticket; the archive of a consistent snapshot never has a gap.
fn check_sequence(record: &str, previous: &[Val], row: &[Val]) -> Result<(), String> {
    let owner_len = match record {
        "event" => 2,
        "stream_chunk" => 1,
        "ticket_comment" => 2,
        "ticket_history" => 2,
        _ => return Ok(()),
    };
    let Val::Int(seq) = row[owner_len] else {
        return Err(format!("{record} has no sequence"));
    };
    let expected = match previous.get(..owner_len) {
        Some(owner) if owner == &row[..owner_len] => match previous[owner_len] {
            Val::Int(p) => p + 1,
            _ => 1,
        },
        _ => 1,
    };
    if seq != expected {
        return Err(format!(
            "{record} sequence gap: seq {seq} where {expected} was due"
        ));
    }
    Ok(())
}

/// Remembers the blobs an artifact, a closed stream or a ticket-asset
/// manifest points at; a manifest that does not parse is refused.
fn note_references(
    record: &str,
    row: &[Val],
    referenced: &mut HashSet<String>,
) -> Result<(), String> {
    let index = match record {
        "artifact" => 4,
        "stream" => 13,
        "ticket_asset" => {
            let entries = match &row[format::TICKET_ASSET_ENTRIES] {
                Val::Text(text) => Some(text.as_str()),
                _ => None,
            };
            referenced.extend(format::ticket_asset_blobs(entries)?);
            return Ok(());
        }
        _ => return Ok(()),
    };
    if let Val::Text(address) = &row[index] {
        referenced.insert(address.clone());
    }
    Ok(())
}
