"""The stack's generated secrets: made on first use, kept in state/secrets/ (0600), never printed."""

from __future__ import annotations

import secrets
from pathlib import Path

from ground.private_files import create_private_once
from infra.config import StackSettings


def secret(settings: StackSettings, name: str) -> str:
    """A generated secret of the stack, kept in state/secrets/<name> (mode 0600), made on first use."""
    folder = settings.state / "secrets"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / name
    if not path.exists():
        create_private_once(path, secrets.token_urlsafe(24) + "\n")
    return path.read_text().strip()


def secret_file(settings: StackSettings, name: str) -> Path:
    """The file that holds a generated secret (made on first use): a path any command may print."""
    secret(settings, name)
    return settings.state / "secrets" / name
