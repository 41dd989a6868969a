//! Sessions' own statements: the session row (a resource with a parent
//! repository and a place among its sessions) and a repository's sessions
//! (a streamed read).

use crate::store::resources::sql::resource_columns;
use crate::store::statement::{Fixed, args, statement};

pub(crate) fn insert_session<'a>(
    id: &'a str,
    attrs: &'a str,
    now: i64,
    repo: &'a str,
    order: i64,
) -> Fixed<'a, 5> {
    const SQL: &str = "INSERT INTO resources \
         (kind, id, attrs, created_at, updated_at, last_seq, parent, created_order) \
         VALUES ('session', $1, $2, $3, $3, 0, $4, $5)";
    statement(SQL, args![id, attrs, now, repo, order])
}

/// A repository's session records, in creation order (a streamed read).
pub(crate) fn repo_sessions(repo: &str) -> Fixed<'_, 1> {
    const SQL: &str = concat!(
        "SELECT ",
        resource_columns!(),
        " FROM resources WHERE kind = 'session' AND parent = $1 ORDER BY created_at, created_order"
    );
    statement(SQL, args![repo])
}
