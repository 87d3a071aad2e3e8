//! Calls on behalf of a caller who may not see everything: [`SessionManager::scoped`].
//!
//! The [`SessionManager`]'s own methods are the trusted host's: they reach every
//! session of the store. A [`ScopedManager`] offers the same calls for one [`Caller`]
//! and runs [`verify_session_access`] before each, so a participant reaches only their
//! own sessions and a channel token only its namespace; everything else is
//! [`Error::AccessDenied`], with no data of the session. Jobs over many sessions
//! (`prune`, `refresh_identity_summary`, subscribing to every transcript) stay with the
//! host.

use crate::error::{AccessDenial, Error, Result};
use crate::identity::access::{denied, verify_namespace, verify_session_access, Caller};
use crate::identity::key::{AgentId, SessionKey};
use crate::identity::{Identifier, Person};
use crate::inbound::InboundMessage;
use crate::manager::{Resolution, SessionManager, Turn};
use crate::store::entry::{SessionEntry, SessionSource};
use crate::store::{ListFilter, StoredSession};

impl SessionManager {
    /// The person `identifier` on `channel` is, by the configured
    /// [`IdentityResolver`](crate::identity::IdentityResolver)
    /// ([`Error::NotConfigured`] without one).
    pub async fn identify(&self, channel: &str, identifier: &Identifier) -> Result<Person> {
        let resolver = self.seams.identity.as_deref().ok_or(Error::NotConfigured {
            what: "an identity resolver (SessionManagerBuilder::identity_resolver)",
        })?;
        resolver.resolve(channel, identifier).await
    }

    /// The session under `key`, if `caller` may open it.
    /// The owner gets `None` for a missing session; anyone else is denied, so that a
    /// denial does not tell whether the session exists.
    pub(crate) async fn verify_session_access(
        &self,
        caller: &Caller,
        key: &SessionKey,
    ) -> Result<Option<StoredSession>> {
        verify_namespace(caller, key)?;
        let stored = self.seams.store.get(key).await?;
        verify_session_access(caller, key, stored.as_ref().map(|s| &s.entry))?;
        Ok(stored)
    }

    /// This manager's calls on behalf of `caller`, each checked first.
    ///
    /// ```
    /// use agent_sessions::identity::Caller;
    /// use agent_sessions::prelude::*;
    /// use agent_sessions::{AccessDenial, Error};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// let manager = SessionManager::new(InMemoryStore::new());
    /// let jane = manager.scoped(Caller::person("staff:17"));
    /// let mine = jane.resolve(&InboundMessage::direct("web", "jane", "hi").from_person("staff:17")).await?;
    /// assert!(jane.session(&mine.key).get().await?.is_some());
    ///
    /// let bob = manager.scoped(Caller::person("staff:18"));
    /// let denied = bob.session(&mine.key).get().await;
    /// assert!(matches!(denied, Err(Error::AccessDenied { reason: AccessDenial::NotParticipant, .. })));
    /// # Ok(())
    /// # }
    /// ```
    pub fn scoped(&self, caller: Caller) -> ScopedManager<'_> {
        ScopedManager {
            manager: self,
            caller,
            person: None,
            identity: None,
        }
    }

    /// This manager's calls on behalf of whoever `identifier` on `channel` is
    /// ([`identify`](Self::identify)). The identity is resolved again on every
    /// [`ScopedManager::open`], so role changes and merges take effect.
    pub async fn scoped_as(
        &self,
        channel: &str,
        identifier: Identifier,
    ) -> Result<ScopedManager<'_>> {
        let person = self.identify(channel, &identifier).await?;
        Ok(ScopedManager {
            manager: self,
            caller: Caller::of(&person),
            person: Some(person),
            identity: Some((channel.to_owned(), identifier)),
        })
    }
}

/// A [`SessionManager`] seen by one [`Caller`]: every call checks access first.
///
/// Built by [`SessionManager::scoped`] or [`SessionManager::scoped_as`]; cheap, made
/// per request.
#[derive(Debug)]
pub struct ScopedManager<'a> {
    pub(crate) manager: &'a SessionManager,
    pub(crate) caller: Caller,
    person: Option<Person>,
    identity: Option<(String, Identifier)>,
}

