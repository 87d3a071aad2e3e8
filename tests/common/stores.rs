//! The stores a test runs on: a JSON tree, and SQLite and PostgreSQL when the build has
//! them (PostgreSQL when `AGENT_SESSIONS_TEST_POSTGRES_URL` names a server).

/// Store URLs, each empty; [`Stores::finish`] drops the PostgreSQL schema.
pub struct Stores {
    _dir: tempfile::TempDir,
    /// One URL per backend.
    pub urls: Vec<String>,
    #[cfg(feature = "postgres")]
    schemas: Vec<crate::common::TestSchema>,
}

impl Stores {
    /// New stores; `prefix` names the PostgreSQL schema.
    pub fn new(prefix: &str) -> Stores {
        let dir = tempfile::tempdir().unwrap();
        #[allow(unused_mut)]
        let mut urls = vec![format!("json:{}", dir.path().join("tree").display())];
        #[cfg(feature = "sqlite")]
        urls.push(format!(
            "sqlite:{}",
            dir.path().join("sessions.db").display()
        ));
        #[cfg(feature = "postgres")]
        let mut schemas = Vec::new();
        #[cfg(feature = "postgres")]
        if std::env::var("AGENT_SESSIONS_TEST_POSTGRES_URL").is_ok() {
            let schema = crate::common::TestSchema::new(prefix);
            urls.push(schema.url());
            schemas.push(schema);
        }
        let _ = prefix;
        Stores {
            _dir: dir,
            urls,
            #[cfg(feature = "postgres")]
            schemas,
        }
    }

    /// Drops what the stores left on the server.
    pub async fn finish(self) {
        #[cfg(feature = "postgres")]
        for schema in self.schemas {
            schema.drop().await;
        }
    }
}
