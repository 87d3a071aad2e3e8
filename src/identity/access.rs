//! Who may read and change a session (documented in the parent module).

use crate::error::{AccessDenial, Error, KeyProblem, Result};
use crate::identity::key::SessionKey;
use crate::identity::Person;
use crate::store::entry::SessionEntry;

/// Who is asking, as far as access control cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    principal: Principal,
    namespace: Option<String>,
}

/// The owner, or one participant.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Principal {
    /// The owner of the deployment: may open every session.
    Owner,
    /// A person (canonical id) or channel sender (`<channel>:<id>`): may open the
    /// sessions they take part in.
    Participant(String),
}

impl Caller {
    /// The owner.
    pub fn owner() -> Self {
        Caller {
            principal: Principal::Owner,
            namespace: None,
        }
    }

    /// A participant: a canonical person id (`staff:17`) or a channel sender
    /// (`telegram:42`).
    pub fn person(id: impl Into<String>) -> Self {
        Caller {
            principal: Principal::Participant(id.into().trim().to_owned()),
            namespace: None,
        }
    }

    /// A resolved [`Person`].
    pub fn of(person: &Person) -> Self {
        Caller::person(person.id.clone())
    }

    /// This caller, limited to keys in `prefix`'s namespace: the key itself or keys
    /// continuing it after a `:`. A channel token is limited so (`agent:main:telegram`
    /// reaches `agent:main:telegram:dm:42`, not `agent:main:telegramx:…` nor
    /// `agent:main:slack:…`). A blank prefix, an empty `:` segment or a control
    /// character is [`Error::InvalidKey`].
    pub fn within_namespace(mut self, prefix: &str) -> Result<Self> {
        let namespace = prefix.trim().trim_end_matches(':').to_lowercase();
        let problem = if namespace.is_empty() {
            Some(KeyProblem::Empty)
        } else if namespace.chars().any(char::is_control) {
            Some(KeyProblem::ControlCharacter)
        } else if namespace.split(':').any(str::is_empty) {
            Some(KeyProblem::EmptySegment)
        } else {
            None
        };
        if let Some(problem) = problem {
            return Err(Error::invalid_key(prefix, problem));
        }
        self.namespace = Some(namespace);
        Ok(self)
    }

    /// Who the caller is.
    pub fn principal(&self) -> &Principal {
        &self.principal
    }

    /// Whether the caller is the owner.
    pub(crate) fn is_owner(&self) -> bool {
        self.principal == Principal::Owner
    }

    /// The participant id, for a participant.
    pub fn participant_id(&self) -> Option<&str> {
        match &self.principal {
            Principal::Owner => None,
            Principal::Participant(id) => Some(id),
        }
    }

    /// The key namespace the caller is limited to, if any.
    pub(crate) fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// Whether `key` lies in the caller's namespace (always, without one).
    pub(crate) fn reaches(&self, key: &SessionKey) -> bool {
        self.namespace.as_deref().is_none_or(|prefix| {
            key.as_str()
                .strip_prefix(prefix)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(':'))
        })
    }
}

/// Whether `caller` may read and change the session under `key`, whose entry is
/// `entry` (`None`: there is none).
///
/// In order: a key outside the caller's namespace is denied
/// ([`AccessDenial::OutsideTokenNamespace`]); the owner is allowed; a participant of
/// the session is allowed; anyone else is denied ([`AccessDenial::NotParticipant`]) —
/// also when the session does not exist, so that a denial does not reveal whether it
/// does.
pub(crate) fn verify_session_access(
    caller: &Caller,
    key: &SessionKey,
    entry: Option<&SessionEntry>,
) -> Result<()> {
    verify_namespace(caller, key)?;
    match &caller.principal {
        Principal::Owner => Ok(()),
        Principal::Participant(id) if entry.is_some_and(|e| e.has_participant(id)) => Ok(()),
        Principal::Participant(_) => Err(denied(key, AccessDenial::NotParticipant)),
    }
}

/// Whether `key` is in the caller's namespace ([`AccessDenial::OutsideTokenNamespace`]
/// if not).
pub(crate) fn verify_namespace(caller: &Caller, key: &SessionKey) -> Result<()> {
    if caller.reaches(key) {
        Ok(())
    } else {
        Err(denied(key, AccessDenial::OutsideTokenNamespace))
    }
}

