//! The archive format (docs/operations.md, "The archive format"): one UTF-8
//! file of newline-terminated JSON objects, each with a `"type"` member.
//!
//! ```text
//! header                      format name and version, abstore version, source kind, time
//! resource*                   every build, repository and session row, by (kind, id)
//! event*                      every envelope exactly as stored, by (kind, resource_id, seq)
//! artifact_head*              next revision counters, by (kind, resource_id, artifact_kind)
//! artifact*                   artifact metadata, by (kind, resource_id, artifact_kind, revision)
//! stream*                     streams with their closed record, by id
//! stream_chunk*               chunks exactly as stored, by (stream_id, seq)
//! ticket_asset_head*          ticket-asset revision counters, by (repo, ticket_id, asset_kind, name)
//! ticket_asset*               ticket-asset revisions (tombstones too), by (…, revision)
//! revoked_token*              revoked tokens' digests, by digest
//! ticket_team*                hosted-ticket teams and their creation counters, by team_key
//! ticket*                     hosted tickets, by (team_key, id)
//! ticket_blocker*             their blockers, by (team_key, ticket_id, blocker_id)
//! ticket_comment*             their comments, by (team_key, ticket_id, seq)
//! ticket_history*             their change histories, by (team_key, ticket_id, seq)
//! blob*                       every referenced blob: sha256, size, base64 bytes, by sha256
//! footer                      counts, and the SHA-256 of every line between header and footer
//! ```
//!
//! Rows are the schema's columns (migrations/) under their column names, in
//! schema order, so the same store always yields the same bytes whichever
//! backend holds it. Keys are compared bytewise (both schemas order text
//! keys bytewise), so the order is canonical and checkable line by line.
//! A column derived from other rows ([`DERIVED`]) is not carried: an
//! import recomputes it from the rows it holds, so an archive cannot
//! disagree with itself, and archives of every version import alike.

use std::cmp::Ordering;

use serde_json::{Map, Value};

/// The `format` member of the header.
pub const FORMAT_NAME: &str = "abstore-archive";
/// The archive format version this build writes. Version 2 added the
/// ticket-asset records (migration 0006), version 3 the revoked tokens
/// (migration 0007): a store moved or restored through an archive keeps
/// refusing the tokens revoked on it; version 4 the hosted tickets
/// (migration 0009), version 5 their change histories (migration 0010).
pub const FORMAT_VERSION: i64 = 5;
/// The oldest version this build reads: an older archive is a current one
/// without the later tables' records (its footer counts lack them).
pub const OLDEST_VERSION: i64 = 1;
/// The tables a version-1 archive has: the first ones of [`TABLES`].
const V1_TABLES: usize = 6;
/// The tables a version-2 archive has.
const V2_TABLES: usize = 8;
/// The tables a version-3 archive has.
const V3_TABLES: usize = 9;
/// The tables a version-4 archive has.
const V4_TABLES: usize = 13;
/// The longest line a reader accepts: a blob line is about 4/3 of the
/// blob, and blobs are bounded by the server's `--max-artifact-bytes` and
/// (ticket-asset files) `--max-body-bytes`.
pub const MAX_LINE_BYTES: u64 = 512 * 1024 * 1024;
/// The largest blob an archive carries: its line (the base64 of its bytes,
/// four characters per started three, and the record's other members) must
/// fit [`MAX_LINE_BYTES`]. An import from another store leaves a larger blob
/// out, reported, rather than writing an archive no reader would take.
pub const MAX_BLOB_BYTES: u64 = (MAX_LINE_BYTES - 1024) / 4 * 3;

/// A column's SQL type as far as the archive cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ty {
    Text,
    Int,
}

#[derive(Debug)]
pub struct Column {
    pub name: &'static str,
    pub ty: Ty,
    pub nullable: bool,
}

/// One table of the schema: its record type, its columns (primary key
/// columns first), and how many leading columns form the key.
#[derive(Debug)]
pub struct Table {
    pub record: &'static str,
    pub table: &'static str,
    pub columns: &'static [Column],
    pub key_len: usize,
}

