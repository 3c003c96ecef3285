//! The notes server of the workspace: GET /, /health, and /notes (POST a body of text, GET the list), on
//! PostgreSQL through the workspace's own `pgwire` crate. Standard library only.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

const MESSAGE: &str = include_str!("../message.txt");

fn connect(url: &str) -> pgwire::Connection {
    for attempt in 0..30 {
        match pgwire::Connection::connect(url) {
            Ok(connection) => return connection,
            Err(error) if attempt < 29 => {
                eprintln!("database not ready ({}); retrying", error);
                thread::sleep(Duration::from_secs(1));
            }
            Err(error) => panic!("cannot reach the database: {}", error),
        }
    }
    unreachable!()
}

fn respond(stream: &mut TcpStream, status: &str, body: &str) {
    let _ = write!(stream, "HTTP/1.1 {}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
                   status, body.len(), body);
}

fn handle(mut stream: TcpStream, db: &Mutex<pgwire::Connection>) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    let mut length = 0usize;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).is_err() || header == "\r\n" || header.is_empty() {
            break;
        }
        let lower = header.to_ascii_lowercase();
        if let Some(value) = lower.strip_prefix("content-length:") {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; length.min(4096)];
    let _ = reader.read_exact(&mut body);
    let parts: Vec<&str> = request_line.split_whitespace().collect();
    let (method, path) = (parts.first().copied().unwrap_or(""), parts.get(1).copied().unwrap_or(""));
    let mut connection = db.lock().expect("database lock");
    match (method, path) {
        ("GET", "/") => respond(&mut stream, "200 OK", &format!("rust-workspace says: {}\n", MESSAGE.trim())),
        ("GET", "/health") => respond(&mut stream, "200 OK", "ok"),
        ("POST", "/notes") => {
            let text = String::from_utf8_lossy(&body).to_string();
            let sql = format!("INSERT INTO notes (text) VALUES ({})", pgwire::literal(&text));
            match connection.query(&sql) {
                Ok(_) => respond(&mut stream, "201 Created", "stored"),
                Err(error) => respond(&mut stream, "500 Internal Server Error", &error.0),
            }
        }
        ("GET", "/notes") => match connection.query("SELECT text FROM notes ORDER BY id") {
            Ok(rows) => {
                let texts: Vec<String> = rows.into_iter().filter_map(|row| row.into_iter().next().flatten()).collect();
                respond(&mut stream, "200 OK", &texts.join("\n"))
            }
            Err(error) => respond(&mut stream, "500 Internal Server Error", &error.0),
        },
        _ => respond(&mut stream, "404 Not Found", "not found"),
    }
}

fn main() {
    let url = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let port = std::env::var("PORT").unwrap_or_else(|_| "8080".to_string());
    let mut connection = connect(&url);
    connection
        .query("CREATE TABLE IF NOT EXISTS notes (id SERIAL PRIMARY KEY, text TEXT NOT NULL)")
        .expect("create table");
    let db = Mutex::new(connection);
    let listener = TcpListener::bind(("0.0.0.0", port.parse::<u16>().expect("PORT"))).expect("bind");
    eprintln!("listening on {}", port);
    for stream in listener.incoming().flatten() {
        handle(stream, &db);
    }
}
