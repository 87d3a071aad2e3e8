//! The session manager: the one object a host bot calls.
//!
//! [`SessionManager::resolve`] takes every inbound message and answers which session it
//! belongs to, whether that session is new, and why — in one atomic store update. The
//! rest of the lifecycle (close, delete, prune, labels, overrides, routes, turns,
//! threads, subagents) lives here too.
//!
//! ```
//! use agent_sessions::prelude::*;
//! use agent_sessions::{Decision, InboundMessage, Reason};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> agent_sessions::Result<()> {
//! let manager = SessionManager::new(InMemoryStore::new());
//!
//! let first = manager.resolve(&InboundMessage::direct("telegram", "42", "hello")).await?;
//! assert_eq!((first.decision, first.reason), (Decision::New, Reason::NoSession));
//!
//! let second = manager.resolve(&InboundMessage::direct("telegram", "42", "and then?")).await?;
//! assert_eq!((second.decision, second.reason), (Decision::Continue, Reason::WithinTimeout));
//! assert_eq!(second.session_id(), first.session_id());
//!
//! let reset = manager.resolve(&InboundMessage::direct("telegram", "42", "/new plan a trip")).await?;
//! assert_eq!(reset.reason, Reason::ExplicitReset);
//! assert_eq!(reset.body, "plan a trip");
//! # Ok(())
//! # }
//! ```

mod resolution;
mod session;
mod sessions;
mod transcripts;
mod turn;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::exactly_once::dedupe;
use crate::exactly_once::holders::Hold;
use crate::freshness::clock::{to_millis, Clock, SystemClock};
use crate::freshness::drift::DriftClassifier;
use crate::freshness::policy::{FreshnessPolicy, ResetConfig, ResetType, Zone};
use crate::freshness::triggers::{parse_model_hint, ModelCatalog, ResetTriggers};
use crate::identity::isolation::AgentScoped;
use crate::identity::key::{
    normalize_agent_id, normalize_channel, AgentId, DefaultKeyBuilder, KeyBuilder, SessionKey,
};
use crate::identity::workspace::Workspaces;
use crate::identity::IdentityResolver;
use crate::inbound::activation::{ActivationDecision, OwnerChatter};
use crate::inbound::chat::{EstimatedTokens, HistoryWindow, TokenCounter};
use crate::inbound::chatter::{ChatterBuffer, InMemoryChatter};
use crate::inbound::events::{SystemEventQueue, SystemEvents};
use crate::inbound::InboundMessage;
use crate::lane::{Lane, QueueSettings, Waker};
use crate::memory::checkpoint::Introspector;
use crate::memory::flush::{MemoryFlushGuard, MemoryFlushSettings};
use crate::memory::summary::{Summarizer, TemplateSummarizer};
use crate::memory::MemoryOptions;
use crate::reply::send_policy::SendPolicyConfig;
use crate::store::entry::ForkOrigin;
use crate::store::SessionStore;
use crate::transcript::follow::{self, Follow, Position, Scope};
use crate::transcript::{ArchiveReason, CheckpointReason, TranscriptRef, TranscriptStore};

pub use crate::identity::scoped::ScopedManager;
pub use resolution::{Decision, Reason, Resolution};
pub use session::Session;
pub use sessions::{DeleteOptions, OverrideKind, SessionOverride};
pub use transcripts::LogMessage;
pub use turn::{Turn, TurnAction, TurnOutcome, TurnReply, DEFAULT_RESET_ACKNOWLEDGEMENT};

/// What resolving a message a turn takes found.
#[derive(Debug)]
pub(crate) enum Resolved {
    /// The session the message belongs to, and — when the group's activation was
    /// asked — why the agent runs.
    Session(Box<Resolution>, Option<ActivationDecision>, Option<Lane>),
    /// A group message the agent does not answer under the group's activation: its
    /// origin, group metadata and route were recorded, nothing else.
    Chatter,
    /// The message was taken before (the session was left as it is).
    Seen(dedupe::Seen),
}
use self::resolution::{Policy, RunFacts, Step, StepFacts};
use crate::inbound::record::{record_meta, start_session, Inbound};

/// Decides which session each message belongs to, and keeps the sessions.
///
/// Its calls: [`turn`](Self::turn) for a whole turn (or [`resolve`](Self::resolve)
/// for a host with its own loop); [`session`](Self::session) for everything about
/// one session ([`Session`]: read, log, record, reset, close, …);
/// [`scoped`](Self::scoped) for the same on behalf of a caller who may not see
/// everything; and the jobs over many sessions ([`list`](Self::list),
/// [`prune`](Self::prune), [`checkpoint_idle_sessions`](Self::checkpoint_idle_sessions),
/// [`refresh_identity_summary`](Self::refresh_identity_summary),
/// [`follow`](Self::follow)).
///
/// Built from a [`SessionStore`] and, optionally, the other seams
/// ([`SessionManager::builder`]): a [`KeyBuilder`], a [`FreshnessPolicy`],
/// [`ResetTriggers`], a [`Clock`], a [`DriftClassifier`], a [`ModelCatalog`], a
/// [`TranscriptStore`], a [`ChatterBuffer`], a [`Summarizer`], a [`MemoryFlushGuard`],
/// an [`Introspector`], an [`IdentityResolver`], [`Workspaces`] and a [`TokenCounter`].
/// Cheap to share: wrap it in an `Arc`.
pub struct SessionManager {
    /// The parts a host can replace.
    pub(crate) seams: Seams,
    /// What the parts run with.
    pub(crate) settings: Settings,
    /// System events queued for the next turn of each session.
    pub(crate) system_events: Arc<dyn SystemEvents>,
    /// The histories of the sessions served, kept between turns.
    pub(crate) histories: crate::inbound::history_cache::HistoryCache,
    /// The summaries of what turns' windows cut, being written.
    pub(crate) cuts: Arc<crate::memory::cuts::CutSummaries>,
    /// This process's turns waiting for a session's run.
    pub(crate) waker: Waker,
    /// The runs this manager's turns hold, their leases renewed together.
    pub(crate) leases: crate::lane::Leases,
}

/// The seams of a [`SessionManager`]: each a trait object with a default.
pub(crate) struct Seams {
    pub(crate) store: Arc<dyn SessionStore>,
    pub(crate) keys: Arc<dyn KeyBuilder>,
    pub(crate) freshness: Arc<dyn FreshnessPolicy>,
    pub(crate) triggers: ResetTriggers,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) drift: Option<(Arc<dyn DriftClassifier>, f32)>,
    pub(crate) models: Option<Arc<dyn ModelCatalog>>,
    pub(crate) transcripts: Option<Arc<dyn TranscriptStore>>,
    pub(crate) history: Arc<dyn ChatterBuffer>,
    pub(crate) summarizer: Arc<dyn Summarizer>,
    pub(crate) flush_guard: Arc<dyn MemoryFlushGuard>,
    pub(crate) introspector: Option<Arc<dyn Introspector>>,
    pub(crate) identity: Option<Arc<dyn IdentityResolver>>,
    pub(crate) workspaces: Option<Workspaces>,
    pub(crate) tokens: Arc<dyn TokenCounter>,
    /// The backend the store came from: every transcript and the search index, for
    /// erasing and exporting a person.
    pub(crate) backend: Option<crate::store::Backend>,
    /// Where data keys are kept, when transcripts are sealed at rest.
    #[cfg(feature = "encryption")]
    pub(crate) data_keys: Option<Arc<crate::privacy::encryption::Keys>>,
}