const fn text(name: &'static str) -> Column {
    Column {
        name,
        ty: Ty::Text,
        nullable: false,
    }
}
const fn int(name: &'static str) -> Column {
    Column {
        name,
        ty: Ty::Int,
        nullable: false,
    }
}
const fn opt_text(name: &'static str) -> Column {
    Column {
        name,
        ty: Ty::Text,
        nullable: true,
    }
}
const fn opt_int(name: &'static str) -> Column {
    Column {
        name,
        ty: Ty::Int,
        nullable: true,
    }
}

/// How many tables [`TABLES`] lists.
pub const TABLE_COUNT: usize = 14;

/// Every table, in archive order, which is also an order that satisfies
/// the schema's foreign keys when inserting.
pub static TABLES: [Table; TABLE_COUNT] = [
    Table {
        record: "resource",
        table: "resources",
        columns: &[
            text("kind"),
            text("id"),
            opt_text("attrs"),
            int("created_at"),
            int("updated_at"),
            int("last_seq"),
            opt_text("lease_holder"),
            opt_int("lease_expires_at"),
            opt_int("lease_ttl_ms"),
            opt_int("heartbeat_at"),
            int("stream_counter"),
            opt_text("parent"),
            opt_int("created_order"),
        ],
        key_len: 2,
    },
    Table {
        record: "event",
        table: "events",
        columns: &[
            text("kind"),
            text("resource_id"),
            int("seq"),
            text("envelope"),
        ],
        key_len: 3,
    },
    Table {
        record: "artifact_head",
        table: "artifact_heads",
        columns: &[
            text("kind"),
            text("resource_id"),
            text("artifact_kind"),
            int("next_revision"),
        ],
        key_len: 3,
    },
    Table {
        record: "artifact",
        table: "artifacts",
        columns: &[
            text("kind"),
            text("resource_id"),
            text("artifact_kind"),
            int("revision"),
            text("blob_ref"),
            int("size"),
            text("metadata"),
            int("created_at"),
        ],
        key_len: 4,
    },
    Table {
        record: "stream",
        table: "streams",
        columns: &[
            text("id"),
            text("scope_kind"),
            text("scope_id"),
            text("label"),
            text("status"),
            int("created_at"),
            int("created_order"),
            int("last_seq"),
            opt_int("closed_at"),
            opt_int("closed_order"),
            opt_text("outcome"),
            opt_text("artifact_kind"),
            opt_int("artifact_revision"),
            opt_text("artifact_blob_ref"),
        ],
        key_len: 1,
    },
    Table {
        record: "stream_chunk",
        table: "stream_chunks",
        columns: &[text("stream_id"), int("seq"), text("chunk")],
        key_len: 2,
    },
    Table {
        record: "ticket_asset_head",
        table: "ticket_asset_heads",
        columns: &[
            text("repo"),
            text("ticket_id"),
            text("asset_kind"),
            text("name"),
            int("next_revision"),
            int("created_at"),
        ],
        key_len: 4,
    },
    Table {
        record: "ticket_asset",
        table: "ticket_assets",
        columns: &[
            text("repo"),
            text("ticket_id"),
            text("asset_kind"),
            text("name"),
            int("revision"),
            opt_text("layout"),
            int("size"),
            int("file_count"),
            int("dir_count"),
            opt_text("entries"),
            int("created_at"),
        ],
        key_len: 5,
    },
    Table {
        record: "revoked_token",
        table: "revoked_tokens",
        columns: &[
            text("digest"),
            opt_int("expires_at"),
            int("revoked_at"),
            opt_text("note"),
        ],
        key_len: 1,
    },
    Table {
        record: "ticket_team",
        table: "ticket_teams",
        columns: &[text("team_key"), int("last_seq")],
        key_len: 1,
    },
    Table {
        record: "ticket",
        table: "tickets",
        columns: &[
            text("team_key"),
            text("id"),
            int("seq"),
            opt_text("creation_key"),
            text("title_json"),
            text("body_json"),
            text("state"),
            text("labels_json"),
            int("created_at"),
            int("updated_at"),
        ],
        key_len: 2,
    },
    Table {
        record: "ticket_blocker",
        table: "ticket_blockers",
        columns: &[text("team_key"), text("ticket_id"), text("blocker_id")],
        key_len: 3,
    },
    Table {
        record: "ticket_comment",
        table: "ticket_comments",
        columns: &[
            text("team_key"),
            text("ticket_id"),
            int("seq"),
            text("body_json"),
            int("created_at"),
        ],
        key_len: 3,
    },
    Table {
        record: "ticket_history",
        table: "ticket_history",
        columns: &[
            text("team_key"),
            text("ticket_id"),
            int("seq"),
            int("at"),
            text("actor"),
            opt_text("token_digest"),
            text("change_json"),
        ],
        key_len: 3,
    },
];

