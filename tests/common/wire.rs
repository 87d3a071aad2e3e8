//! A loopback proxy in front of the PostgreSQL test server that counts, from the
//! protocol itself, what a client asks of the server: round trips, transactions and
//! the statements sent.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// What the server was asked since the last [`WireCounter::take`].
#[derive(Debug, Default, Clone)]
pub struct WireCount {
    /// Times the client sent a request with none outstanding: requests sent together
    /// (pipelined) before the first answer count once.
    pub round_trips: usize,
    /// Transactions that ran a command and ended (committed or rolled back): an
    /// explicit `BEGIN … COMMIT` counts once, each statement run outside one counts once.
    pub transactions: usize,
    /// The SQL of every statement the client sent (parsed or run), in order.
    pub statements: Vec<String>,
}

/// A proxy on 127.0.0.1 forwarding to the server of `AGENT_SESSIONS_TEST_POSTGRES_URL`.
pub struct WireCounter {
    port: u16,
    count: Arc<Mutex<WireCount>>,
}

impl WireCounter {
    /// Starts the proxy in front of `host:port`.
    pub fn start(upstream: &str) -> WireCounter {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let count = Arc::new(Mutex::new(WireCount::default()));
        let upstream = upstream.to_owned();
        let shared = count.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let server = TcpStream::connect(&upstream).unwrap();
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let connection = Arc::new(Mutex::new(Connection::default()));
                let (up, down) = (shared.clone(), shared.clone());
                let (c_up, c_down) = (connection.clone(), connection);
                std::thread::spawn(move || {
                    relay(client, server, false, |tag, body| {
                        client_message(&mut c_up.lock().unwrap(), tag, body, &up)
                    })
                });
                std::thread::spawn(move || {
                    relay(s2, c2, true, |tag, body| {
                        server_message(&mut c_down.lock().unwrap(), tag, body, &down)
                    })
                });
            }
        });
        WireCounter { port, count }
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// What was counted since the last call, and a fresh count.
    pub fn take(&self) -> WireCount {
        std::mem::take(&mut *self.count.lock().unwrap())
    }
}

/// Copies `from` to `to`, giving every whole protocol message to `see`.
fn relay(mut from: TcpStream, mut to: TcpStream, started: bool, mut see: impl FnMut(u8, &[u8])) {
    let mut reader = Reader {
        started,
        ..Reader::default()
    };
    let mut buffer = [0u8; 64 * 1024];
    loop {
        let read = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        reader.pending.extend_from_slice(&buffer[..read]);
        while let Some((tag, body)) = reader.next_message() {
            see(tag, &body);
        }
        if to.write_all(&buffer[..read]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
}

/// Splits a byte stream into protocol messages (a tag byte, then a big-endian length
/// that counts itself); the client's first message (the startup) has no tag.
#[derive(Default)]
struct Reader {
    pending: Vec<u8>,
    started: bool,
}

/// What one client connection has going on.
#[derive(Default)]
struct Connection {
    /// Requests (a simple query, a sync) not answered yet.
    outstanding: usize,
    /// Whether the client sent anything since all its requests were answered.
    waiting: bool,
    commands_since_ready: usize,
    /// The SQL of each statement the client parsed, by statement name.
    parsed: std::collections::HashMap<Vec<u8>, String>,
}

impl Reader {
    fn next_message(&mut self) -> Option<(u8, Vec<u8>)> {
        let header = if self.started { 5 } else { 4 };
        if self.pending.len() < header {
            return None;
        }
        let at = header - 4;
        let length = u32::from_be_bytes(self.pending[at..at + 4].try_into().unwrap()) as usize + at;
        if self.pending.len() < length {
            return None;
        }
        let message: Vec<u8> = self.pending.drain(..length).collect();
        let tag = if self.started { message[0] } else { 0 };
        self.started = true;
        Some((tag, message[header..].to_vec()))
    }
}

/// A message from the client: the SQL of a simple query (`Q`) or of the statement a
/// bind (`B`) runs, as an earlier parse (`P`) named it.
fn client_message(connection: &mut Connection, tag: u8, body: &[u8], count: &Mutex<WireCount>) {
    if tag != 0 && !connection.waiting {
        connection.waiting = true;
        let mut count = count.lock().unwrap();
        count.round_trips += 1;
        count.statements.push("-- round trip".to_owned());
    }
    if matches!(tag, b'Q' | b'S') {
        connection.outstanding += 1;
    }
    let reader = connection;
    let mut fields = body.split(|b| *b == 0);
    let sql = match tag {
        b'Q' => fields
            .next()
            .map(|sql| String::from_utf8_lossy(sql).into_owned()),
        b'P' => {
            let name = fields.next().unwrap_or_default().to_vec();
            let sql = String::from_utf8_lossy(fields.next().unwrap_or_default());
            reader.parsed.insert(name, sql.into_owned());
            None
        }
        b'B' => {
            let _portal = fields.next();
            let name = fields.next().unwrap_or_default();
            reader.parsed.get(name).cloned()
        }
        _ => None,
    };
    if let Some(sql) = sql {
        let sql = sql.split_whitespace().collect::<Vec<_>>().join(" ");
        count.lock().unwrap().statements.push(sql);
    }
}

/// A message from the server: a command done (`C`), or ready for the next query
/// (`Z`, whose status byte is `I` outside a transaction).
fn server_message(reader: &mut Connection, tag: u8, body: &[u8], count: &Mutex<WireCount>) {
    match tag {
        b'C' => reader.commands_since_ready += 1,
        b'Z' => {
            reader.outstanding = reader.outstanding.saturating_sub(1);
            reader.waiting = reader.outstanding > 0;
            let mut count = count.lock().unwrap();
            if body.first() == Some(&b'I') && reader.commands_since_ready > 0 {
                count.transactions += 1;
            }
            if body.first() == Some(&b'I') {
                reader.commands_since_ready = 0;
            }
        }
        _ => {}
    }
}