/// The settings of a [`SessionManager`].
pub(crate) struct Settings {
    pub(crate) send_policy: SendPolicyConfig,
    pub(crate) silent_token: Option<String>,
    pub(crate) event_zone: Zone,
    pub(crate) summary_quiet_gap: Duration,
    pub(crate) checkpoint_every_turns: Option<u64>,
    pub(crate) agent_identities: HashMap<String, String>,
    pub(crate) default_agent: AgentId,
    pub(crate) isolated_to: Option<AgentId>,
    pub(crate) context_window: Option<u64>,
    pub(crate) message_window: Option<usize>,
    pub(crate) max_answer_attempts: u32,
    pub(crate) history_window: HistoryWindow,
    pub(crate) reset_acknowledgement: String,
    pub(crate) dedupe_window: Duration,
    pub(crate) owner_chatter: OwnerChatter,
    pub(crate) queue: QueueSettings,
    /// Set once a DM session shared by everyone has seen a second sender (warned once).
    pub(crate) shared_dm_warned: AtomicBool,
    /// Whether a session of the store was found sealed as this manager seals (or
    /// plain, as it writes plain): new sessions may be added.
    pub(crate) sealing_agrees: AtomicBool,
}

impl Settings {
    /// The model's context window for `entry`, in tokens: the one it records, else
    /// the manager's.
    pub(crate) fn budget(&self, entry: &crate::store::entry::SessionEntry) -> usize {
        let budget = entry
            .context_tokens
            .or(self.context_window)
            .unwrap_or(crate::memory::flush::DEFAULT_CONTEXT_TOKENS);
        usize::try_from(budget).unwrap_or(usize::MAX)
    }
}

impl fmt::Debug for SessionManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionManager")
            .field("freshness", &self.seams.freshness)
            .field("triggers", &self.seams.triggers)
            .field("clock", &self.seams.clock)
            .field("drift", &self.seams.drift.as_ref().map(|(c, t)| (c, t)))
            .field("models", &self.seams.models)
            .field("transcripts", &self.seams.transcripts.is_some())
            .field("send_policy", &self.settings.send_policy)
            .field("silent_token", &self.settings.silent_token)
            .field("event_zone", &self.settings.event_zone)
            .field("flush_guard", &self.seams.flush_guard)
            .field("introspector", &self.seams.introspector.is_some())
            .field("summary_quiet_gap", &self.settings.summary_quiet_gap)
            .field(
                "checkpoint_every_turns",
                &self.settings.checkpoint_every_turns,
            )
            .field("agent_identities", &self.settings.agent_identities)
            .field("default_agent", &self.settings.default_agent)
            .field("identity", &self.seams.identity.is_some())
            .field("workspaces", &self.seams.workspaces)
            .field("isolated_to", &self.settings.isolated_to)
            .field("tokens", &self.seams.tokens)
            .field("context_window", &self.settings.context_window)
            .field(
                "reset_acknowledgement",
                &self.settings.reset_acknowledgement,
            )
            .field("dedupe_window", &self.settings.dedupe_window)
            .finish_non_exhaustive()
    }
}

/// Builds a [`SessionManager`]; every seam has a default: OpenClaw's, except that DMs
/// are per channel and peer ([`DmScope`](crate::identity::key::DmScope)) and an owner's
/// unaddressed group messages are history
/// ([`owner_chatter`](SessionManagerBuilder::owner_chatter)).
///
/// ```
/// use agent_sessions::prelude::*;
/// use agent_sessions::freshness::ManualClock;
/// use agent_sessions::freshness::{ResetConfig, ResetSpec};
/// use agent_sessions::freshness::ResetTriggers;
///
/// let manager = SessionManager::builder(InMemoryStore::new())
///     .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerPeer))
///     .freshness(ResetConfig::default().reset(ResetSpec::idle(30)))
///     .reset_triggers(ResetTriggers::clawos())
///     .clock(ManualClock::at_millis(1_770_000_000_000))
///     .build()?;
/// # let _ = manager;
/// # Ok::<(), agent_sessions::Error>(())
/// ```
pub struct SessionManagerBuilder {
    pub(crate) manager: SessionManager,
    isolated_to: Option<AgentId>,
    custom_flush_guard: bool,
    /// Built for an OpenClaw state directory, whose files OpenClaw reads too.
    pub(crate) openclaw_tree: bool,
}

impl SessionManagerBuilder {
    /// How keys are built (default: [`DefaultKeyBuilder::new`]: DMs per channel and peer).
    pub fn key_builder(mut self, keys: impl KeyBuilder + 'static) -> Self {
        self.manager.seams.keys = Arc::new(keys);
        self
    }

    /// When sessions go stale (default: [`ResetConfig::default`], daily at 04:00 local).
    pub fn freshness(mut self, policy: impl FreshnessPolicy + 'static) -> Self {
        self.manager.seams.freshness = Arc::new(policy);
        self
    }

    /// Which texts reset a session (default: `/new`, `/reset`).
    pub fn reset_triggers(mut self, triggers: ResetTriggers) -> Self {
        self.manager.seams.triggers = triggers;
        self
    }

    /// The clock (default: the system clock).
    pub fn clock(mut self, clock: impl Clock + 'static) -> Self {
        self.manager.seams.clock = Arc::new(clock);
        self
    }

    /// Turns on the topic-drift gate, firing at `threshold` confidence or more (`0.8`
    /// is the kernel's usual setting).
    pub fn drift_classifier(
        mut self,
        classifier: impl DriftClassifier + 'static,
        threshold: f32,
    ) -> Self {
        self.manager.seams.drift = Some((Arc::new(classifier), threshold));
        self
    }

    /// The models a reset's hint may name (default: none; hints are ordinary text).
    pub fn model_catalog(mut self, catalog: impl ModelCatalog + 'static) -> Self {
        self.manager.seams.models = Some(Arc::new(catalog));
        self
    }

    /// Keeps transcripts, the message log and session events (default: none; the
    /// logging calls then return [`Error::NotConfigured`]).
    pub fn transcripts(mut self, transcripts: impl TranscriptStore + 'static) -> Self {
        self.manager.seams.transcripts = Some(Arc::new(transcripts));
        self
    }

    /// Serves `backend`: its transcripts, group chatter and system events become this
    /// manager's (as [`transcripts`](Self::transcripts), [`chatter`](Self::chatter)
    /// and [`system_events`](Self::system_events) would set them), and
    /// [`SessionManager::forget_person`] and [`SessionManager::export_person`] reach
    /// every transcript it keeps, archived ones too, and its search index.
    /// [`SessionManager::connect`] calls it. Give the builder the backend's own
    /// session store ([`Backend::sessions`](crate::store::Backend::sessions)).
    pub fn backend(mut self, backend: crate::store::Backend) -> Self {
        self = self
            .transcripts(backend.transcripts().clone())
            .chatter(backend.chatter().clone())
            .system_events(backend.system_events().clone());
        self.manager.seams.backend = Some(backend);
        self
    }

    /// Where group chatter is kept (default: [`InMemoryChatter`], 50 entries per group,
    /// 1,000 groups). Pass an `Arc<InMemoryChatter>` and keep a clone to change its limit
    /// at run time ([`InMemoryChatter::set_limit`]).
    pub fn chatter(mut self, history: impl ChatterBuffer + 'static) -> Self {
        self.manager.seams.history = Arc::new(history);
        self
    }

