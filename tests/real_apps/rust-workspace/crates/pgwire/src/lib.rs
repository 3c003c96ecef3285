//! Just enough of the PostgreSQL frontend/backend protocol (version 3) for a small service, with the
//! standard library only: connect with a `postgresql://user:password@host:port/database` URL, log in with
//! SCRAM-SHA-256 (RFC 5802/7677, PostgreSQL's default), run simple queries and read text rows.

mod crypto;

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

pub struct Connection {
    stream: TcpStream,
}

#[derive(Debug)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<io::Error> for Error {
    fn from(error: io::Error) -> Self {
        Error(error.to_string())
    }
}

struct Url {
    user: String,
    password: String,
    host: String,
    port: u16,
    database: String,
}

fn parse_url(url: &str) -> Result<Url, Error> {
    let rest = url
        .strip_prefix("postgresql://")
        .or_else(|| url.strip_prefix("postgres://"))
        .ok_or_else(|| Error("DATABASE_URL must start with postgresql://".into()))?;
    let (credentials, rest) = rest.split_once('@').ok_or_else(|| Error("no user in DATABASE_URL".into()))?;
    let (user, password) = credentials.split_once(':').unwrap_or((credentials, ""));
    let (address, database) = rest.split_once('/').unwrap_or((rest, ""));
    let database = database.split('?').next().unwrap_or("");
    let (host, port) = address.split_once(':').unwrap_or((address, "5432"));
    let port = port.parse().map_err(|_| Error("bad port in DATABASE_URL".into()))?;
    Ok(Url {
        user: user.to_string(),
        password: password.to_string(),
        host: host.to_string(),
        port,
        database: database.to_string(),
    })
}

fn message(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![kind];
    out.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    out.extend_from_slice(body);
    out
}

