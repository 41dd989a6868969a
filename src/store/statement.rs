//! How a statement reaches a driver: its text and its arguments
//! ([`Statement`], [`Arg`]), what runs it ([`Statements`]: a backend's
//! connection or transaction), and how a row's columns are read
//! ([`Columns`]), and what every family's statements and row decoding
//! share ([`Fixed`], [`statement`], [`args!`], [`json_object`]). The texts
//! themselves are each family's (`<family>/sql.rs`); each backend
//! implements these traits for its driver.
//!
//! A statement is a function returning its text and its arguments, so the
//! argument order its placeholders expect is written once. Texts use
//! PostgreSQL's numbered placeholders (`$1`, `$2`, …). SQLite reads `$N` as
//! a parameter *named* `$N` and numbers such parameters by where they first
//! appear, not by `N`, so the SQLite backend binds them by name
//! (`sqlite::primitives`). A text may leave a number out: SQLite binds what
//! appears, while PostgreSQL's form fused from two texts uses every
//! argument (`events::sql::append_event`). Rows are read by position,
//! through [`Columns`]: each family's column lists fix the positions.

use std::future::Future;

use serde_json::{Map, Value};

use super::error::{StoreError, StoreResult};
use crate::protocol::ResourceKind;

/// The SQL dialect a connection speaks: a few statements are written once
/// per dialect, in their family's `sql.rs` (the `tails` query, protocol 3's
/// build digests and state events).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
}

/// A statement argument, as both drivers bind it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Arg<'a> {
    Text(&'a str),
    OptionalText(Option<&'a str>),
    Int(i64),
    OptionalInt(Option<i64>),
    /// A page's `LIMIT`; `None`: every row (SQLite takes -1, PostgreSQL
    /// `NULL`).
    Limit(Option<i64>),
}

impl<'a> From<&'a str> for Arg<'a> {
    fn from(text: &'a str) -> Self {
        Arg::Text(text)
    }
}

impl<'a> From<&'a String> for Arg<'a> {
    fn from(text: &'a String) -> Self {
        Arg::Text(text)
    }
}

impl<'a> From<Option<&'a str>> for Arg<'a> {
    fn from(text: Option<&'a str>) -> Self {
        Arg::OptionalText(text)
    }
}

impl From<i64> for Arg<'_> {
    fn from(int: i64) -> Self {
        Arg::Int(int)
    }
}

impl From<Option<i64>> for Arg<'_> {
    fn from(int: Option<i64>) -> Self {
        Arg::OptionalInt(int)
    }
}

/// A statement's text and its arguments, for `$1`, `$2`, … in order.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Statement<A> {
    pub text: &'static str,
    pub args: A,
}

impl<A: ArgList> Statement<A> {
    /// The same arguments for another text: a backend's fused or split
    /// form of a shared statement.
    pub fn with_text(self, text: &'static str) -> Self {
        Statement { text, ..self }
    }

    pub fn args(&self) -> &[Arg<'_>] {
        self.args.as_args()
    }
}

/// A statement's arguments: a fixed number, or (a listing's) any.
pub(crate) trait ArgList {
    fn as_args(&self) -> &[Arg<'_>];
}

impl<const N: usize> ArgList for [Arg<'_>; N] {
    fn as_args(&self) -> &[Arg<'_>] {
        self
    }
}

impl ArgList for Vec<Arg<'_>> {
    fn as_args(&self) -> &[Arg<'_>] {
        self
    }
}

/// What runs the shared statements: a backend's connection or transaction.
pub(crate) trait Statements: Send {
    /// The SQL dialect the statements run in.
    const DIALECT: Dialect;

    /// Run `statement`; the number of rows it changed.
    fn execute<A: ArgList + Send>(
        &mut self,
        statement: Statement<A>,
    ) -> impl Future<Output = StoreResult<u64>> + Send;