/// Columns of the schema the archive does not carry, as (table, column):
/// each is derived from archived rows and recomputed by an import: a
/// stream's bytes by [`recount_sql`], an event's type from its envelope
/// (PostgreSQL: migration 0011's trigger, as each row is inserted; SQLite:
/// [`recount_sql`]).
pub const DERIVED: [(&str, &str); 2] = [("streams", "bytes"), ("events", "type")];

/// What an import runs once its rows are in, to recompute [`DERIVED`]: an
/// open stream's byte total (migration 0008) is the UTF-8 length of its
/// chunks, exactly as appends count it; a closed stream's is left as it is
/// (0 for an imported one), since it takes no more appends.
pub fn recount_sql(postgres: bool) -> &'static str {
    if postgres {
        "UPDATE streams SET bytes = (SELECT COALESCE(SUM(octet_length(c.chunk)), 0) \
         FROM stream_chunks c WHERE c.stream_id = streams.id) WHERE status = 'open'"
    } else {
        // And the type of the events just imported: PostgreSQL's trigger
        // reads it from the envelope as each row is inserted; SQLite has
        // none (it would cost every append), so one statement does it here.
        "UPDATE streams SET bytes = (SELECT COALESCE(SUM(length(CAST(c.chunk AS BLOB))), 0) \
         FROM stream_chunks c WHERE c.stream_id = streams.id) WHERE status = 'open'; \
         UPDATE events SET type = json_extract(envelope, '$.type') WHERE type IS NULL"
    }
}

/// The column of a `ticket_asset` row holding its manifest's entries.
pub const TICKET_ASSET_ENTRIES: usize = 9;

/// The SQL that lists every blob the metadata references, ordered and
/// distinct (blob refs are lowercase hex, so any collation orders them alike;
/// PostgreSQL is told "C" anyway): artifacts', closed streams', and the
/// files of every ticket-asset manifest (read from the stored entries, with
/// each dialect's JSON functions; a manifest holds no NUL, which
/// PostgreSQL's would refuse).
pub fn referenced_blobs_sql(postgres: bool) -> String {
    let (collate, ticket_files) = if postgres {
        (
            " COLLATE \"C\"",
            "SELECT (f ->> 'blobRef') COLLATE \"C\" FROM ticket_assets t, \
             json_array_elements(t.entries::json) f \
             WHERE t.entries IS NOT NULL AND f ->> 'type' = 'file'",
        )
    } else {
        (
            "",
            "SELECT json_extract(f.value, '$.blobRef') FROM ticket_assets t, json_each(t.entries) f \
             WHERE t.entries IS NOT NULL AND json_extract(f.value, '$.type') = 'file'",
        )
    };
    format!(
        "SELECT blob_ref{collate} AS r FROM artifacts UNION \
         SELECT artifact_blob_ref{collate} FROM streams WHERE artifact_blob_ref IS NOT NULL UNION \
         {ticket_files} ORDER BY 1"
    )
}

/// The blobs a `ticket_asset` row's manifest (`entries`, JSON text; `None`
/// for a tombstone) references, or why the manifest is malformed.
pub fn ticket_asset_blobs(entries: Option<&str>) -> Result<Vec<String>, String> {
    let Some(text) = entries else {
        return Ok(Vec::new());
    };
    let entries: Vec<crate::store::AssetEntry> =
        serde_json::from_str(text).map_err(|err| format!("a malformed manifest ({err})"))?;
    Ok(entries
        .into_iter()
        .filter_map(|entry| match entry {
            crate::store::AssetEntry::File { blob_ref, .. } => Some(blob_ref),
            crate::store::AssetEntry::Dir { .. } => None,
        })
        .collect())
}