impl Connection {
    pub fn connect(url: &str) -> Result<Connection, Error> {
        let url = parse_url(url)?;
        let stream = TcpStream::connect((url.host.as_str(), url.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        let mut connection = Connection { stream };
        let mut startup = Vec::new();
        startup.extend_from_slice(&196608u32.to_be_bytes()); // protocol 3.0
        for (key, value) in [("user", url.user.as_str()), ("database", url.database.as_str())] {
            startup.extend_from_slice(key.as_bytes());
            startup.push(0);
            startup.extend_from_slice(value.as_bytes());
            startup.push(0);
        }
        startup.push(0);
        let mut packet = ((startup.len() + 4) as u32).to_be_bytes().to_vec();
        packet.extend_from_slice(&startup);
        connection.stream.write_all(&packet)?;
        connection.login(&url.user, &url.password)?;
        Ok(connection)
    }

    fn read(&mut self) -> Result<(u8, Vec<u8>), Error> {
        let mut header = [0u8; 5];
        self.stream.read_exact(&mut header)?;
        let length = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        let mut body = vec![0u8; length.saturating_sub(4)];
        self.stream.read_exact(&mut body)?;
        Ok((header[0], body))
    }

    fn login(&mut self, user: &str, password: &str) -> Result<(), Error> {
        let _ = user; // PostgreSQL takes the user from the startup message; SCRAM's n= stays empty
        let client_nonce = crypto::base64(&crypto::random_bytes(18));
        let mut scram: Option<(String, Vec<u8>)> = None; // client-first-bare, salted password
        let mut server_signature = Vec::new();
        loop {
            let (kind, body) = self.read()?;
            match kind {
                b'R' => {
                    let code = u32::from_be_bytes([body[0], body[1], body[2], body[3]]);
                    match code {
                        0 => {} // AuthenticationOk
                        10 => {
                            // AuthenticationSASL: send SASLInitialResponse with client-first-message
                            let bare = format!("n=,r={}", client_nonce);
                            let first = format!("n,,{}", bare);
                            let mut out = b"SCRAM-SHA-256\0".to_vec();
                            out.extend_from_slice(&(first.len() as u32).to_be_bytes());
                            out.extend_from_slice(first.as_bytes());
                            self.stream.write_all(&message(b'p', &out))?;
                            scram = Some((bare, Vec::new()));
                        }
                        11 => {
                            // AuthenticationSASLContinue: server-first-message
                            let server_first = String::from_utf8_lossy(&body[4..]).to_string();
                            let fields = scram_fields(&server_first);
                            let nonce = fields.iter().find(|(k, _)| k == "r").map(|(_, v)| v.clone()).unwrap_or_default();
                            if !nonce.starts_with(&client_nonce) {
                                return Err(Error("SCRAM: the server's nonce does not extend ours".into()));
                            }
                            let salt = crypto::base64_decode(
                                &fields.iter().find(|(k, _)| k == "s").map(|(_, v)| v.clone()).unwrap_or_default(),
                            );
                            let iterations: u32 = fields
                                .iter()
                                .find(|(k, _)| k == "i")
                                .and_then(|(_, v)| v.parse().ok())
                                .unwrap_or(4096);
                            let salted = crypto::pbkdf2_sha256(password.as_bytes(), &salt, iterations);
                            let client_key = crypto::hmac_sha256(&salted, b"Client Key");
                            let stored_key = crypto::sha256(&client_key);
                            let without_proof = format!("c=biws,r={}", nonce);
                            let bare = scram.as_ref().map(|(b, _)| b.clone()).unwrap_or_default();
                            let auth = format!("{},{},{}", bare, server_first, without_proof);
                            let signature = crypto::hmac_sha256(&stored_key, auth.as_bytes());
                            let proof: Vec<u8> = client_key.iter().zip(signature.iter()).map(|(a, b)| a ^ b).collect();
                            let server_key = crypto::hmac_sha256(&salted, b"Server Key");
                            server_signature = crypto::hmac_sha256(&server_key, auth.as_bytes()).to_vec();
                            let last = format!("{},p={}", without_proof, crypto::base64(&proof));
                            self.stream.write_all(&message(b'p', last.as_bytes()))?;
                            scram = Some((bare, salted.to_vec()));
                        }
                        12 => {
                            // AuthenticationSASLFinal: the server proves it knows the password too
                            let last = String::from_utf8_lossy(&body[4..]).to_string();
                            let verifier = last.strip_prefix("v=").unwrap_or("");
                            if crypto::base64_decode(verifier) != server_signature {
                                return Err(Error("SCRAM: the server's signature is wrong".into()));
                            }
                        }
                        other => return Err(Error(format!("unsupported authentication method {}", other))),
                    }
                }
                b'Z' => return Ok(()), // ReadyForQuery
                b'E' => return Err(Error(server_error(&body))),
                _ => {} // ParameterStatus, BackendKeyData, notices
            }
        }
    }

    /// Run one or more statements; the text of every row's columns (NULL as None).
    pub fn query(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, Error> {
        let mut body = sql.as_bytes().to_vec();
        body.push(0);
        self.stream.write_all(&message(b'Q', &body))?;
        let mut rows = Vec::new();
        let mut failure = None;
        loop {
            let (kind, body) = self.read()?;
            match kind {
                b'D' => rows.push(data_row(&body)),
                b'E' => failure = Some(Error(server_error(&body))), // ReadyForQuery still follows
                b'Z' => break,
                _ => {}
            }
        }
        match failure {
            Some(error) => Err(error),
            None => Ok(rows),
        }
    }
}

/// A string as an SQL literal: single quotes doubled (standard_conforming_strings is on by default).
pub fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

fn data_row(body: &[u8]) -> Vec<Option<String>> {
    let count = u16::from_be_bytes([body[0], body[1]]) as usize;
    let mut at = 2;
    let mut columns = Vec::with_capacity(count);
    for _ in 0..count {
        let length = i32::from_be_bytes([body[at], body[at + 1], body[at + 2], body[at + 3]]);
        at += 4;
        if length < 0 {
            columns.push(None);
        } else {
            let end = at + length as usize;
            columns.push(Some(String::from_utf8_lossy(&body[at..end]).to_string()));
            at = end;
        }
    }
    columns
}

fn server_error(body: &[u8]) -> String {
    body.split(|b| *b == 0)
        .filter(|field| field.first() == Some(&b'M'))
        .map(|field| String::from_utf8_lossy(&field[1..]).to_string())
        .next()
        .unwrap_or_else(|| "error from the server".to_string())
}

fn scram_fields(text: &str) -> Vec<(String, String)> {
    text.split(',')
        .filter_map(|part| part.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
