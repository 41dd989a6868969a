//! The web console's bounded reads (`crate::http::console`): what a person's page
//! lists, one page at a time, each one statement. The protocol has no
//! listing of repositories, no page of a repository's builds or sessions,
//! and its artifact and stream listings are whole answers; a page of the
//! console must stay cheap however large the store is (issue 51: a
//! repository of 10,000 builds lists its first page in ≤ 20 ms).

use async_trait::async_trait;

use crate::protocol::{ResourceKind, ResourceRef};
use crate::store::api::ConsoleReads;
use crate::store::engine::{Backend, Engine};
use crate::store::error::StoreResult;
use crate::store::records::{ResourceSummary, StoredArtifact, StreamRecord, TicketComment};
use crate::store::statement::{Arg, Dialect, Statement, Statements};

/// Repositories in id order after `after`, at most `limit`.
const REPOS: &str = "SELECT id, created_at, updated_at, last_seq FROM resources \
     WHERE kind = 'repo' AND id > $1 ORDER BY id LIMIT $2";

/// How many builds each of the repositories `$1 < repo ≤ $2` has, and when
/// the last of them changed. One pass over the builds index's range.
const BUILD_COUNTS_SQLITE: &str = "SELECT json_extract(attrs, '$.repo'), count(*), max(updated_at) \
     FROM resources WHERE kind = 'build' AND json_extract(attrs, '$.repo') > $1 \
     AND json_extract(attrs, '$.repo') <= $2 GROUP BY 1";
const BUILD_COUNTS_POSTGRES: &str = "SELECT (abstore_json_member(attrs, 'repo') COLLATE \"C\"), \
     count(*), max(updated_at) FROM resources WHERE kind = 'build' \
     AND (abstore_json_member(attrs, 'repo') COLLATE \"C\") > $1 \
     AND (abstore_json_member(attrs, 'repo') COLLATE \"C\") <= $2 GROUP BY 1";

/// A page of a repository's builds or sessions, newest first, before the
/// `(created_at, id)` cursor, whose id contains `$5`; each with its last
/// event's type and time (one lookup by primary key per row).
const CHILDREN_SQLITE: &str = "SELECT r.id, r.created_at, r.updated_at, r.last_seq, \
     r.lease_holder, r.lease_expires_at, e.type, json_extract(e.envelope, '$.ts') \
     FROM resources r LEFT JOIN events e \
     ON e.kind = r.kind AND e.resource_id = r.id AND e.seq = r.last_seq \
     WHERE r.kind = $1 AND json_extract(r.attrs, '$.repo') = $2 \
     AND (r.created_at < $3 OR (r.created_at = $3 AND r.id < $4)) AND instr(r.id, $5) > 0 \
     ORDER BY r.created_at DESC, r.id DESC LIMIT $6";
const CHILDREN_POSTGRES: &str = "SELECT r.id, r.created_at, r.updated_at, r.last_seq, \
     r.lease_holder, r.lease_expires_at, e.type, \
     split_part(substr(e.envelope, strpos(e.envelope, ',\"ts\":\"') + 7, 40), '\"', 1) \
     FROM resources r LEFT JOIN events e \
     ON e.kind = r.kind AND e.resource_id = r.id AND e.seq = r.last_seq \
     WHERE r.kind = $1 AND (abstore_json_member(r.attrs, 'repo') COLLATE \"C\") = $2 \
     AND (r.created_at < $3 OR (r.created_at = $3 AND r.id < $4)) AND strpos(r.id, $5) > 0 \
     ORDER BY r.created_at DESC, r.id DESC LIMIT $6";

/// A resource's artifact revisions, newest first, at most `limit`.
const ARTIFACTS: &str = "SELECT artifact_kind, revision, size, created_at FROM artifacts \
     WHERE kind = $1 AND resource_id = $2 ORDER BY created_at DESC, artifact_kind, revision DESC \
     LIMIT $3";

/// A scope's streams, newest first, at most `limit`.
const STREAMS: &str = concat!(
    "SELECT ",
    crate::store::streams::sql::stream_columns!(),
    " FROM streams WHERE scope_kind = $1 AND scope_id = $2 \
     ORDER BY created_at DESC, created_order DESC LIMIT $3"
);

/// A repository's name as a statement compares it: PostgreSQL compares the
/// attributes' JSON text as written, escapes included (migration 0005).
fn repo_arg(repo: &str, dialect: Dialect) -> String {
    match dialect {
        Dialect::Sqlite => repo.to_owned(),
        Dialect::Postgres => {
            let quoted = serde_json::Value::String(repo.to_owned()).to_string();
            quoted[1..quoted.len() - 1].to_owned()
        }
    }
}

/// The repository a build-count row names, back from its stored spelling.
fn repo_from_column(text: String, dialect: Dialect) -> String {
    match dialect {
        Dialect::Sqlite => text,
        Dialect::Postgres => serde_json::from_str(&format!("\"{text}\"")).unwrap_or(text),
    }
}

