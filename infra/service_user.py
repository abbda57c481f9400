"""The system users the stack's Java services run as when the stack is started as root: one per service.

Postgres refuses root and runs as `postgres`; Kafka, Connect, the object store and Spark would run as root
unless told otherwise, and a broker or a connector plugin with a flaw would then own the machine. Started by
root, each runs as a system user of its own (`cdcpipe-kafka`, `cdcpipe-connect`, `cdcpipe-s3`,
`cdcpipe-spark`; made on first use, no login, no home), owning only the files it writes or must read
privately. One user per service is what keeps code a job runs on the cluster (a projection, a UDF, a library
it imports) from reading the broker's super-user password or Connect's: the executors run as the Spark user,
which owns none of them. Root, which starts and stops them, reads everything anyway. Started by anyone else,
they run as that user, as any process they start would.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from pathlib import Path

from infra.config import MAX_KAFKA_NODES
from infra.errors import ServiceStartError

# Service -> its system user. The Spark master and workers share one: the workers' executors run as it.
SERVICE_USERS = {
    "kafka": "cdcpipe-kafka",
    "connect": "cdcpipe-connect",
    "s3": "cdcpipe-s3",
    "spark": "cdcpipe-spark",
    "prometheus": "cdcpipe-prometheus",
    "collector": "cdcpipe-collector",
    # The further nodes of a Kafka cluster: each its own, so that none may read another's data or key.
    **{f"kafka-{n}": f"cdcpipe-kafka-{n}" for n in range(2, MAX_KAFKA_NODES + 1)},
}


def service_user(service: str) -> str | None:
    """The service's own system user when started as root (made if missing), else None: it runs as the caller."""
    if os.geteuid() != 0:
        return None
    user = SERVICE_USERS[service]
    try:
        pwd.getpwnam(user)
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
                user,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if made.returncode != 0 and "already exists" not in made.stderr:
            raise ServiceStartError(
                f"creating the system user {user!r} for the stack's {service} failed: "
                f"{made.stderr.strip()}; create it (`useradd --system --user-group {user}`) or start the "
                "stack as a user other than root"
            ) from None
    return user


def private_folder(path: Path, mode: int = 0o700) -> None:
    """`path` a folder (made if missing, its parents too) of `mode`: never through a symbolic link in its place.

    Root sets the mode at every start, in folders a service user may write to: that user could swap the folder
    for a link to anything (/etc), which a chmod that follows links would open or close. Opened with
    O_NOFOLLOW, a link is refused, naming it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_symlink():
        path.mkdir(exist_ok=True)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        raise ServiceStartError(
            f"{path} is not a folder ({exc.strerror}): the stack keeps a folder of its own there, and a symbolic "
            f"link in its place is refused; remove it (`rm {path}`) and start again"
        ) from exc
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def hand_over(user: str | None, *paths: Path) -> None:
    """Make `user` the owner of each path (a folder with everything in it); modes are kept. None: nothing.

    No link is followed: a path that is a symbolic link is refused, and inside a folder a link is handed
    over itself, never what it points to.
    """
    if user is None:
        return
    entry = pwd.getpwnam(user)
    for path in paths:
        if path.is_symlink():
            raise ServiceStartError(
                f"{path} is a symbolic link where the stack keeps a file or folder of its own for {user}: "
                f"remove it (`rm {path}`) and start again"
            )
        if not path.exists():
            continue
        os.chown(path, entry.pw_uid, entry.pw_gid, follow_symlinks=False)
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
    # Other local users get nothing: the lake holds every event. The group class is the mask, not a group.
    grant = f"u:{user}:rwX,d:u:{user}:rwX,m::rwX,d:m::rwX,o::---,d:o::---,g::---,d:g::---"
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


def closed_parent(path: Path) -> Path | None:
    """The first folder above `path` that other users may not traverse (/root, say), or None."""
    return next((parent for parent in reversed(path.resolve().parents) if not parent.stat().st_mode & 0o001), None)
