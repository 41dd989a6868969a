//! Streams' content (spec section 6): assembling a closed stream's AI SDK
//! UI Message Stream parts into the `UIMessage[]` document it deposits.

// Temporary stand-in until the assembly module lands.
pub mod assemble {
    pub struct Assembly {
        pub messages: serde_json::Value,
        pub dropped: usize,
    }

    pub fn assemble(parts: &[serde_json::Value]) -> Assembly {
        Assembly { messages: serde_json::Value::Array(Vec::new()), dropped: parts.len() }
    }
}