    /// Where system events wait for their session's next turn (default:
    /// [`SystemEventQueue`], in this process's memory). Give every worker of one bot
    /// the same shared queue — [`SessionManager::connect`] picks the one beside the
    /// sessions — so an event queued on one worker reaches the next turn on any.
    pub fn system_events(mut self, events: impl SystemEvents + 'static) -> Self {
        self.manager.system_events = Arc::new(events);
        self
    }

    /// Whether the agent may send, per session (default: always).
    pub fn send_policy(mut self, policy: SendPolicyConfig) -> Self {
        self.manager.settings.send_policy = policy;
        self
    }

    /// The token a model answers with to stay silent (default: `NO_REPLY`, OpenClaw's
    /// `SILENT_REPLY_TOKEN`): [`Turn::complete`] removes it, bare at either end or as
    /// `<token>` anywhere, and sends nothing when nothing else is left. A blank token
    /// keeps the default.
    pub fn silent_reply_token(mut self, token: impl Into<String>) -> Self {
        let token = token.into();
        self.manager.settings.silent_token = (!token.trim().is_empty()).then_some(token);
        self
    }

    /// The zone system-event times are written in (default: local).
    pub fn event_time_zone(mut self, zone: Zone) -> Self {
        self.manager.settings.event_zone = zone;
        self
    }

    /// How long conversations are kept in memory: the summarizer, the memory flush
    /// before compaction, checkpoints (default: [`MemoryOptions::default`]). One value:
    /// a second call replaces the first.
    pub fn memory(mut self, options: MemoryOptions) -> Self {
        let MemoryOptions {
            summarizer,
            flush_guard,
            introspector,
            checkpoint_every_turns,
            summary_quiet_gap,
        } = options;
        self.custom_flush_guard = flush_guard.is_some();
        self.manager.seams.flush_guard =
            flush_guard.unwrap_or_else(|| Arc::new(MemoryFlushSettings::default()));
        self.manager.seams.summarizer = summarizer;
        self.manager.seams.introspector = introspector;
        self.manager.settings.checkpoint_every_turns = checkpoint_every_turns;
        self.manager.settings.summary_quiet_gap = summary_quiet_gap;
        self
    }

    /// Groups an agent variant under an identity for summaries (`reggie_oc` and
    /// `reggie_fd` are both `reggie`). Unlisted agents are their own identity.
    pub fn agent_identity(mut self, agent_id: &str, identity: &str) -> Self {
        self.manager
            .settings
            .agent_identities
            .insert(normalize_agent_id(agent_id), identity.trim().to_lowercase());
        self
    }

    /// The agent for messages and sources that name none (default: `main`). Keep it in
    /// step with the key builder's default agent.
    pub fn default_agent(mut self, agent: AgentId) -> Self {
        self.manager.settings.default_agent = agent;
        self
    }

    /// How channel identifiers become people ([`SessionManager::identify`],
    /// [`SessionManager::scoped_as`]).
    pub fn identity_resolver(mut self, resolver: impl IdentityResolver + 'static) -> Self {
        self.manager.seams.identity = Some(Arc::new(resolver));
        self
    }

    /// Gives sessions workspaces ([`Session::workspace`](crate::manager::Session::workspace)).
    pub fn workspaces(mut self, workspaces: Workspaces) -> Self {
        self.manager.seams.workspaces = Some(workspaces);
        self
    }

    /// Serves `agent` only: the store and transcripts are wrapped in [`AgentScoped`], so no
    /// call of this manager reads or writes another agent's sessions or transcripts —
    /// another agent's key is
    /// [`AccessDenial::OtherAgent`](crate::AccessDenial::OtherAgent), listings and log
    /// queries show only `agent`'s. `agent` also becomes the default agent: a message that
    /// names no agent is answered as `agent`.
    ///
    /// Identity summaries then draw on this agent's transcripts only, not on sibling
    /// variants of its identity.
    pub fn isolate_to_agent(mut self, agent: AgentId) -> Self {
        self.manager.settings.default_agent = agent.clone();
        self.isolated_to = Some(agent);
        self
    }

    /// How tokens are counted for [`Turn::messages`] (default: [`EstimatedTokens`], four
    /// characters a token); plug in the model's tokenizer for exact budgets.
    pub fn token_counter(mut self, counter: impl TokenCounter + 'static) -> Self {
        self.manager.seams.tokens = Arc::new(counter);
        self
    }

    /// The model's context window, in tokens, for sessions that do not record one
    /// (their model's usage does, through `contextTokens`): the budget of
    /// [`Turn::messages`], and the window the default memory flush fires below
    /// (default: 200,000, OpenClaw's). A flush guard of your own
    /// ([`MemoryOptions::flush_guard`]) keeps its own window: this does not change it.
    pub fn context_window(mut self, tokens: u64) -> Self {
        self.manager.settings.context_window = Some(tokens);
        self
    }

