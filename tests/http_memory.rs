//! Slow readers of a long transcript do not exhaust the service's memory: each event
//! stream holds one chunk of its transcript, read when its client has taken the last,
//! and what they held is given back when they close.
//!
//! The only test of its binary, so the process's resident memory is the service's (and
//! its clients', which read almost nothing).
#![cfg(target_os = "linux")]

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use agent_sessions::http::{router, serve, ServiceOptions};
use agent_sessions::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The transcript's size.
const TRANSCRIPT_BYTES: usize = 100 * 1024 * 1024;
/// The slow readers.
const READERS: usize = 40;

/// This process's resident memory, in MiB.
fn resident_mib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .unwrap();
    kib / 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forty_slow_readers_of_a_100_mb_transcript_hold_a_chunk_each() {
    let dir = tempfile::tempdir().unwrap();
    let manager = SessionManager::connect(&format!("json:{}", dir.path().display()))
        .await
        .unwrap()
        .build()
        .unwrap();
    let turn = manager
        .turn(&InboundMessage::direct("telegram", "42", "hi"))
        .await
        .unwrap();
    let key = turn.key().clone();
    turn.complete("Hello.").await.unwrap();
    let entry = manager.session(&key).get().await.unwrap().unwrap().entry;
    // A long conversation, written straight to the transcript file.
    {
        let path = entry.session_file.clone().unwrap();
        let file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
        let mut out = std::io::BufWriter::new(file);
        let text = "x".repeat(2_000);
        let mut written = 0;
        let mut n = 0u64;
        while written < TRANSCRIPT_BYTES {
            let line = format!(
                r#"{{"type":"message","id":"{n:08x}","timestamp":"2026-11-27T10:00:00.000Z","message":{{"role":"user","content":"{text}"}}}}"#
            );
            writeln!(out, "{line}").unwrap();
            written += line.len() + 1;
            n += 1;
        }
        out.flush().unwrap();
    }

    let options = ServiceOptions::default();
    let app = router(Arc::new(manager), options.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        serve(listener, app, &options, std::future::pending())
            .await
            .unwrap()
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = resident_mib();

    // Forty clients each read the start of the stream, then stop reading.
    let request = format!(
        "GET /kernel/sessions/{}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        entry.session_id
    );
    let mut readers = Vec::new();
    for _ in 0..READERS {
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut start = vec![0u8; 64 * 1024];
        stream.read_exact(&mut start).await.unwrap();
        assert!(String::from_utf8_lossy(&start).contains("200 OK"));
        readers.push(stream);
    }
    let mut peak = 0;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        peak = peak.max(resident_mib());
    }
    assert!(
        peak.saturating_sub(before) < 200,
        "{READERS} slow readers took {} MiB (from {before} to {peak})",
        peak - before
    );

    drop(readers);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = resident_mib();
    assert!(
        after.saturating_sub(before) < 64,
        "memory is given back: {before} MiB before, {peak} with the readers, {after} after"
    );
    eprintln!(
        "resident: {before} MiB before, {peak} MiB with {READERS} readers, {after} MiB after"
    );
}
