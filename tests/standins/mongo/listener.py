"""Accepts TCP connections on 27017 and closes them: enough for health checks and connect tests."""
import socket

server = socket.create_server(("0.0.0.0", 27017), reuse_port=True)
while True:
    connection, _ = server.accept()
    connection.close()