    /// The first row of `statement`'s answer, decoded.
    fn first<A, T, D>(
        &mut self,
        statement: Statement<A>,
        decode: D,
    ) -> impl Future<Output = StoreResult<Option<T>>> + Send
    where
        A: ArgList + Send,
        T: Send,
        D: FnOnce(&dyn Columns) -> StoreResult<T> + Send;

    /// Every row of `statement`'s answer, decoded.
    fn all<A, T, D>(
        &mut self,
        statement: Statement<A>,
        decode: D,
    ) -> impl Future<Output = StoreResult<Vec<T>>> + Send
    where
        A: ArgList + Send,
        T: Send,
        D: FnMut(&dyn Columns) -> StoreResult<T> + Send;

    /// Run `statement`, whatever it changed.
    fn run<A: ArgList + Send>(
        &mut self,
        statement: Statement<A>,
    ) -> impl Future<Output = StoreResult<()>> + Send {
        async move {
            self.execute(statement).await?;
            Ok(())
        }
    }

    /// Step through `statement`'s rows, handing each to `rows` as the
    /// driver reads it, until they end or `rows` stops. Not `Send` by
    /// itself: SQLite steps its statement while `rows` waits, on a thread
    /// of its own; PostgreSQL's is `Send`.
    fn each<A: ArgList + Send>(
        &mut self,
        statement: Statement<A>,
        rows: &mut impl EachRow,
    ) -> impl Future<Output = StoreResult<()>>;

    /// The statement [`Statements::each`] stepped was left with rows
    /// unread: a connection that would still carry them is not to be
    /// reused (PostgreSQL's would read and discard them for its next user).
    fn abandon(&mut self) {}
}

/// Where [`Statements::each`] hands a statement's rows, one at a time.
pub(crate) trait EachRow {
    /// One row, while the driver holds it; `true` when [`EachRow::pause`]
    /// must run before the next row is read.
    fn take(&mut self, row: &dyn Columns) -> StoreResult<bool>;

    /// Between two rows, when [`EachRow::take`] asked for it: may wait (a
    /// streamed answer sends a full piece); an error stops the statement
    /// there.
    fn pause(&mut self) -> impl Future<Output = StoreResult<()>>;
}

/// A result row's columns by position, as each driver reads them; a
/// driver's error converts into `StoreError` in its backend.
pub(crate) trait Columns {
    fn text(&self, i: usize) -> StoreResult<String>;
    fn optional_text(&self, i: usize) -> StoreResult<Option<String>>;
    /// A text column borrowed from the row.
    fn str(&self, i: usize) -> StoreResult<&str>;
    /// A text column or `NULL`, borrowed from the row.
    fn optional_str(&self, i: usize) -> StoreResult<Option<&str>>;
    fn int(&self, i: usize) -> StoreResult<i64>;
    fn optional_int(&self, i: usize) -> StoreResult<Option<i64>>;
}

// ------------------------------------------------- what the families share

/// A statement's arguments, each converted into an [`Arg`].
macro_rules! args {
    ($($arg:expr),* $(,)?) => {
        [$($crate::store::statement::Arg::from($arg)),*]
    };
}

pub(crate) use args;

/// A statement of `N` arguments.
pub(crate) type Fixed<'a, const N: usize> = Statement<[Arg<'a>; N]>;

pub(crate) fn statement<A>(text: &'static str, args: A) -> Statement<A> {
    Statement { text, args }
}

/// A stored JSON object (attributes, metadata), refused as corrupt otherwise.
pub(crate) fn json_object(text: &str, what: &str) -> StoreResult<Map<String, Value>> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(StoreError::Corrupt(format!("{what} is not a JSON object"))),
    }
}

/// A stored resource kind tag, refused as corrupt when unknown.
pub(crate) fn resource_kind(tag: &str, what: &str) -> StoreResult<ResourceKind> {
    ResourceKind::from_tag(tag)
        .ok_or_else(|| StoreError::Corrupt(format!("unknown {what} {tag:?}")))
}
