//! Hearing other processes' appends: `LISTEN`/`NOTIFY` on a channel per schema.
//!
//! Each append sends a small [`AppendNotice`] with `pg_notify` inside its transaction,
//! so the server delivers it only if, and once, the append commits. A store handle with
//! subscribers keeps one connection listening; for each notice from another handle it
//! reads the announced lines from the table and publishes them to its subscribers.

use std::sync::Arc;

use tokio_postgres::AsyncMessage;

use super::*;
use crate::store::sql_transcripts::AppendNotice;

/// The longest wait between two attempts to (re)connect the listening connection.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(5);

/// The notification channel of `schema`: `agent_sessions_<schema>`, cut to the 63 bytes
/// of a PostgreSQL identifier.
pub(super) fn channel(schema: &str) -> String {
    let mut channel = format!("agent_sessions_{schema}");
    channel.truncate(63);
    channel
}

/// The listening task of a store handle; dropping the last clone of the handle stops it.
#[derive(Debug)]
pub(super) struct Listener(tokio::task::JoinHandle<()>);

impl Drop for Listener {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl PostgresStore {
    /// Starts listening for other processes' appends, once per handle, when there is a
    /// runtime to listen on and no listener is running (a subscription made outside a
    /// runtime, or one whose runtime has shut down, leaves the start to a later one).
    pub(super) fn start_listening(&self) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut listener = self
            .listener
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if listener
            .as_ref()
            .is_some_and(|running| !running.0.is_finished())
        {
            return;
        }
        let reader = PostgresStore {
            listener: Arc::default(),
            ..self.clone()
        };
        *listener = Some(Listener(handle.spawn(reader.listen())));
    }

    /// Listens until aborted, reconnecting after a lost connection. Notices sent while
    /// it was not connected are not heard: a [`Follow`](crate::transcript::follow::Follow) catches up from its
    /// position.
    async fn listen(self) {
        let mut delay = Duration::from_millis(100);
        loop {
            match self.listen_once().await {
                Ok(()) => delay = Duration::from_millis(100),
                Err(error) => {
                    tracing::warn!(%error, "listening for other processes' appends failed; retrying")
                }
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(MAX_RECONNECT_DELAY);
        }
    }

    /// One listening connection, until it is lost.
    async fn listen_once(&self) -> Result<()> {
        let (client, mut connection) = self
            .config
            .connect(NoTls)
            .await
            .map_err(pg_error("connect to listen"))?;
        let (sender, mut notices) = tokio::sync::mpsc::unbounded_channel();
        let driver = tokio::spawn(async move {
            while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                match message {
                    Ok(AsyncMessage::Notification(notification)) => {
                        if sender.send(notification.payload().to_owned()).is_err() {
                            break;
                        }
                    }
                    Ok(_) => {}
                    Err(error) => {
                        tracing::warn!(%error, "the listening connection failed");
                        break;
                    }
                }
            }
        });
        let _stop_driver = Listener(driver);
        client
            .batch_execute(&format!("LISTEN \"{}\"", channel(&self.schema)))
            .await
            .map_err(pg_error("listen"))?;
        while let Some(payload) = notices.recv().await {
            self.hear(&payload).await;
        }
        Ok(())
    }

    /// Publishes the update a notice announces, unless this handle wrote it or nobody
    /// listens.
    async fn hear(&self, payload: &str) {
        let notice: AppendNotice = match serde_json::from_str(payload) {
            Ok(notice) => notice,
            Err(error) => {
                tracing::debug!(%error, payload, "ignored a notification that is not an append notice");
                return;
            }
        };
        if *notice.writer == *self.writer || self.hub.subscribers() == 0 {
            return;
        }
        let update = async {
            let mut client = self.client().await?;
            let tx = self.snapshot(&mut client).await?;
            notice.update(&mut self.rows(&tx), &self.location).await
        };
        match update.await {
            Ok(Some(update)) => self.hub.publish(update),
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(%error, transcript = %notice.name, "reading an announced append failed")
            }
        }
    }
}