impl Table {
    pub fn column_list(&self) -> String {
        self.columns
            .iter()
            .map(|c| c.name)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// `SELECT` every row in key order.
    pub fn select_all_sql(&self) -> String {
        let key: Vec<&str> = self.columns[..self.key_len]
            .iter()
            .map(|c| c.name)
            .collect();
        format!(
            "SELECT {} FROM {} ORDER BY {}",
            self.column_list(),
            self.table,
            key.join(", ")
        )
    }

    /// `SELECT` one row by key; `placeholder(i)` spells parameter `i` (1-based).
    pub fn select_one_sql(&self, placeholder: fn(usize) -> String) -> String {
        let cond: Vec<String> = self.columns[..self.key_len]
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{} = {}", c.name, placeholder(i + 1)))
            .collect();
        format!(
            "SELECT {} FROM {} WHERE {}",
            self.column_list(),
            self.table,
            cond.join(" AND ")
        )
    }

    /// Inserts a row unless its key exists (both backends' syntax); the
    /// affected-row count says which happened.
    pub fn insert_sql(&self, placeholder: fn(usize) -> String) -> String {
        let values: Vec<String> = (1..=self.columns.len()).map(placeholder).collect();
        format!(
            "INSERT INTO {} ({}) VALUES ({}) ON CONFLICT DO NOTHING",
            self.table,
            self.column_list(),
            values.join(", ")
        )
    }

    /// A row's key, for messages: `(build, b-1, 3)`.
    pub fn describe_key(&self, row: &[Val]) -> String {
        let parts: Vec<String> = row[..self.key_len]
            .iter()
            .map(|value| match value {
                Val::Text(text) => crate::protocol::ident::shown(text),
                other => other.to_string(),
            })
            .collect();
        format!("{} ({})", self.record, parts.join(", "))
    }

    /// PostgreSQL: inserts `rows` rows unless their key exists, and returns
    /// the key of each row it inserted.
    pub fn insert_many_sql(&self, rows: usize) -> String {
        let width = self.columns.len();
        let values: Vec<String> = (0..rows)
            .map(|r| {
                let row: Vec<String> = (1..=width).map(|c| format!("${}", r * width + c)).collect();
                format!("({})", row.join(", "))
            })
            .collect();
        let key: Vec<&str> = self.columns[..self.key_len]
            .iter()
            .map(|c| c.name)
            .collect();
        format!(
            "INSERT INTO {} ({}) VALUES {} ON CONFLICT DO NOTHING RETURNING {}",
            self.table,
            self.column_list(),
            values.join(", "),
            key.join(", ")
        )
    }

    /// The archive line of a row (without the newline).
    pub fn encode(&self, row: &[Val]) -> String {
        let mut object = Map::new();
        object.insert("type".into(), Value::from(self.record));
        for (column, value) in self.columns.iter().zip(row) {
            object.insert(column.name.into(), value.to_json());
        }
        Value::Object(object).to_string()
    }

    /// A row from its parsed line: exactly the columns, each of its type.
    pub fn decode(&self, object: &Map<String, Value>) -> Result<Vec<Val>, String> {
        if object.len() != self.columns.len() + 1 {
            let unknown: Vec<&String> = object
                .keys()
                .filter(|k| *k != "type" && !self.columns.iter().any(|c| c.name == *k))
                .collect();
            if !unknown.is_empty() {
                return Err(format!("{} has unknown members {unknown:?}", self.record));
            }
        }
        self.columns
            .iter()
            .map(|column| {
                let value = object
                    .get(column.name)
                    .ok_or_else(|| format!("{} lacks `{}`", self.record, column.name))?;
                Val::from_json(value, column).ok_or_else(|| {
                    let expected = match (column.ty, column.nullable) {
                        (Ty::Text, false) => "a string",
                        (Ty::Int, false) => "an integer",
                        (Ty::Text, true) => "a string or null",
                        (Ty::Int, true) => "an integer or null",
                    };
                    format!("{}.{} is not {expected}", self.record, column.name)
                })
            })
            .collect()
    }

    /// Bytewise order of two rows' keys.
    pub fn compare_keys(&self, a: &[Val], b: &[Val]) -> Ordering {
        a[..self.key_len].cmp(&b[..self.key_len])
    }
}

/// One column value.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Val {
    Null,
    Int(i64),
    Text(String),
}

impl Val {
    pub fn to_json(&self) -> Value {
        match self {
            Val::Null => Value::Null,
            Val::Int(n) => Value::from(*n),
            Val::Text(s) => Value::from(s.as_str()),
        }
    }

