//! Turns on the PostgreSQL tests (`cfg(postgres_tests)`) when a test server is named:
//! without `AGENT_SESSIONS_TEST_POSTGRES_URL` they are compiled but reported as
//! ignored, never passed silently.
//!
//! This crate always builds the library with PostgreSQL, so the test helpers it shares
//! with the library see `feature = "postgres"` here too.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(postgres_tests)");
    println!("cargo::rustc-check-cfg=cfg(feature, values(\"postgres\"))");
    println!("cargo::rustc-cfg=feature=\"postgres\"");
    println!("cargo::rerun-if-env-changed=AGENT_SESSIONS_TEST_POSTGRES_URL");
    if std::env::var_os("AGENT_SESSIONS_TEST_POSTGRES_URL").is_some_and(|url| !url.is_empty()) {
        println!("cargo::rustc-cfg=postgres_tests");
    }
}