    /// At most the last `messages` messages of the conversation before this turn's input
    /// in [`Turn::messages`] — a sliding window (langchain's `WindowBufferMemory`), kept
    /// from a user message on so that no reply or tool result is without what it
    /// answers. The token budget still applies within the window. Older messages are
    /// left out, with no summary standing for them; they stay in the transcript.
    /// Default: no window, the token budget alone.
    ///
    /// ```
    /// use agent_sessions::prelude::*;
    /// use agent_sessions::transcript::InMemoryTranscriptStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// let manager = SessionManager::builder(InMemoryStore::new())
    ///     .transcripts(InMemoryTranscriptStore::new())
    ///     .message_window(2)
    ///     .build()?;
    /// for text in ["one", "two", "three"] {
    ///     let turn = manager.turn(&InboundMessage::direct("telegram", "42", text)).await?;
    ///     turn.complete(format!("re: {text}")).await?;
    /// }
    /// let turn = manager.turn(&InboundMessage::direct("telegram", "42", "four")).await?;
    /// let said: Vec<String> = turn.messages().await?.into_iter().map(|m| m.content).collect();
    /// assert_eq!(said, ["three", "re: three", "four"]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn message_window(mut self, messages: usize) -> Self {
        self.manager.settings.message_window = Some(messages);
        self
    }

    /// After how many failed turns an input still waiting for a reply is set aside
    /// (default 3; at least 1).
    ///
    /// An input kept by [`Turn::fail`] with
    /// [`TurnFailure::KeepInput`](crate::exactly_once::TurnFailure) is part of every
    /// later turn's input until a reply comes; each of those turns that fails counts
    /// against it. Once it has been part of this many failed turns, the model sees a
    /// short note in its place (that it was set aside unanswered, and its first 200
    /// characters) instead of being asked again — a provider that keeps failing on it
    /// cannot wedge the session. The transcript keeps the input and the marks; the
    /// count is read from them.
    ///
    /// ```
    /// use agent_sessions::exactly_once::TurnFailure;
    /// use agent_sessions::prelude::*;
    /// use agent_sessions::transcript::InMemoryTranscriptStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// let manager = SessionManager::builder(InMemoryStore::new())
    ///     .transcripts(InMemoryTranscriptStore::new())
    ///     .max_answer_attempts(2)
    ///     .build()?;
    /// let say = |text: &str| InboundMessage::direct("telegram", "42", text);
    /// // The provider is down twice: "Book a table" was part of both failed turns.
    /// manager.turn(&say("Book a table")).await?.fail(TurnFailure::KeepInput).await?;
    /// manager.turn(&say("Hello?")).await?.fail(TurnFailure::KeepInput).await?;
    ///
    /// let turn = manager.turn(&say("Are you there?")).await?;
    /// let said: Vec<String> = turn.messages().await?.into_iter().map(|m| m.content).collect();
    /// assert!(said[0].starts_with("[This earlier message was set aside unanswered after 2"));
    /// assert!(said[0].contains("Book a table"));
    /// assert_eq!(said[1..], ["Hello?", "Are you there?"]); // one failure each so far
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_answer_attempts(mut self, attempts: u32) -> Self {
        self.manager.settings.max_answer_attempts = attempts.max(1);
        self
    }

    /// How the history in [`Turn::messages`] gives way once the conversation outgrows
    /// the token budget (default: [`HistoryWindow::Stable`], cut back to half the room
    /// in one block, so that a provider's prompt cache can reuse each turn's input until
    /// the next cut; [`HistoryWindow::Sliding`] keeps the newest that fit every turn).
    /// A [`message_window`](Self::message_window) slides by the count whatever this is.
    ///
    /// ```
    /// use agent_sessions::inbound::HistoryWindow;
    /// use agent_sessions::prelude::*;
    ///
    /// let manager = SessionManager::builder(InMemoryStore::new())
    ///     .history_window(HistoryWindow::Sliding)
    ///     .build()?;
    /// # Ok::<(), agent_sessions::Error>(())
    /// ```
    pub fn history_window(mut self, window: HistoryWindow) -> Self {
        self.manager.settings.history_window = window;
        self
    }

    /// What a bare reset (`/new` with nothing after it) answers instead of calling the
    /// model (default: [`DEFAULT_RESET_ACKNOWLEDGEMENT`]).
    pub fn reset_acknowledgement(mut self, text: impl Into<String>) -> Self {
        self.manager.settings.reset_acknowledgement = text.into();
        self
    }

    /// How long a message the channel delivers again is recognised by its message id
    /// and not answered again (default: [`DEFAULT_DEDUPE_WINDOW`](crate::exactly_once::DEFAULT_DEDUPE_WINDOW), 20 minutes, as
    /// OpenClaw; `Duration::ZERO` turns deduplication off). Only messages that carry a
    /// message id ([`InboundMessage::with_message_id`]) are deduplicated; see
    /// [`TurnAction::Duplicate`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use agent_sessions::prelude::*;
    /// use agent_sessions::transcript::InMemoryTranscriptStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// let manager = SessionManager::builder(InMemoryStore::new())
    ///     .transcripts(InMemoryTranscriptStore::new())
    ///     .dedupe_window(Duration::from_secs(3600))
    ///     .build()?;
    /// let update = InboundMessage::direct("telegram", "42", "hi").with_message_id("1001");
    /// let first = manager.turn(&update).await?;
    /// first.complete("Hello!").await?;
    /// // Telegram sends the update again: nothing runs, nothing is logged.
    /// let again = manager.turn(&update).await?;
    /// assert_eq!(again.action(), &TurnAction::Duplicate);
    /// assert!(again.complete("Hello!").await?.is_empty());
    /// # Ok(())
    /// # }
    /// ```
    pub fn dedupe_window(mut self, window: Duration) -> Self {
        self.manager.settings.dedupe_window = window;
        self
    }

    /// What a message that arrives during a run of its session does: the queue mode,
    /// its debounce, cap and drop policy, per channel (default
    /// [`QueueSettings::default`]: `collect`, 1 s, 20, `summarize`). A session's own
    /// `/queue` setting wins. See [`crate::lane`]. A mode or drop policy this version
    /// does not know ([`QueueMode::Other`](crate::lane::QueueMode::Other)) makes
    /// [`build`](Self::build) fail with [`Error::InvalidOption`].
    ///
    /// ```
    /// use agent_sessions::lane::{QueueMode, QueueSettings};
    /// use agent_sessions::prelude::*;
    ///
    /// let manager = SessionManager::builder(InMemoryStore::new())
    ///     .queue(QueueSettings::default().mode(QueueMode::Followup))
    ///     .build()?;
    /// # Ok::<(), agent_sessions::Error>(())
    /// ```
    pub fn queue(mut self, settings: QueueSettings) -> Self {
        self.manager.settings.queue = settings;
        self
    }

    /// What an owner's group message that does not address the agent does: kept as
    /// history like anyone's (the default: in a group the agent answers only when
    /// addressed), or answered, as OpenClaw does ([`OwnerChatter::Answer`]; a manager
    /// configured from `openclaw.json` answers them).
    ///
    /// ```
    /// use agent_sessions::inbound::OwnerChatter;
    /// use agent_sessions::manager::TurnAction;
    /// use agent_sessions::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// let owner = InboundMessage::group("telegram", "-100", "7", "note to self").from_owner();
    /// let default = SessionManager::builder(InMemoryStore::new()).build()?;
    /// assert_eq!(default.turn(&owner).await?.action(), &TurnAction::StaySilent);
    /// let answering = SessionManager::builder(InMemoryStore::new())
    ///     .owner_chatter(OwnerChatter::Answer)
    ///     .build()?;
    /// assert_eq!(answering.turn(&owner).await?.action(), &TurnAction::Answer);
    /// # Ok(())
    /// # }
    /// ```
    pub fn owner_chatter(mut self, owner_chatter: OwnerChatter) -> Self {
        self.manager.settings.owner_chatter = owner_chatter;
        self
    }

    /// The manager, after checking that every seam a configured feature needs is there:
    /// checkpoints (an introspector, `checkpoint_every_turns`) read and write the
    /// session's transcript, so they need a transcript store, and a turn limit needs an
    /// introspector. A missing one is [`Error::NotConfigured`], named.
    ///
    /// ```
    /// use agent_sessions::prelude::*;
    /// use agent_sessions::Error;
    ///
    /// use agent_sessions::memory::MemoryOptions;
    ///
    /// let every_ten = MemoryOptions::new().checkpoint_every_turns(10);
    /// let refused = SessionManager::builder(InMemoryStore::new()).memory(every_ten).build();
    /// assert!(matches!(refused, Err(Error::NotConfigured { .. })));
    /// ```
    pub fn build(self) -> Result<SessionManager> {
        let seams = &self.manager.seams;
        let settings = &self.manager.settings;
        let needs = |what: &'static str| Err(Error::NotConfigured { what });
        if seams.introspector.is_some() && seams.transcripts.is_none() {
            return needs(
                "a transcript store for checkpoints (SessionManagerBuilder::transcripts)",
            );
        }
        settings.queue.check()?;
        #[cfg(feature = "encryption")]
        crate::privacy::encryption::check(seams, self.openclaw_tree)?;
        if settings.checkpoint_every_turns.is_some() {
            if seams.introspector.is_none() {
                return needs(
                    "an introspector for checkpoint_every_turns (MemoryOptions::introspector)",
                );
            }
            if seams.transcripts.is_none() {
                return needs(
                    "a transcript store for checkpoint_every_turns (SessionManagerBuilder::transcripts)",
                );
            }
        }
        Ok(self.assemble())
    }

    /// The manager as configured, checked or not.
    fn assemble(self) -> SessionManager {
        let mut manager = self.manager;
        if let (Some(window), false) = (manager.settings.context_window, self.custom_flush_guard) {
            manager.seams.flush_guard = Arc::new(MemoryFlushSettings {
                context_window_tokens: window,
                ..MemoryFlushSettings::default()
            });
        }
        #[cfg(feature = "encryption")]
        crate::privacy::encryption::seal(&mut manager);
        if let Some(agent) = self.isolated_to {
            manager.seams.store = Arc::new(AgentScoped::new(agent.clone(), manager.seams.store));
            manager.seams.transcripts = manager
                .seams
                .transcripts
                .map(|t| Arc::new(AgentScoped::new(agent.clone(), t)) as Arc<dyn TranscriptStore>);
            manager.settings.isolated_to = Some(agent);
        }
        manager
    }
}