impl<'a> ScopedManager<'a> {
    /// Who is calling.
    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    /// The resolved person, for a manager made by [`SessionManager::scoped_as`].
    pub fn person(&self) -> Option<&Person> {
        self.person.as_ref()
    }

    /// Limits this caller to keys in `prefix`'s namespace (see
    /// [`Caller::within_namespace`]).
    pub fn within_namespace(mut self, prefix: &str) -> Result<Self> {
        self.caller = self.caller.within_namespace(prefix)?;
        Ok(self)
    }

    async fn check(&self, key: &SessionKey) -> Result<Option<StoredSession>> {
        self.manager.verify_session_access(&self.caller, key).await
    }

    /// Whether the caller may go on with the session under `key` whose entry is
    /// `entry`, where the call may create it: an existing session must be open to the
    /// caller; a missing one needs the key in the caller's namespace (its creator
    /// becomes its first participant) and, for a participant, to be `creatable` when
    /// that is given. Asked inside the store update.
    fn may_create(
        &self,
        key: &SessionKey,
        entry: Option<&SessionEntry>,
        creatable: Option<&SessionKey>,
    ) -> Result<()> {
        verify_namespace(&self.caller, key)?;
        match (entry, self.caller.participant_id(), creatable) {
            (Some(entry), _, _) => verify_session_access(&self.caller, key, Some(entry)),
            (None, Some(_), Some(creatable)) if creatable != key => {
                Err(denied(key, AccessDenial::NotParticipant))
            }
            (None, _, _) => Ok(()),
        }
    }

