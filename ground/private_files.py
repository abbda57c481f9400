"""Files only their owner may read (secrets, logs that may hold one): created so, never chmod-ed afterwards.

A file created with the default umask and then chmod-ed is readable by anyone for the moment in between;
`os.open` with the mode and O_CREAT gives it the mode as it is made.
"""

from __future__ import annotations

import os
from pathlib import Path

PRIVATE = 0o600


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path`, mode 0600 from its creation (an existing file is brought to 0600 first)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE)
    try:
        os.fchmod(fd, PRIVATE)
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def create_private_once(path: Path, text: str) -> None:
    """Make `path` (0600) holding `text` unless it exists; a reader sees no file or the whole of one, never a part.

    Two processes making the same secret at once (two `cdcpipe` commands on a fresh stack) each write their
    own file under a name of their own and link it into place; the link fails for the second, which keeps
    the first one's. Opened with O_TRUNC in place, one could read the file empty, or use a value the other
    then overwrote.
    """
    draft = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}")
    write_private(draft, text)
    try:
        os.link(draft, path)
    except FileExistsError:
        pass  # another made it first: theirs is the one
    finally:
        draft.unlink()


def open_private_log(path: Path) -> int:
    """A file descriptor appending to `path`, created 0600: a service's log may print a secret."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE)
    os.fchmod(fd, PRIVATE)
    return fd
