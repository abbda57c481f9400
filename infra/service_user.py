"""The user the stack's Java services run as when the stack is started as root.

Postgres refuses root and runs as `postgres`; Kafka and Connect would run as root unless told otherwise, and
a broker or a connector plugin with a flaw would then own the machine. Started by root, they run as the
system user `cdcpipe` (made on first use, no login, no home), owning only the files they write or must read
privately; root, which starts and stops them, reads everything anyway. Started by anyone else, they run as
that user, as any process they start would.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from pathlib import Path

from infra.errors import ServiceStartError

SERVICE_USER = "cdcpipe"


def service_user() -> str | None:
    """`cdcpipe` when started as root (made if missing), else None: the services run as the caller."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(SERVICE_USER)
    except KeyError:
        made = subprocess.run(  # noqa: S603
            [
                shutil.which("useradd") or "/usr/sbin/useradd",
                "--system",
                "--user-group",
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                "/usr/sbin/nologin",
                SERVICE_USER,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if made.returncode != 0 and "already exists" not in made.stderr:
            raise ServiceStartError(
                f"creating the system user {SERVICE_USER!r} for the stack's Java services failed: "
                f"{made.stderr.strip()}; create it (`useradd --system --user-group {SERVICE_USER}`) or start the "
                "stack as a user other than root"
            ) from None
    return SERVICE_USER


def hand_over(user: str | None, *paths: Path) -> None:
    """Make `user` the owner of each path (a folder with everything in it); modes are kept. None: nothing."""
    if user is None:
        return
    entry = pwd.getpwnam(user)
    for path in paths:
        if not path.exists():
            continue
        os.chown(path, entry.pw_uid, entry.pw_gid)
        if path.is_dir():
            for parent, folders, files in os.walk(path):
                for name in folders + files:
                    os.chown(Path(parent) / name, entry.pw_uid, entry.pw_gid, follow_symlinks=False)


def share_folder(user: str | None, folder: Path) -> None:
    """Let `user` create and remove what it likes under `folder`, however its other writers' umask is set.

    The lake's writers are two users when the stack is started as root: the Spark executors (the service user)
    write data files into table folders that the drivers (you) created. A default ACL makes every folder and
    file made below `folder` writable by `user` as well, whoever makes it; what is already there is granted too.
    """
    if user is None:
        return
    folder.mkdir(parents=True, exist_ok=True)
    grant = f"u:{user}:rwX,d:u:{user}:rwX,m::rwX,d:m::rwX"
    done = subprocess.run(  # noqa: S603
        [shutil.which("setfacl") or "/usr/bin/setfacl", "-R", "-m", grant, str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise ServiceStartError(
            f"sharing the lake {folder} with the Spark executors' user {user!r} failed: {done.stderr.strip()}; "
            "`make install` installs setfacl (Debian package acl), and the file system must support ACLs"
        )


def can_reach(path: Path) -> bool:
    """Whether any user may traverse every folder above `path` (a checkout under /root, say, not)."""
    return all(parent.stat().st_mode & 0o001 for parent in path.resolve().parents)
