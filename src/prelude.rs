//! The names most programs use, for `use agent_sessions::prelude::*`.

pub use crate::identity::{
    AgentId, Conversation, DefaultKeyBuilder, DmScope, KeyBuilder, PeerKind, SessionKey,
};
pub use crate::inbound::chat::{ChatMessage, ChatRole};
pub use crate::inbound::InboundMessage;
pub use crate::manager::{
    Decision, Reason, Resolution, SessionManager, Turn, TurnAction, TurnReply,
};
pub use crate::memory::usage::TurnUsage;
pub use crate::reply::payload::ReplyPayload;
pub use crate::store::entry::SessionEntry;
pub use crate::store::{
    InMemoryStore, JsonFileStore, ListFilter, SessionStore, SessionStoreExt, StoredSession,
};
