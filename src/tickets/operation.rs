//! The ten hosted ticket operations, by name and with their parsed input.

/// An operation's name, the last segment of `POST /tickets/{operation}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    ListReady,
    Get,
    Claim,
    Comment,
    Transition,
    Create,
    Update,
    AddBlocker,
    RemoveBlocker,
    DependencyStates,
}

impl Operation {
    pub const ALL: [Operation; 10] = [
        Operation::ListReady,
        Operation::Get,
        Operation::Claim,
        Operation::Comment,
        Operation::Transition,
        Operation::Create,
        Operation::Update,
        Operation::AddBlocker,
        Operation::RemoveBlocker,
        Operation::DependencyStates,
    ];

    /// The operation a path segment names, exactly as sent (the hosted
    /// service compares the raw path: `l%69st-ready` names none).
    pub fn from_name(name: &str) -> Option<Operation> {
        Self::ALL.into_iter().find(|op| op.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Operation::ListReady => "list-ready",
            Operation::Get => "get",
            Operation::Claim => "claim",
            Operation::Comment => "comment",
            Operation::Transition => "transition",
            Operation::Create => "create",
            Operation::Update => "update",
            Operation::AddBlocker => "add-blocker",
            Operation::RemoveBlocker => "remove-blocker",
            Operation::DependencyStates => "dependency-states",
        }
    }
}

/// An operation with its input, as the wire schema ([`super::wire`]) parsed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TicketOp {
    /// Tickets in `state` (any state when `None`) carrying every one of
    /// `labels`, in creation order.
    ListReady {
        labels: Vec<String>,
        state: Option<String>,
    },
    Get {
        id: String,
    },
    Claim {
        id: String,
    },
    Comment {
        id: String,
        body: String,
    },
    Transition {
        id: String,
        state: String,
    },
    Create {
        draft: Draft,
        /// `options.state`: overrides the team's create state.
        state: Option<String>,
        /// `options.idempotencyKey`: a repeated create adopts the ticket.
        idempotency_key: Option<String>,
    },
    Update {
        id: String,
        patch: Patch,
    },
    AddBlocker {
        id: String,
        blocker_id: String,
    },
    RemoveBlocker {
        id: String,
        blocker_id: String,
    },
    DependencyStates {
        ids: Vec<String>,
    },
}

/// A new ticket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Draft {
    pub title: String,
    pub body: String,
    pub labels: Vec<String>,
    pub blocked_by: Vec<String>,
}

/// The fields an update replaces (at least one; the wire schema checks it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Patch {
    pub title: Option<String>,
    pub body: Option<String>,
    pub labels: Option<Vec<String>>,
}

impl TicketOp {
    /// Whether the operation only reads.
    pub fn reads_only(&self) -> bool {
        matches!(
            self,
            TicketOp::ListReady { .. } | TicketOp::Get { .. } | TicketOp::DependencyStates { .. }
        )
    }
}
