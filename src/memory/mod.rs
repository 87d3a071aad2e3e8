//! What a session remembers beyond its transcript.
//!
//! * [`usage`] — what each turn used (tokens, model) and the engine session it ran in.
//! * [`flush`] — the memory flush that runs once per compaction cycle.
//! * [`summary`] — context summaries, from a deterministic template or your model.
//! * [`checkpoint`] — checkpoints: when a session's snapshot needs refreshing, and the
//!   [`Introspector`](checkpoint::Introspector) seam.

pub mod checkpoint;
pub mod flush;
pub mod summary;
pub mod usage;