/// Whether a call may go on with the session under a key, given its current entry:
/// asked inside the store update that follows.
pub(super) type Admission<'a> =
    dyn Fn(&SessionKey, Option<&crate::store::entry::SessionEntry>) -> Result<()> + Sync + 'a;

/// Lets every call go on: the host's own calls.
pub(crate) fn anyone(_: &SessionKey, _: Option<&crate::store::entry::SessionEntry>) -> Result<()> {
    Ok(())
}

/// How a message is resolved: what the one atomic store update that resolves its
/// session does besides.
#[derive(Clone, Copy)]
pub(super) enum Mode<'a> {
    /// The session alone ([`SessionManager::resolve`]), when `admit` lets the caller
    /// go on with the key and its current entry — asked inside the update, so nothing
    /// changes between the check and the write.
    Resolve { admit: &'a Admission<'a> },
    /// A turn ([`SessionManager::turn`]), on the same terms: a group message is first
    /// routed by the group's activation (one the agent does not answer is only recorded
    /// as chatter), a message with an id (`intake`) that the session took before is
    /// not resolved again, and a message that is not a bare reset starts a run (the
    /// status becomes `running`, the last run aborted until the turn completes).
    Turn {
        admit: &'a Admission<'a>,
        intake: Option<&'a dedupe::Intake>,
        /// The turn's run, recorded in the session while it runs.
        run: &'a Hold,
        /// A queued message (its queue id) the turn waits with instead of queuing its
        /// own: one whose waiter is gone.
        adopt: Option<&'a str>,
    },
}

impl Mode<'_> {
    fn admit(&self) -> &Admission<'_> {
        match self {
            Mode::Resolve { admit } | Mode::Turn { admit, .. } => admit,
        }
    }

    fn is_turn(&self) -> bool {
        matches!(self, Mode::Turn { .. })
    }

    fn intake(&self) -> Option<&dedupe::Intake> {
        match self {
            Mode::Resolve { .. } => None,
            Mode::Turn { intake, .. } => *intake,
        }
    }

    fn run(&self) -> Option<&Hold> {
        match self {
            Mode::Resolve { .. } => None,
            Mode::Turn { run, .. } => Some(run),
        }
    }

    fn adopt(&self) -> Option<&str> {
        match self {
            Mode::Resolve { .. } => None,
            Mode::Turn { adopt, .. } => *adopt,
        }
    }
}

fn present(value: Option<&str>) -> Option<&str> {
    value.map(str::trim).filter(|v| !v.is_empty())
}

/// The agent `message` names, else `default`.
fn agent_of(message: &InboundMessage, default: &AgentId) -> AgentId {
    present(message.agent_id.as_deref()).map_or_else(|| default.clone(), AgentId::normalize)
}

impl SessionManager {
    /// A manager over `store` with every other seam at its default.
    pub fn new(store: impl SessionStore + 'static) -> Self {
        // Every seam at its default needs nothing else: nothing to check.
        SessionManager::builder(store).assemble()
    }

    /// A builder over `store`. To share one store with other code, pass an
    /// `Arc<YourStore>`: `Arc` of a store is a store.
    pub fn builder(store: impl SessionStore + 'static) -> SessionManagerBuilder {
        SessionManagerBuilder {
            manager: SessionManager {
                seams: Seams {
                    store: Arc::new(store),
                    keys: Arc::new(DefaultKeyBuilder::new()),
                    freshness: Arc::new(ResetConfig::default()),
                    triggers: ResetTriggers::default(),
                    clock: Arc::new(SystemClock),
                    drift: None,
                    models: None,
                    transcripts: None,
                    history: Arc::new(InMemoryChatter::default()),
                    summarizer: Arc::new(TemplateSummarizer),
                    flush_guard: Arc::new(MemoryFlushSettings::default()),
                    introspector: None,
                    identity: None,
                    workspaces: None,
                    tokens: Arc::new(EstimatedTokens),
                    backend: None,
                    #[cfg(feature = "encryption")]
                    data_keys: None,
                },
                settings: Settings {
                    send_policy: SendPolicyConfig::default(),
                    silent_token: None,
                    event_zone: Zone::Local,
                    summary_quiet_gap: crate::memory::DEFAULT_SUMMARY_QUIET_GAP,
                    checkpoint_every_turns: None,
                    agent_identities: HashMap::new(),
                    default_agent: AgentId::main(),
                    isolated_to: None,
                    context_window: None,
                    reset_acknowledgement: turn::DEFAULT_RESET_ACKNOWLEDGEMENT.to_owned(),
                    dedupe_window: dedupe::DEFAULT_DEDUPE_WINDOW,
                    queue: QueueSettings::default(),
                    owner_chatter: OwnerChatter::default(),
                    message_window: None,
                    max_answer_attempts: crate::inbound::chat::DEFAULT_MAX_ANSWER_ATTEMPTS,
                    history_window: HistoryWindow::default(),
                    shared_dm_warned: AtomicBool::new(false),
                    sealing_agrees: AtomicBool::new(false),
                },
                system_events: Arc::new(SystemEventQueue::default()),
                histories: crate::inbound::history_cache::HistoryCache::default(),
                cuts: Arc::default(),
                waker: Waker::default(),
                leases: crate::lane::Leases::default(),
            },
            isolated_to: None,
            custom_flush_guard: false,
            openclaw_tree: false,
        }
    }