    fn from_json(value: &Value, column: &Column) -> Option<Val> {
        match (value, column.ty) {
            (Value::Null, _) if column.nullable => Some(Val::Null),
            (Value::String(s), Ty::Text) => Some(Val::Text(s.clone())),
            (Value::Number(n), Ty::Int) => n.as_i64().map(Val::Int),
            _ => None,
        }
    }
}

impl std::fmt::Display for Val {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Val::Null => f.write_str("null"),
            Val::Int(n) => write!(f, "{n}"),
            Val::Text(s) => f.write_str(s),
        }
    }
}

/// Record counts by record type, in archive order, plus blob bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub rows: [u64; TABLE_COUNT],
    pub blobs: u64,
    pub blob_bytes: u64,
}

impl Counts {
    pub fn records(&self) -> u64 {
        self.rows.iter().sum::<u64>() + self.blobs
    }

    pub fn to_json(&self) -> Value {
        let mut object = Map::new();
        for (table, n) in TABLES.iter().zip(self.rows) {
            object.insert(table.record.into(), Value::from(n));
        }
        object.insert("blob".into(), Value::from(self.blobs));
        object.insert("blob_bytes".into(), Value::from(self.blob_bytes));
        Value::Object(object)
    }

    /// The footer's counts of an archive of format `version`: exactly its
    /// tables' records, blobs and blob bytes.
    pub fn from_json(value: &Value, version: i64) -> Option<Counts> {
        let object = value.as_object()?;
        let tables = tables_of(version);
        if object.len() != tables + 2 {
            return None;
        }
        let mut counts = Counts::default();
        for (i, table) in TABLES[..tables].iter().enumerate() {
            counts.rows[i] = object.get(table.record)?.as_u64()?;
        }
        counts.blobs = object.get("blob")?.as_u64()?;
        counts.blob_bytes = object.get("blob_bytes")?.as_u64()?;
        Some(counts)
    }
}

impl std::fmt::Display for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (table, n) in TABLES.iter().zip(self.rows) {
            write!(f, "{n} {}s, ", table.record)?;
        }
        write!(f, "{} blobs ({} bytes)", self.blobs, self.blob_bytes)
    }
}

/// How many of [`TABLES`] an archive of format `version` has.
pub fn tables_of(version: i64) -> usize {
    match version {
        1 => V1_TABLES,
        2 => V2_TABLES,
        3 => V3_TABLES,
        4 => V4_TABLES,
        _ => TABLES.len(),
    }
}

/// The header line. Counts are not known before the snapshot has been
/// read, so the header carries `"counts": null` and the footer the counts.
pub fn header_line(source: &str, created_at: &str) -> String {
    serde_json::json!({
        "type": "header",
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "abstore": env!("CARGO_PKG_VERSION"),
        "source": source,
        "created_at": created_at,
        "counts": null,
    })
    .to_string()
}

pub fn blob_line(sha256: &str, bytes: &[u8]) -> String {
    serde_json::json!({
        "type": "blob",
        "sha256": sha256,
        "size": bytes.len(),
        "base64": crate::protocol::base64::encode(bytes),
    })
    .to_string()
}