pub(crate) fn denied(key: &SessionKey, reason: AccessDenial) -> Error {
    Error::AccessDenied {
        resource: format!("session {key}"),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(raw: &str) -> SessionKey {
        SessionKey::parse(raw).unwrap()
    }

    fn entry_with(participants: &[&str]) -> SessionEntry {
        let mut entry = SessionEntry::new("s", 0);
        for p in participants {
            entry.add_participant(p);
        }
        entry
    }

    fn denial(result: Result<()>) -> Option<AccessDenial> {
        match result {
            Ok(()) => None,
            Err(Error::AccessDenied { reason, .. }) => Some(reason),
            Err(other) => panic!("unexpected error {other}"),
        }
    }

    #[test]
    fn access_table() {
        use AccessDenial::*;
        let k = key("agent:main:telegram:dm:42");
        let jane = entry_with(&["staff:17"]);
        let token = |prefix: &str| Caller::owner().within_namespace(prefix).unwrap();
        let cases: Vec<(Caller, Option<&SessionEntry>, Option<AccessDenial>)> = vec![
            (Caller::owner(), Some(&jane), None),
            (Caller::owner(), None, None),
            (Caller::person("staff:17"), Some(&jane), None),
            (Caller::person(" staff:17 "), Some(&jane), None),
            (
                Caller::person("staff:18"),
                Some(&jane),
                Some(NotParticipant),
            ),
            (Caller::person("staff:17"), None, Some(NotParticipant)),
            (token("agent:main:telegram"), Some(&jane), None),
            (token("agent:main:telegram:"), Some(&jane), None),
            (token("AGENT:MAIN:TELEGRAM"), Some(&jane), None),
            (token("agent:main:telegram:dm:42"), Some(&jane), None),
            (
                token("agent:main:slack"),
                Some(&jane),
                Some(OutsideTokenNamespace),
            ),
            (
                token("agent:main:tele"),
                Some(&jane),
                Some(OutsideTokenNamespace),
            ),
            (token("agent:ops"), Some(&jane), Some(OutsideTokenNamespace)),
            (
                Caller::person("staff:17")
                    .within_namespace("agent:main:slack")
                    .unwrap(),
                Some(&jane),
                Some(OutsideTokenNamespace),
            ),
        ];
        for (caller, entry, expected) in cases {
            assert_eq!(
                denial(verify_session_access(&caller, &k, entry)),
                expected,
                "{caller:?} on {entry:?}"
            );
        }
    }

    #[test]
    fn a_malformed_namespace_is_rejected() {
        for bad in ["  ", ":", "agent::main", "agent:\u{0}"] {
            assert!(
                matches!(
                    Caller::owner().within_namespace(bad),
                    Err(Error::InvalidKey { .. })
                ),
                "{bad:?}"
            );
        }
    }
}

/// The examples that documented these crate-private helpers, kept as tests.
#[cfg(test)]
mod doc_examples {
    #[test]
    fn the_access_rule() {
        (|| {
            use crate::identity::access::{verify_session_access, Caller};
            use crate::{AccessDenial, Error, SessionEntry, SessionKey};

            let key = SessionKey::parse("agent:main:sms:dm:+61412345678")?;
            let mut entry = SessionEntry::new("s-1", 0);
            entry.add_participant("staff:17");

            verify_session_access(&Caller::owner(), &key, Some(&entry))?;
            verify_session_access(&Caller::person("staff:17"), &key, Some(&entry))?;
            let stranger = verify_session_access(&Caller::person("staff:18"), &key, Some(&entry));
            assert!(matches!(
                stranger,
                Err(Error::AccessDenied {
                    reason: AccessDenial::NotParticipant,
                    ..
                })
            ));

            let telegram_token = Caller::owner().within_namespace("agent:main:telegram")?;
            let denied = verify_session_access(&telegram_token, &key, Some(&entry));
            assert!(matches!(
                denied,
                Err(Error::AccessDenied {
                    reason: AccessDenial::OutsideTokenNamespace,
                    ..
                })
            ));
            Ok::<(), crate::Error>(())
        })()
        .unwrap();
    }
}
