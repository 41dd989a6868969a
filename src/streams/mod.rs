//! Streams' content (spec section 6): assembling a closed stream's AI SDK
//! UI Message Stream parts into the `UIMessage[]` document it deposits.
//! Storage and routes live in `store/` and `http/streams.rs`; this module is
//! pure.

pub mod assemble;