pub fn footer_line(counts: &Counts, digest_hex: &str) -> String {
    serde_json::json!({
        "type": "footer",
        "counts": counts.to_json(),
        "sha256": digest_hex,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip_through_their_line() {
        let table = &TABLES[0];
        let row = vec![
            Val::Text("build".into()),
            Val::Text("b-1 \"é\"".into()),
            Val::Null,
            Val::Int(1),
            Val::Int(2),
            Val::Int(3),
            Val::Text("worker".into()),
            Val::Int(4),
            Val::Int(5),
            Val::Null,
            Val::Int(0),
            Val::Null,
            Val::Null,
        ];
        let line = table.encode(&row);
        assert!(line.starts_with(r#"{"type":"resource","kind":"build","id":"b-1 \"é\"","#));
        let value: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(table.decode(value.as_object().unwrap()).unwrap(), row);
    }

    #[test]
    fn decoding_is_strict() {
        let table = &TABLES[1];
        let decode = |text: &str| {
            let value: Value = serde_json::from_str(text).unwrap();
            table.decode(value.as_object().unwrap())
        };
        let good = r#"{"type":"event","kind":"build","resource_id":"b","seq":1,"envelope":"{}"}"#;
        assert!(decode(good).is_ok());
        let err = decode(
            r#"{"type":"event","kind":"build","resource_id":"b","seq":"1","envelope":"{}"}"#,
        );
        assert_eq!(err.unwrap_err(), "event.seq is not an integer");
        let err = decode(r#"{"type":"event","kind":"build","resource_id":"b","seq":1}"#);
        assert_eq!(err.unwrap_err(), "event lacks `envelope`");
        let err = decode(
            r#"{"type":"event","kind":"build","resource_id":"b","seq":1,"envelope":"{}","x":1}"#,
        );
        assert!(err.unwrap_err().contains("unknown members"));
        let err =
            decode(r#"{"type":"event","kind":null,"resource_id":"b","seq":1,"envelope":"{}"}"#);
        assert_eq!(err.unwrap_err(), "event.kind is not a string");
    }

    #[test]
    fn keys_order_bytewise() {
        let table = &TABLES[1];
        let row = |id: &str, seq| {
            vec![
                Val::Text("build".into()),
                Val::Text(id.into()),
                Val::Int(seq),
                Val::Text("{}".into()),
            ]
        };
        assert!(table.compare_keys(&row("B", 9), &row("a", 1)).is_lt());
        assert!(table.compare_keys(&row("a", 2), &row("a", 10)).is_lt());
        assert!(table.compare_keys(&row("a", 2), &row("a", 2)).is_eq());
    }

    #[test]
    fn counts_round_trip() {
        let counts = Counts {
            rows: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14],
            blobs: 7,
            blob_bytes: 8,
        };
        assert_eq!(
            Counts::from_json(&counts.to_json(), FORMAT_VERSION),
            Some(counts)
        );
        assert_eq!(
            Counts::from_json(&serde_json::json!({"resource": 1}), FORMAT_VERSION),
            None
        );
        // A version-1 footer has no ticket-asset counts.
        let v1 = serde_json::json!({"resource": 1, "event": 2, "artifact_head": 3, "artifact": 4,
            "stream": 5, "stream_chunk": 6, "blob": 7, "blob_bytes": 8});
        let read = Counts::from_json(&v1, 1).unwrap();
        assert_eq!(read.rows, [1, 2, 3, 4, 5, 6, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(Counts::from_json(&v1, FORMAT_VERSION), None);
        // A version-2 footer has no revoked-token count.
        let mut v2 = v1.clone();
        v2["ticket_asset_head"] = 7.into();
        v2["ticket_asset"] = 8.into();
        let read = Counts::from_json(&v2, 2).unwrap();
        assert_eq!(read.rows, [1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0]);
        assert_eq!(Counts::from_json(&v2, FORMAT_VERSION), None);
        // A version-3 footer has no hosted-ticket counts.
        let mut v3 = v2.clone();
        v3["revoked_token"] = 9.into();
        let read = Counts::from_json(&v3, 3).unwrap();
        assert_eq!(read.rows, [1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 0, 0, 0, 0]);
        assert_eq!(Counts::from_json(&v3, FORMAT_VERSION), None);
        // A version-4 footer has no ticket-history count.
        let mut v4 = v3.clone();
        for (n, record) in ["ticket_team", "ticket", "ticket_blocker", "ticket_comment"]
            .into_iter()
            .enumerate()
        {
            v4[record] = (10 + n).into();
        }
        let read = Counts::from_json(&v4, 4).unwrap();
        assert_eq!(read.rows, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 0]);
        assert_eq!(Counts::from_json(&v4, FORMAT_VERSION), None);
    }

    #[test]
    fn manifests_name_their_files_blobs() {
        let entries = r#"[{"type":"file","path":"a","size":1,"blobRef":"aa"},{"type":"dir","path":"d"},{"type":"file","path":"b","size":0,"blobRef":"bb"}]"#;
        assert_eq!(
            ticket_asset_blobs(Some(entries)),
            Ok(vec!["aa".to_owned(), "bb".to_owned()])
        );
        assert_eq!(ticket_asset_blobs(None), Ok(vec![]));
        assert!(ticket_asset_blobs(Some("[{\"type\":\"link\"}]")).is_err());
        assert!(ticket_asset_blobs(Some("{")).is_err());
    }
}