    /// Whether the caller may post `message`: a participant only as themselves (the
    /// message's participant id is theirs). Returns, for a participant's message that
    /// names its session key, the only key it may create a session under: the key
    /// builder's. A named key reaches an existing session the participant takes part
    /// in, never a new one — else anyone could take a person's key before they do and
    /// lock them out of it.
    fn may_post(&self, message: &InboundMessage) -> Result<Option<SessionKey>> {
        let key = self.manager.key_for(message)?;
        match self.caller.participant_id() {
            Some(id) if message.participant_id().as_deref() != Some(id) => {
                Err(denied(&key, AccessDenial::NotParticipant))
            }
            Some(_) if message.session_key.is_some() => {
                let mut built = message.clone();
                built.session_key = None;
                self.manager.key_for(&built).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// [`SessionManager::record_inbound_meta`] for a message the caller may post, on the
    /// same terms as [`resolve`](Self::resolve).
    pub async fn record_inbound_meta(&self, message: &InboundMessage) -> Result<StoredSession> {
        let creatable = self.may_post(message)?;
        self.manager
            .record_inbound_meta_admitted(message, &|key, entry| {
                self.may_create(key, entry, creatable.as_ref())
            })
            .await
    }

    /// [`SessionManager::resolve`] for a message the caller may post: a participant
    /// posts only as themselves (the message's [`participant_id`] is theirs) and only
    /// into a session they take part in or a new one under the key builder's key (a
    /// session key the message names never creates one); a namespaced caller only into
    /// its namespace. A parent session the message names
    /// ([`InboundMessage::with_parent_session`]) that the caller may not open is
    /// ignored: the new session starts empty instead of forking it.
    ///
    /// [`participant_id`]: InboundMessage::participant_id
    pub async fn resolve(&self, message: &InboundMessage) -> Result<Resolution> {
        let creatable = self.may_post(message)?;
        self.manager
            .resolve_as(message, &|key, entry| {
                self.may_create(key, entry, creatable.as_ref())
            })
            .await
    }

    /// [`SessionManager::turn`] for a message the caller may post, on the same terms as
    /// [`resolve`](Self::resolve).
    pub async fn turn(&self, message: &InboundMessage) -> Result<Turn<'a>> {
        let creatable = self.may_post(message)?;
        self.manager
            .turn_as(message, &|key, entry| {
                self.may_create(key, entry, creatable.as_ref())
            })
            .await
    }

    /// [`SessionManager::report_delivery`], if the caller may open the session the
    /// payload's receipt names.
    pub async fn report_delivery(
        &self,
        payload: &crate::reply::payload::ReplyPayload,
        delivery: crate::exactly_once::Delivery,
    ) -> Result<()> {
        if let Some(receipt) = &payload.receipt {
            self.check(&receipt.key).await?;
        }
        self.manager.report_delivery(payload, delivery).await
    }

    /// [`SessionManager::open`] for the caller: the caller's identity is resolved again
    /// first (so role changes and merges apply); an existing session must already list a
    /// non-owner caller as a participant; a new session records them as its first. The
    /// session records the resolved person's id (if it has none) and current type.
    pub async fn open(
        &mut self,
        source: &SessionSource,
        agent: Option<&AgentId>,
    ) -> Result<Resolution> {
        if let Some((channel, identifier)) = &self.identity {
            let person = self.manager.identify(channel, identifier).await?;
            let namespace = self.caller.namespace().map(str::to_owned);
            self.caller = Caller::of(&person);
            if let Some(prefix) = namespace {
                self.caller = self.caller.clone().within_namespace(&prefix)?;
            }
            self.person = Some(person);
        }
        let participant = self.caller.participant_id();
        let person = self.person.as_ref();
        self.manager
            .open_admitted(
                source,
                agent,
                &|key, entry| self.may_create(key, entry, None),
                &|entry| stamp_caller(entry, participant, person),
            )
            .await
    }

    /// [`SessionManager::forget_person`], for the owner only: a participant, or an owner
    /// limited to a namespace, is [`Error::AccessDenied`] with
    /// [`AccessDenial::OwnerOnly`] and nothing is erased.
    ///
    /// ```
    /// use agent_sessions::identity::Caller;
    /// use agent_sessions::privacy::PersonRef;
    /// use agent_sessions::prelude::*;
    /// use agent_sessions::{AccessDenial, Error};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// let manager = SessionManager::new(InMemoryStore::new());
    /// let bob = manager.scoped(Caller::person("bob"));
    /// let denied = bob.forget_person(&PersonRef::person("jane")).await;
    /// assert!(matches!(denied, Err(Error::AccessDenied { reason: AccessDenial::OwnerOnly, .. })));
    /// assert!(manager.scoped(Caller::owner()).forget_person(&PersonRef::person("jane")).await.is_ok());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn forget_person(
        &self,
        person: &crate::privacy::PersonRef,
    ) -> Result<crate::privacy::ForgetReport> {
        self.owner_only("forget_person")?;
        self.manager.forget_person(person).await
    }

    /// [`SessionManager::export_person`], for the owner (not limited to a namespace)
    /// or the person themselves (a participant whose id is the
    /// [`PersonRef::Person`](crate::privacy::PersonRef::Person) asked for); anyone else is
    /// [`Error::AccessDenied`] and nothing is written.
    pub async fn export_person(
        &self,
        person: &crate::privacy::PersonRef,
        out: &mut (dyn std::io::Write + Send),
    ) -> Result<crate::privacy::PersonExportSummary> {
        let themselves = matches!(
            (person, self.caller.participant_id()),
            (crate::privacy::PersonRef::Person(id), Some(caller)) if id.trim() == caller
        );
        if !themselves {
            self.owner_only("export_person")?;
        }
        self.manager.export_person(person, out).await
    }

    fn owner_only(&self, resource: &str) -> Result<()> {
        if self.caller.is_owner() && self.caller.namespace().is_none() {
            Ok(())
        } else {
            Err(Error::AccessDenied {
                resource: resource.to_owned(),
                reason: AccessDenial::OwnerOnly,
            })
        }
    }

    /// The sessions matching `filter` that the caller may open, most recently active
    /// first; the limit counts only those.
    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<StoredSession>> {
        let mut unlimited = filter.clone();
        unlimited.limit = None;
        let visible = self
            .manager
            .list(&unlimited)
            .await?
            .into_iter()
            .filter(|s| verify_session_access(&self.caller, &s.key, Some(&s.entry)).is_ok())
            .collect();
        Ok(filter.finish(visible))
    }
}

/// Records an opening caller in the session: as a participant, and as its person (if it
/// has none) with their current type.
fn stamp_caller(entry: &mut SessionEntry, participant: Option<&str>, person: Option<&Person>) {
    if let Some(id) = participant {
        entry.add_participant(id);
    }
    if let Some(person) = person {
        if entry.person_id.is_none() {
            entry.person_id = Some(person.id.clone());
        }
        if entry.person_id.as_deref() == Some(person.id.as_str()) {
            entry.person_type = Some(person.person_type.as_str().to_owned());
        }
    }
}
