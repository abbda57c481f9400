"""Postgres SCRAM-SHA-256 verifiers: a role's password stored as Postgres keeps it, never in clear."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets


def scram_verifier(password: str, *, salt: bytes | None = None, iterations: int = 4096) -> str:
    """The SCRAM-SHA-256 verifier Postgres keeps for `password` (RFC 5802/7677, Postgres's own format)."""
    salt = salt if salt is not None else secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    stored_key = hashlib.sha256(client_key).digest()
    server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    b64 = base64.b64encode
    return f"SCRAM-SHA-256${iterations}:{b64(salt).decode()}${b64(stored_key).decode()}:{b64(server_key).decode()}"
