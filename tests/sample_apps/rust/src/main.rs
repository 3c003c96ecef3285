// A Rust sample app for preview tests: std only, builds offline.
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

const MESSAGE: &str = include_str!("../message.txt");

fn respond(mut stream: TcpStream) {
    let mut buffer = [0u8; 4096];
    let read = stream.read(&mut buffer).unwrap_or(0);
    let request = String::from_utf8_lossy(&buffer[..read]);
    let path = request.split_whitespace().nth(1).unwrap_or("/");
    let (status, body) = match path {
        "/health" => ("200 OK", "ok".to_string()),
        "/db" => {
            let target = format!(
                "{}:{}",
                std::env::var("DB_HOST").unwrap_or_default(),
                std::env::var("DB_PORT").unwrap_or_default()
            );
            match TcpStream::connect(target) {
                Ok(_) => ("200 OK", "db reachable".to_string()),
                Err(err) => ("502 Bad Gateway", err.to_string()),
            }
        }
        _ => ("200 OK", format!("rust says: {}\n", MESSAGE.trim())),
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
        status,
        body.len(),
        body
    );
}

fn main() {
    let port = std::env::var("PORT").expect("PORT");
    let listener = TcpListener::bind(format!("0.0.0.0:{}", port)).expect("bind");
    for stream in listener.incoming().flatten() {
        std::thread::spawn(move || respond(stream));
    }
}
