"""Stand-in for mongod (Debian has no MongoDB server): PyPI's mockupdb speaks the wire protocol; this answers
what a driver needs to connect, authenticate and keep documents.

- The handshake (`hello`/`isMaster`) of a 7.0 server, and `ping` without authentication, like mongod.
- SCRAM-SHA-256 (RFC 5802/7677) against the root user the official image creates from
  MONGO_INITDB_ROOT_USERNAME/PASSWORD in `admin`; every other command needs an authenticated connection.
- insert, find (equality filters), count, delete and drop, per database and collection, kept as JSON in
  /data/db so that documents outlive a restart of the container, as with the official image's volume.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import json
import os
import secrets
import threading
from pathlib import Path

from bson import ObjectId, json_util
from bson.binary import Binary
from mockupdb import MockupDB

DATA = Path("/data/db")
USER = os.environ.get("MONGO_INITDB_ROOT_USERNAME", "")
PASSWORD = os.environ.get("MONGO_INITDB_ROOT_PASSWORD", "")
ITERATIONS = 15000
SALT = secrets.token_bytes(16)
_salted = hashlib.pbkdf2_hmac("sha256", PASSWORD.encode(), SALT, ITERATIONS)
STORED_KEY = hashlib.sha256(hmac.new(_salted, b"Client Key", "sha256").digest()).digest()
SERVER_KEY = hmac.new(_salted, b"Server Key", "sha256").digest()
HELLO = {"ismaster": True, "isWritablePrimary": True, "helloOk": True, "minWireVersion": 0, "maxWireVersion": 21,
         "maxBsonObjectSize": 16 * 1024 * 1024, "maxMessageSizeBytes": 48_000_000, "maxWriteBatchSize": 100_000,
         "localTime": None, "logicalSessionTimeoutMinutes": 30, "connectionId": 1, "readOnly": False}
OPEN = {"hello", "ismaster", "ping", "saslstart", "saslcontinue", "buildinfo", "endsessions", "getnonce"}

lock = threading.Lock()
conversations: dict[int, tuple[str, str, str]] = {}
authenticated: set[int] = set()  # client ports whose connection proved the password
ids = itertools.count(1)


def _fields(message: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in message.split(",") if "=" in part)


def _collection_file(database: str, collection: str) -> Path:
    return DATA / f"{database}.{collection}.json"


def _load(database: str, collection: str) -> list[dict]:
    path = _collection_file(database, collection)
    return json_util.loads(path.read_text()) if path.exists() else []


def _save(database: str, collection: str, documents: list[dict]) -> None:
    path = _collection_file(database, collection)
    path.write_text(json_util.dumps(documents))


def _matches(document: dict, query: dict) -> bool:
    return all(document.get(key) == value for key, value in query.items())


def handle(request) -> bool:  # noqa: ANN001 - a mockupdb request
    doc = request.doc
    name = next(iter(doc)).lower()
    database = request.namespace or "admin"
    if name in ("hello", "ismaster"):
        hello = {**HELLO, "saslSupportedMechs": ["SCRAM-SHA-256"]} if doc.get("saslSupportedMechs") else HELLO
        return request.ok(**{k: v for k, v in hello.items() if v is not None})
    if name in ("ping", "endsessions", "getnonce"):
        return request.ok()
    if name == "buildinfo":
        return request.ok(version="7.0.0", versionArray=[7, 0, 0, 0])
    if name == "saslstart":
        message = bytes(doc["payload"]).decode()
        bare = message.split(",", 2)[2]
        if doc.get("mechanism") != "SCRAM-SHA-256" or _fields(bare).get("n") != USER:
            return request.command_err(code=18, errmsg="Authentication failed.")
        nonce = _fields(bare)["r"] + base64.b64encode(secrets.token_bytes(18)).decode()
        first = f"r={nonce},s={base64.b64encode(SALT).decode()},i={ITERATIONS}"
        conversation = next(ids)
        with lock:
            conversations[conversation] = (bare, first, nonce)
        return request.ok(conversationId=conversation, done=False, payload=Binary(first.encode()))
    if name == "saslcontinue":
        conversation = doc["conversationId"]
        payload = bytes(doc["payload"]).decode()
        with lock:
            started = conversations.pop(conversation, None)
        if started is None:  # the client's empty last step
            return request.ok(conversationId=conversation, done=True, payload=Binary(b""))
        bare, first, nonce = started
        without_proof, proof = payload.rsplit(",p=", 1)
        message = f"{bare},{first},{without_proof}".encode()
        signature = hmac.new(STORED_KEY, message, "sha256").digest()
        client_key = bytes(a ^ b for a, b in zip(base64.b64decode(proof), signature, strict=False))
        if _fields(without_proof).get("r") != nonce or hashlib.sha256(client_key).digest() != STORED_KEY:
            return request.command_err(code=18, errmsg="Authentication failed.")
        with lock:
            authenticated.add(request.client_port)
        verifier = base64.b64encode(hmac.new(SERVER_KEY, message, "sha256").digest()).decode()
        return request.ok(conversationId=conversation, done=True, payload=Binary(f"v={verifier}".encode()))
    if name not in OPEN and request.client_port not in authenticated:
        return request.command_err(code=13, errmsg=f"command {name} requires authentication")
    with lock:
        return _data_command(request, name, database, doc)


def _data_command(request, name: str, database: str, doc: dict) -> bool:  # noqa: ANN001
    collection = str(doc.get(next(iter(doc))))
    if name == "insert":
        documents = list(doc.get("documents") or []) + list(request.docs[1:])
        for document in documents:
            document.setdefault("_id", ObjectId())
        _save(database, collection, _load(database, collection) + documents)
        return request.ok(n=len(documents))
    if name == "find":
        found = [d for d in _load(database, collection) if _matches(d, doc.get("filter") or {})]
        return request.ok(cursor={"id": 0, "ns": f"{database}.{collection}", "firstBatch": found})
    if name == "count":
        return request.ok(n=sum(1 for d in _load(database, collection) if _matches(d, doc.get("query") or {})))
    if name == "delete":
        kept = _load(database, collection)
        removed = 0
        for statement in doc.get("deletes") or []:
            before = len(kept)
            kept = [d for d in kept if not _matches(d, statement.get("q") or {})]
            removed += before - len(kept)
        _save(database, collection, kept)
        return request.ok(n=removed)
    if name == "drop":
        _collection_file(database, collection).unlink(missing_ok=True)
        return request.ok()
    return request.command_err(code=59, errmsg=f"no such command: '{name}'")


if __name__ == "__main__":
    DATA.mkdir(parents=True, exist_ok=True)
    server = MockupDB(port=27017, request_timeout=30)
    server._address = ("0.0.0.0", 27017)  # mockupdb binds localhost only; a database container serves its network
    server.autoresponds(handle)
    server.run()
    print(json.dumps({"msg": "Waiting for connections", "port": 27017}), flush=True)
    threading.Event().wait()