#[async_trait]
impl<B: Backend> ConsoleReads for Engine<B> {
    async fn repo_page(&self, after: &str, limit: i64) -> StoreResult<Vec<ResourceSummary>> {
        let after = after.to_owned();
        self.read_op(move |db| {
            Box::pin(async move {
                let mut repos = db
                    .all(
                        Statement {
                            text: REPOS,
                            args: [Arg::Text(&after), Arg::Limit(Some(limit))],
                        },
                        |row| {
                            Ok(ResourceSummary {
                                id: row.text(0)?,
                                created_at: row.int(1)?,
                                updated_at: row.int(2)?,
                                last_seq: row.int(3)?,
                                ..ResourceSummary::default()
                            })
                        },
                    )
                    .await?;
                let Some(last) = repos.last().map(|r| r.id.clone()) else {
                    return Ok(repos);
                };
                let dialect = dialect_of(db);
                let text = match dialect {
                    Dialect::Sqlite => BUILD_COUNTS_SQLITE,
                    Dialect::Postgres => BUILD_COUNTS_POSTGRES,
                };
                let (low, high) = (repo_arg(&after, dialect), repo_arg(&last, dialect));
                let counts = db
                    .all(
                        Statement {
                            text,
                            args: [Arg::Text(&low), Arg::Text(&high)],
                        },
                        |row| Ok((row.text(0)?, row.int(1)?, row.int(2)?)),
                    )
                    .await?;
                for (repo, count, last_change) in counts {
                    let repo = repo_from_column(repo, dialect);
                    if let Some(summary) = repos.iter_mut().find(|r| r.id == repo) {
                        summary.children = count;
                        summary.updated_at = summary.updated_at.max(last_change);
                    }
                }
                Ok(repos)
            })
        })
        .await
    }

    async fn child_page(
        &self,
        kind: ResourceKind,
        repo: &str,
        before: Option<(i64, String)>,
        id_contains: &str,
        limit: i64,
    ) -> StoreResult<Vec<ResourceSummary>> {
        let (repo, id_contains) = (repo.to_owned(), id_contains.to_owned());
        self.read_op(move |db| {
            Box::pin(async move {
                let dialect = dialect_of(db);
                let text = match dialect {
                    Dialect::Sqlite => CHILDREN_SQLITE,
                    Dialect::Postgres => CHILDREN_POSTGRES,
                };
                let repo = repo_arg(&repo, dialect);
                // No cursor: every row was created before the end of time.
                let (at, id) = before.unwrap_or((i64::MAX, String::new()));
                db.all(
                    Statement {
                        text,
                        args: [
                            Arg::Text(kind.tag()),
                            Arg::Text(&repo),
                            Arg::Int(at),
                            Arg::Text(&id),
                            Arg::Text(&id_contains),
                            Arg::Limit(Some(limit)),
                        ],
                    },
                    |row| {
                        Ok(ResourceSummary {
                            id: row.text(0)?,
                            created_at: row.int(1)?,
                            updated_at: row.int(2)?,
                            last_seq: row.int(3)?,
                            lease_holder: row.optional_text(4)?,
                            lease_expires_at: row.optional_int(5)?,
                            last_type: row.optional_text(6)?,
                            last_ts: row.optional_text(7)?,
                            children: 0,
                        })
                    },
                )
                .await
            })
        })
        .await
    }

    async fn artifact_page(
        &self,
        resource: &ResourceRef,
        limit: i64,
    ) -> StoreResult<Vec<StoredArtifact>> {
        let resource = resource.clone();
        self.read_op(move |db| {
            Box::pin(async move {
                db.all(
                    Statement {
                        text: ARTIFACTS,
                        args: [
                            Arg::Text(resource.kind.tag()),
                            Arg::Text(&resource.id),
                            Arg::Limit(Some(limit)),
                        ],
                    },
                    |row| {
                        Ok(StoredArtifact {
                            kind: row.text(0)?,
                            revision: row.int(1)?,
                            size: row.int(2)?,
                            created_at: row.int(3)?,
                        })
                    },
                )
                .await
            })
        })
        .await
    }

    async fn stream_page(&self, scope: &ResourceRef, limit: i64) -> StoreResult<Vec<StreamRecord>> {
        let scope = scope.clone();
        self.read_op(move |db| {
            Box::pin(async move {
                db.all(
                    Statement {
                        text: STREAMS,
                        args: [
                            Arg::Text(scope.kind.tag()),
                            Arg::Text(&scope.id),
                            Arg::Limit(Some(limit)),
                        ],
                    },
                    |row| crate::store::streams::sql::stream_row(row),
                )
                .await
            })
        })
        .await
    }

    async fn comment_page(
        &self,
        team: &str,
        ticket: &str,
        limit: i64,
    ) -> StoreResult<Vec<TicketComment>> {
        let (team, ticket) = (team.to_owned(), ticket.to_owned());
        self.read_op(move |db| {
            Box::pin(async move {
                db.all(
                    Statement {
                        text: COMMENTS,
                        args: [
                            Arg::Text(&team),
                            Arg::Text(&ticket),
                            Arg::Limit(Some(limit)),
                        ],
                    },
                    |row| {
                        let body_json = row.text(1)?;
                        Ok(TicketComment {
                            seq: row.int(0)?,
                            body: serde_json::from_str(&body_json).unwrap_or(body_json),
                            created_at: row.int(2)?,
                        })
                    },
                )
                .await
            })
        })
        .await
    }
}

/// A ticket's comments in order, at most `limit`.
const COMMENTS: &str = "SELECT seq, body_json, created_at FROM ticket_comments \
     WHERE team_key = $1 AND ticket_id = $2 ORDER BY seq LIMIT $3";

/// The dialect of a read connection.
fn dialect_of<D: Statements>(_db: &mut D) -> Dialect {
    D::DIALECT
}
