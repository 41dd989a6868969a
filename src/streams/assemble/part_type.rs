//! The part types of the protocol (spec section 6), parsed once per part.

/// A part type the protocol names; `data-*` types share one variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PartType {
    TextStart,
    TextDelta,
    TextEnd,
    ReasoningStart,
    ReasoningDelta,
    ReasoningEnd,
    ToolInputStart,
    ToolInputDelta,
    ToolInputAvailable,
    ToolInputError,
    ToolOutputAvailable,
    ToolOutputError,
    ToolOutputDenied,
    ToolApprovalRequest,
    ToolApprovalResponse,
    StartStep,
    FinishStep,
    Start,
    Finish,
    Abort,
    Error,
    MessageMetadata,
    SourceUrl,
    SourceDocument,
    File,
    ReasoningFile,
    Custom,
    /// The `data-*` namespace.
    Data,
}

impl PartType {
    /// The type named `ty`, or `None` when the protocol does not name it (the
    /// SDK's `steering-message` and `reset-step` included).
    pub(super) fn parse(ty: &str) -> Option<Self> {
        Some(match ty {
            "text-start" => Self::TextStart,
            "text-delta" => Self::TextDelta,
            "text-end" => Self::TextEnd,
            "reasoning-start" => Self::ReasoningStart,
            "reasoning-delta" => Self::ReasoningDelta,
            "reasoning-end" => Self::ReasoningEnd,
            "tool-input-start" => Self::ToolInputStart,
            "tool-input-delta" => Self::ToolInputDelta,
            "tool-input-available" => Self::ToolInputAvailable,
            "tool-input-error" => Self::ToolInputError,
            "tool-output-available" => Self::ToolOutputAvailable,
            "tool-output-error" => Self::ToolOutputError,
            "tool-output-denied" => Self::ToolOutputDenied,
            "tool-approval-request" => Self::ToolApprovalRequest,
            "tool-approval-response" => Self::ToolApprovalResponse,
            "start-step" => Self::StartStep,
            "finish-step" => Self::FinishStep,
            "start" => Self::Start,
            "finish" => Self::Finish,
            "abort" => Self::Abort,
            "error" => Self::Error,
            "message-metadata" => Self::MessageMetadata,
            "source-url" => Self::SourceUrl,
            "source-document" => Self::SourceDocument,
            "file" => Self::File,
            "reasoning-file" => Self::ReasoningFile,
            "custom" => Self::Custom,
            _ if ty.starts_with("data-") => Self::Data,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::PartType;

    #[test]
    fn names_the_protocol_types_only() {
        assert_eq!(PartType::parse("text-start"), Some(PartType::TextStart));
        assert_eq!(PartType::parse("data-"), Some(PartType::Data));
        assert_eq!(PartType::parse("data-weather"), Some(PartType::Data));
        assert_eq!(PartType::parse("steering-message"), None);
        assert_eq!(PartType::parse("reset-step"), None);
        assert_eq!(PartType::parse("tool-input-foo"), None);
        assert_eq!(PartType::parse("Data-x"), None);
    }
}