    /// A builder over the backend `url` names — sessions, transcripts, group chatter and
    /// system events —
    /// so that switching from OpenClaw's files to SQLite or PostgreSQL is one string:
    /// `json:~/.openclaw`, `sqlite:sessions.db`, `postgres://bot@db/sessions`
    /// (see [`StoreUrl`](crate::store::StoreUrl)).
    ///
    /// ```
    /// use agent_sessions::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let url = format!("json:{}", dir.path().display());
    /// let manager = SessionManager::connect(&url).await?.build()?;
    /// manager.resolve(&InboundMessage::direct("telegram", "42", "hi")).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(url: &str) -> Result<SessionManagerBuilder> {
        let backend = crate::store::Backend::open(url).await?;
        Ok(SessionManager::builder(backend.sessions().clone()).backend(backend))
    }

    /// The search index of the manager's backend, for a
    /// [`Search`](crate::transcript::search::Search) synced from the backend's
    /// transcripts as stored. On a manager with encryption, an index that keeps each
    /// message's words as keyed hashes and its text sealed, and opens what it returns
    /// (see [`privacy::encryption`](crate::privacy::encryption)).
    ///
    /// [`Error::NotConfigured`] without a backend, or for a manager isolated to one
    /// agent (the index holds every agent's messages).
    ///
    /// ```
    /// use agent_sessions::prelude::*;
    /// use agent_sessions::manager::LogMessage;
    /// use agent_sessions::store::Backend;
    /// use agent_sessions::transcript::search::{Search, SearchQuery};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let backend = Backend::open(&format!("json:{}", dir.path().display())).await?;
    /// let manager = SessionManager::builder(backend.sessions().clone())
    ///     .backend(backend.clone())
    ///     .build()?;
    /// let message = InboundMessage::direct("sms", "+15550100", "When is my next roster?");
    /// let resolution = manager.resolve(&message).await?;
    /// manager.session(&resolution.key).log_message(LogMessage::from_inbound(&message)).await?;
    ///
    /// let search = Search::shared(manager.search_index().await?);
    /// search.sync(&**backend.transcripts()).await?;
    /// let hits = search.search(&SearchQuery::text("rosters")).await?;
    /// assert_eq!(hits[0].message.text, "When is my next roster?");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn search_index(&self) -> Result<Arc<dyn crate::transcript::search::SearchIndex>> {
        if self.settings.isolated_to.is_some() {
            return Err(Error::NotConfigured {
                what: "a search index scoped to one agent (the backend's holds every agent's messages)",
            });
        }
        self.backend_index().await?.ok_or(Error::NotConfigured {
            what: "the backend the search index is in (SessionManager::connect or SessionManagerBuilder::backend)",
        })
    }

    /// The backend's search index, sealed when the manager seals; `None` without a
    /// backend.
    pub(crate) async fn backend_index(
        &self,
    ) -> Result<Option<Arc<dyn crate::transcript::search::SearchIndex>>> {
        let Some(backend) = &self.seams.backend else {
            return Ok(None);
        };
        let index = backend.search_index().await?;
        #[cfg(feature = "encryption")]
        if let Some(keys) = &self.seams.data_keys {
            return Ok(Some(Arc::new(
                crate::privacy::encryption::SealedIndex::new(
                    index,
                    keys.clone(),
                    backend.transcripts().clone(),
                ),
            )));
        }
        Ok(Some(index))
    }

    /// The store.
    pub fn store(&self) -> &dyn SessionStore {
        &*self.seams.store
    }

    /// The transcript store, as the manager reads it — on a manager that seals
    /// ([`SessionManagerBuilder::encryption`], feature `encryption`), its lines opened;
    /// `None` without one.
    ///
    /// ```
    /// use agent_sessions::prelude::*;
    /// use agent_sessions::transcript::InMemoryTranscriptStore;
    ///
    /// let manager = SessionManager::builder(InMemoryStore::new())
    ///     .transcripts(InMemoryTranscriptStore::new())
    ///     .build()?;
    /// assert!(manager.transcripts().is_some());
    /// assert!(SessionManager::new(InMemoryStore::new()).transcripts().is_none());
    /// # Ok::<(), agent_sessions::Error>(())
    /// ```
    pub fn transcripts(&self) -> Option<&dyn TranscriptStore> {
        self.seams.transcripts.as_deref()
    }

    /// The agent whose sessions a key without an agent belongs to (`main` unless
    /// [`SessionManagerBuilder::default_agent`] or
    /// [`SessionManagerBuilder::isolate_to_agent`] set another).
    ///
    /// ```
    /// use agent_sessions::prelude::*;
    ///
    /// let manager = SessionManager::new(InMemoryStore::new());
    /// assert_eq!(manager.default_agent().as_str(), "main");
    /// ```
    pub fn default_agent(&self) -> &AgentId {
        &self.settings.default_agent
    }

    /// The clock.
    pub fn clock(&self) -> &dyn Clock {
        &*self.seams.clock
    }

    /// The session key `message` belongs to: its explicit key (placed under its agent),
    /// else the key builder's.
    pub fn key_for(&self, message: &InboundMessage) -> Result<SessionKey> {
        match present(message.session_key.as_deref()) {
            Some(explicit) => {
                SessionKey::for_agent(&agent_of(message, &self.settings.default_agent), explicit)
            }
            None => {
                let mut conversation = message.conversation();
                // A manager isolated to an agent answers as that agent.
                if conversation.agent_id.is_none() && self.settings.isolated_to.is_some() {
                    conversation.agent_id = Some(self.settings.default_agent.to_string());
                }
                self.seams.keys.build(&conversation)
            }
        }
    }

    /// Decides which session `message` belongs to and records the message in it.
    ///
    /// The decision policy, in order (over OpenClaw's freshness rules):
    ///
    /// 1. an authorised reset trigger → new (`explicit_reset`);
    /// 2. no session for the key → new (`no_session`);
    /// 3. the session is closed → new (`session_closed`);
    /// 4. the session is stale (daily boundary or idle window) → new (`timeout`);
    /// 5. the drift gate, if configured, fires → new (`topic_drift`);
    /// 6. else continue (`first_message` for a prepared session, else `within_timeout`).
    ///
    /// The message is recorded in the same atomic update that decides (activity time,
    /// counts, preview, reply route, origin, group metadata), so one message costs one
    /// store update, and two messages racing for a new key create exactly one session.
    pub async fn resolve(&self, message: &InboundMessage) -> Result<Resolution> {
        self.resolve_as(message, &anyone).await
    }

    /// Whether the next message like `message` would start a new session over `entry`
    /// instead of continuing it: the session is closed, has no id, or is stale now by
    /// the freshness policy (daily boundary, idle window). Reset triggers and topic drift
    /// are not considered; nothing is written.
    ///
    /// Channel adapters that keep their own state in the session entry use it to treat
    /// that state as gone before the message that replaces the session arrives.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use agent_sessions::prelude::*;
    /// use agent_sessions::freshness::ManualClock;
    /// use agent_sessions::freshness::{ResetConfig, ResetSpec};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// let clock = ManualClock::at_millis(1_771_840_800_000);
    /// let manager = SessionManager::builder(InMemoryStore::new())
    ///     .freshness(ResetConfig::default().reset(ResetSpec::idle(30)))
    ///     .clock(clock.clone())
    ///     .build()?;
    /// let message = InboundMessage::direct("telegram", "42", "hi");
    /// let entry = manager.resolve(&message).await?.entry().clone();
    /// assert!(!manager.is_expired(&message, &entry)?);
    /// clock.advance(Duration::from_secs(31 * 60));
    /// assert!(manager.is_expired(&message, &entry)?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_expired(
        &self,
        message: &InboundMessage,
        entry: &crate::store::entry::SessionEntry,
    ) -> Result<bool> {
        let key = self.key_for(message)?;
        let channel = message
            .group_resolution()
            .map(|g| g.channel)
            .or_else(|| normalize_channel(&message.channel));
        let policy = Policy {
            freshness: &*self.seams.freshness,
            reset_type: ResetType::of(&key, message.is_group(), message.is_thread()),
            channel: channel.as_deref(),
            reset_triggered: false,
        };
        let (decision, _) = policy.decide(&key, Some(entry), self.seams.clock.now(), None);
        Ok(decision == Decision::New)
    }

    /// Follows `scope` — one session, a key across its sessions, an agent, or the whole
    /// store — from `from`: every line the sessions' transcripts gain, from any
    /// process, and the sessions as the follower comes to them (see
    /// the [`crate::transcript::follow`] module for what each scope returns and where each resumes).
    ///
    /// Needs a transcript store ([`Error::NotConfigured`] otherwise). A session id that
    /// no session has, and a position the scope does not start from (a time for a key),
    /// are [`Error::InvalidId`]; an offset that is not where an event starts is
    /// [`Error::InvalidOffset`] at the first read. A manager serving one agent
    /// ([`SessionManagerBuilder::isolate_to_agent`]) refuses another agent with
    /// [`Error::AccessDenied`] and follows its own agent for [`Scope::Store`].
    ///
    /// ```
    /// use agent_sessions::transcript::follow::{Position, Scope, Update};
    /// use agent_sessions::prelude::*;
    /// use agent_sessions::transcript::InMemoryTranscriptStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// let manager = SessionManager::builder(InMemoryStore::new())
    ///     .transcripts(InMemoryTranscriptStore::new())
    ///     .build()?;
    /// let mut everything = manager.follow(Scope::Agent(AgentId::main()), Position::Now).await?;
    ///
    /// let turn = manager.turn(&InboundMessage::direct("telegram", "42", "hi")).await?;
    /// turn.complete("hello!").await?;
    /// let Update::Session { session, new, .. } = everything.next().await? else { unreachable!() };
    /// assert!(new);
    /// assert_eq!(session.key.as_str(), "agent:main:telegram:dm:42");
    /// let Update::Events { events, .. } = everything.next().await? else { unreachable!() };
    /// assert_eq!(events.len(), 2, "the message and the reply");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn follow(&self, scope: Scope, from: Position) -> Result<Follow> {
        let transcripts = self.seams.transcripts.clone().ok_or(Error::NotConfigured {
            what: "a transcript store (SessionManagerBuilder::transcripts)",
        })?;
        let sources = follow::Sources {
            sessions: self.seams.store.clone(),
            transcripts,
            clock: self.seams.clock.clone(),
            default_agent: self.settings.default_agent.clone(),
        };
        match scope {
            Scope::Session(id) => {
                let session = self
                    .find_session(&id, crate::store::StatusFilter::Any)
                    .await?
                    .ok_or_else(|| {
                        Error::invalid_id(crate::IdKind::SessionId, &id, "no session has this id")
                    })?;
                Follow::session(sources, &session, from)
            }
            Scope::Key(key) => Follow::key(sources, &key, from).await,
            Scope::Agent(agent) => {
                if self
                    .settings
                    .isolated_to
                    .as_ref()
                    .is_some_and(|own| *own != agent)
                {
                    return Err(Error::AccessDenied {
                        reason: crate::error::AccessDenial::OtherAgent,
                        resource: format!("the sessions of agent {agent}"),
                    });
                }
                Follow::agents(sources, Some(agent), from)
            }
            Scope::Store => Follow::agents(sources, self.settings.isolated_to.clone(), from),
        }
    }

    /// [`resolve`](Self::resolve), when `admit` allows the key and its current entry
    /// (see [`Mode::Resolve`]).
    pub(crate) async fn resolve_as(
        &self,
        message: &InboundMessage,
        admit: &Admission<'_>,
    ) -> Result<Resolution> {
        match self.resolve_in(message, Mode::Resolve { admit }).await? {
            Resolved::Session(resolution, ..) => Ok(*resolution),
            // Only a turn takes a message with an intake, or asks the group's activation.
            Resolved::Seen(_) | Resolved::Chatter => Err(Error::NotFound {
                key: self.key_for(message)?,
            }),
        }
    }

    /// Resolves `message` as `mode` says, in one atomic update of its session.
    #[tracing::instrument(
        name = "resolve",
        target = "agent_sessions",
        level = "info",
        skip_all,
        fields(
            channel = %message.channel,
            key = tracing::field::Empty,
            agent = tracing::field::Empty,
            session_id = tracing::field::Empty,
            decision = tracing::field::Empty,
            reason = tracing::field::Empty,
        )
    )]
    pub(crate) async fn resolve_in(
        &self,
        message: &InboundMessage,
        mode: Mode<'_>,
    ) -> Result<Resolved> {
        let resolved: Result<Resolved> = Box::pin(async {
        let gate = mode.is_turn() && message.is_group();
        let (admit, intake) = (mode.admit(), mode.intake());
        let key = self.key_for(message)?;
        self.refuse_other_sealing().await?;
        let span = tracing::Span::current();
        span.record("key", tracing::field::display(&key));
        span.record("agent", key.agent_id());
        let group = message.group_resolution();
        let reset_type = ResetType::of(&key, message.is_group(), message.is_thread());
        let channel = group
            .as_ref()
            .map(|g| g.channel.clone())
            .or_else(|| normalize_channel(&message.channel));
        let trigger = self.seams.triggers.detect(message);
        let hint = trigger
            .as_ref()
            .filter(|t| !t.body.is_empty())
            .zip(self.seams.models.as_deref())
            .and_then(|(t, models)| parse_model_hint(models, &t.body));
        let body = match (&hint, &trigger) {
            (Some(hint), _) => hint.body.clone(),
            (None, Some(trigger)) => trigger.body.clone(),
            (None, None) => message.body.clone(),
        };
        let inbound_id = intake.map(|intake| intake.id.as_str());
        // A reset trigger alone ("/new"), without text or files after it.
        let bare_reset =
            trigger.is_some() && body.trim().is_empty() && message.attachments.is_empty();
        let run = mode
            .run()
            .filter(|_| !bare_reset)
            .map(|hold| RunFacts {
                holder: hold.holder(),
                inbound_id,
                adopt: mode.adopt(),
                queue: &self.settings.queue,
            });
        let policy = Policy {
            freshness: &*self.seams.freshness,
            reset_type,
            channel: channel.as_deref(),
            reset_triggered: trigger.is_some(),
        };
        let drifted = self.drifted_session(&key, message, &policy, gate).await?;
        let fork = fork_origin(&*self.seams.store, &self.settings.default_agent, message, &key, admit)
            .await?;

        let now = self.seams.clock.now();
        let agent_identity = key.agent_id().map(|agent| self.agent_identity_of(agent));
        let window = self.settings.dedupe_window;
        let facts = StepFacts {
            inbound: Inbound {
                key: &key,
                message,
                group: group.as_ref(),
                body: &body,
                model: hint.as_ref().map(|h| &h.model),
                fork: fork.as_ref(),
                agent_identity: agent_identity.as_deref(),
                people: &*self.seams.keys,
                now_ms: to_millis(now),
            },
            policy: &policy,
            now,
            drifted: drifted.as_deref(),
            run,
            // A bare reset is all done here; other messages are logged next.
            dedupe: intake
                .map(|intake| (intake, window, bare_reset)),
        };
        let mut seen = dedupe::Seen::New;
        let mut step = None;
        let mut lane = None;
        let mut routed = None;
        let stored = self
            .seams
            .store
            .apply(&key, &mut |slot, _| {
                crate::privacy::refuse_sealed(&key, slot.as_ref(), self.seals())?;
                admit(&key, slot.as_ref())?;
                step = None;
                routed = None;
                if gate {
                    let activation = slot.as_ref().and_then(|e| e.group_activation.as_ref());
                    let decided = crate::inbound::activation::decide(
                        message,
                        activation,
                        self.settings.owner_chatter,
                    );
                    if !decided.trigger {
                        // Chatter: recorded without counting a message or moving
                        // `updatedAt`, as OpenClaw records unanswered group messages.
                        let now_ms = facts.inbound.now_ms;
                        let entry = slot.get_or_insert_with(|| start_session(None, now_ms));
                        record_meta(entry, message, group.as_ref(), &key);
                        return Ok(());
                    }
                    routed = Some(decided);
                }
                if let Some(intake) = intake {
                    seen = dedupe::check(slot.as_ref(), intake, facts.inbound.now_ms, window);
                    if seen != dedupe::Seen::New {
                        // Seen before: the session is left as it is, nothing written.
                        return Ok(());
                    }
                }
                let (mut entry, decided) = facts.step(slot.take());
                // The session's turn lane is decided here, in the same update.
                lane = facts.lane(&mut entry);
                *slot = Some(entry);
                step = Some(decided);
                Ok(())
            })
            .await?;
        if seen != dedupe::Seen::New {
            return Ok(Resolved::Seen(seen));
        }
        if gate && routed.is_none() {
            return Ok(Resolved::Chatter);
        }
        let (Some(mut session), Some(step)) = (stored, step) else {
            return Err(Error::NotFound { key });
        };
        let Step {
            decision,
            reason,
            previous,
            system_sent,
            aborted_last_run,
            expires_at,
            shared_by,
        } = step;
        tracing::Span::current().record("session_id", session.entry.session_id.as_str());
        crate::ops::telemetry::decided(decision.as_str(), reason.as_str());
        if let Some(senders) = shared_by {
            shared_dm_session(&self.settings.shared_dm_warned, &key, senders);
        }
        tracing::debug!(key = %key, session_id = %session.entry.session_id, decision = ?decision, reason = %reason, "session resolved");
        if decision == Decision::New {
            if let Some(updated) = self
                .after_new_session(&key, &session.entry, previous.as_ref(), reason)
                .await?
            {
                session = updated;
            }
        }
        Ok(Resolved::Session(
            Box::new(Resolution {
                key,
                session,
                previous,
                decision,
                reason,
                reset_triggered: trigger.is_some(),
                body,
                system_sent,
                aborted_last_run,
                model_override: hint.map(|h| h.model),
                expires_at,
            }),
            routed,
            lane,
        ))
        })
        .await;
        if let Err(error) = &resolved {
            crate::ops::telemetry::failed(error);
        }
        resolved
    }

    /// What follows a new session: it inherits its siblings' identity summary; the
    /// session it replaced gets a `new_session` checkpoint (with an introspector, whose
    /// working memory carries over); and after an explicit reset the old transcript is
    /// archived. Returns the session as it is now when any of this changed its entry.
    pub(crate) async fn after_new_session(
        &self,
        key: &SessionKey,
        entry: &crate::store::entry::SessionEntry,
        previous: Option<&crate::store::entry::SessionEntry>,
        reason: Reason,
    ) -> Result<Option<crate::store::StoredSession>> {
        let mut updated = self.seed_identity_summary(key, entry).await?;
        let Some(old) = previous else {
            return Ok(updated);
        };
        let transcript = TranscriptRef::of(key, old, &self.settings.default_agent);
        if self.seams.introspector.is_some()
            && has_transcript(self.seams.transcripts.as_deref(), old, &transcript).await
        {
            match self
                .introspect(key, &transcript, old, CheckpointReason::NewSession)
                .await
            {
                Ok((Some(outcome), _)) => {
                    self.apply_introspection(key, outcome, false).await?;
                    updated = self.seams.store.get(key).await?;
                }
                Ok((None, _)) => {}
                Err(error) => tracing::warn!(key = %key, %error, "new-session checkpoint failed"),
            }
        }
        if reason == Reason::ExplicitReset {
            self.retire_transcript(key, old, ArchiveReason::Reset, false)
                .await;
        }
        Ok(updated)
    }

    /// The session id the drift gate fires for, if it is on and fires. Asked only when
    /// the session would otherwise continue (and, with `gate`, when the group's
    /// activation lets the agent answer), and never under a store lock.
    async fn drifted_session(
        &self,
        key: &SessionKey,
        message: &InboundMessage,
        policy: &Policy<'_>,
        gate: bool,
    ) -> Result<Option<String>> {
        let Some((classifier, threshold)) = &self.seams.drift else {
            return Ok(None);
        };
        if policy.reset_triggered {
            return Ok(None);
        }
        let Some(current) = self.seams.store.get(key).await? else {
            return Ok(None);
        };
        let (decision, _) = policy.decide(key, Some(&current.entry), self.seams.clock.now(), None);
        if decision != Decision::Continue {
            return Ok(None);
        }
        let activation = current.entry.group_activation.as_ref();
        if gate
            && !crate::inbound::activation::decide(message, activation, self.settings.owner_chatter)
                .trigger
        {
            // Chatter does not start sessions: no need to ask the classifier.
            return Ok(None);
        }
        match classifier.classify(&current, message).await {
            Ok(verdict) if verdict.drifted && verdict.confidence >= *threshold => {
                Ok(Some(current.entry.session_id))
            }
            Ok(_) => Ok(None),
            Err(error) => {
                tracing::warn!(key = %key, %error, "topic-drift classifier failed; continuing the session");
                Ok(None)
            }
        }
    }
}

/// Whether the session `entry` wrote a transcript: a file store records its
/// `sessionFile`; the database stores keep transcripts by session id, so they are asked.
async fn has_transcript(
    transcripts: Option<&dyn TranscriptStore>,
    entry: &crate::store::entry::SessionEntry,
    transcript: &TranscriptRef,
) -> bool {
    let Some(transcripts) = transcripts else {
        return false;
    };
    if entry.session_file.is_some() {
        return true;
    }
    match transcripts
        .read(transcript, crate::transcript::Offset::START)
        .await
    {
        Ok(read) => !read.events.is_empty(),
        Err(error) => {
            tracing::warn!(session_id = %entry.session_id, %error, "could not read the transcript of the session that ended");
            false
        }
    }
}

/// Warns (once per manager, `warned`) and counts that `senders` people now share `key`'s
/// main DM session, as OpenClaw's security audit does.
fn shared_dm_session(warned: &AtomicBool, key: &SessionKey, senders: usize) {
    crate::ops::telemetry::shared_dm_sender();
    if !warned.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            key = %key,
            senders,
            "several people send DMs into one shared session and each sees the others' \
             messages; give each their own with dm scope per-channel-peer \
             (openclaw.json: session.dmScope)"
        );
    }
}

/// The parent a new thread session `key` forks from: `message`'s parent session (under
/// `default_agent` when the message names no agent), when it exists and is not `key`.
///
/// A parent that `admit` does not let the caller open is no parent: the new session
/// starts empty, as for a parent that does not exist, so a caller can neither read a
/// session through a fork nor learn whether it exists.
async fn fork_origin(
    store: &dyn SessionStore,
    default_agent: &AgentId,
    message: &InboundMessage,
    key: &SessionKey,
    admit: &Admission<'_>,
) -> Result<Option<ForkOrigin>> {
    let Some(raw) = present(message.parent_session_key.as_deref()) else {
        return Ok(None);
    };
    let parent = SessionKey::for_agent(&agent_of(message, default_agent), raw)?;
    if parent == *key {
        return Ok(None);
    }
    Ok(store
        .get(&parent)
        .await?
        .filter(|stored| admit(&parent, Some(&stored.entry)).is_ok())
        .map(|stored| ForkOrigin {
            session_key: parent.to_string(),
            session_id: stored.entry.session_id,
            session_file: stored.entry.session_file,
            extra: Default::default(),
        }))
}
