"""A place in the lake: a local folder or an `s3a://bucket/key` object-store prefix, read the same way.

Spark reaches either through Hadoop (`str(path)` is what it is given); the driver itself reads and writes
the few small files cdcpipe keeps beside Spark's (location pointers, progress, the Delta log's newest
commits, the app id) through pyarrow's file systems. Object stores have no rename and no folders: a file
written here is one PUT (visible whole or not at all, S3 is read-after-write consistent), and a folder
exists when something is under it.
"""

from __future__ import annotations

import os
import posixpath
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from streaming_jobs.errors import StreamingError
from streaming_jobs.lake.store import LakeAccess, ObjectStoreSettings

if TYPE_CHECKING:  # pyarrow (a second of a command's start) is imported where a file is reached, not with the module
    from pyarrow import fs as pafs

OBJECT_STORE_SCHEMES = ("s3a",)


def is_url(where: str | Path) -> bool:
    """An object-store URL (scheme://...), as opposed to a local path."""
    return isinstance(where, str) and "://" in where


def check_lake(where: str) -> str:
    """A lake as settings give it: an absolute folder, or `s3a://bucket[/prefix]`; raises on anything else."""
    if not is_url(where):
        return str(Path(where).expanduser().resolve())
    parts = urlsplit(where)
    if parts.scheme not in OBJECT_STORE_SCHEMES:
        hint = " (Hadoop's S3 connector is s3a://)" if parts.scheme in ("s3", "s3n") else ""
        raise ValueError(
            f"{where!r}: cdcpipe's lakes are local folders or s3a://bucket/prefix URLs, not {parts.scheme}://{hint}"
        )
    if not parts.netloc:
        raise ValueError(f"{where!r} names no bucket: write s3a://bucket/prefix")
    key = posixpath.normpath(parts.path) if parts.path.strip("/") else ""
    return f"{parts.scheme}://{parts.netloc}{key.rstrip('/')}"


@dataclass(frozen=True)
class LakePath:
    """A file or folder of the lake; `str()` is what Spark and delta-rs are given."""

    url: str
    access: LakeAccess | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, where: str | Path, access: LakeAccess | None = None) -> LakePath:
        return cls(check_lake(str(where)), access)

    def __str__(self) -> str:
        return self.url

    @property
    def is_local(self) -> bool:
        return not is_url(self.url)

    def __truediv__(self, part: str | Path) -> LakePath:
        return LakePath(posixpath.join(self.url, str(part)).rstrip("/"), self.access)

    def place(self, where: str) -> LakePath:
        """`where` under this lake when relative; an absolute folder or a URL as it is (reached the same way)."""
        if is_url(where) or Path(where).is_absolute():
            return LakePath.of(where, self.access)
        return LakePath.of(str(self / where), self.access)

    @property
    def name(self) -> str:
        return posixpath.basename(self.url)

    @property
    def parent(self) -> LakePath:
        return LakePath(posixpath.dirname(self.url), self.access)

    def with_name(self, name: str) -> LakePath:
        return self.parent / name

    def local(self) -> Path:
        """The folder itself, for what only a local lake has (a tracked process's working folder)."""
        if not self.is_local:
            raise StreamingError(f"{self.url} is in an object store, not a local folder")
        return Path(self.url)

    # What the driver reads and writes itself.

    def filesystem(self) -> tuple[pafs.FileSystem, str]:
        """Pyarrow's file system of this place, and the path in it (what pyarrow's writers take)."""
        from pyarrow import fs as pafs

        if self.is_local:
            return pafs.LocalFileSystem(), self.url
        store = self.access.store if self.access else ObjectStoreSettings.load()
        parts = urlsplit(self.url)
        return store.filesystem(), parts.netloc + parts.path

    def _type(self) -> pafs.FileType:
        filesystem, path = self.filesystem()
        try:
            found: pafs.FileType = filesystem.get_file_info(path).type
            return found
        except OSError as exc:
            raise self._unreachable(exc) from exc

    def exists(self) -> bool:
        from pyarrow import fs as pafs

        return bool(self._type() != pafs.FileType.NotFound)

    def is_dir(self) -> bool:
        from pyarrow import fs as pafs

        return bool(self._type() == pafs.FileType.Directory)

    def read_text(self) -> str:
        """The file's text; FileNotFoundError when there is none."""
        filesystem, path = self.filesystem()
        try:
            with filesystem.open_input_stream(path) as stream:
                return bytes(stream.read()).decode()
        except FileNotFoundError:
            raise
        except OSError as exc:
            if "not found" in str(exc).lower() or "does not exist" in str(exc).lower():
                raise FileNotFoundError(self.url) from exc
            raise self._unreachable(exc) from exc

    def write_text(self, text: str) -> None:
        """Replace the file whole: a rename on a local disk, one PUT on an object store."""
        if self.is_local:
            path = Path(self.url)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(text)
            os.replace(tmp, path)
            return
        filesystem, path_in_store = self.filesystem()
        try:
            with filesystem.open_output_stream(path_in_store) as stream:
                stream.write(text.encode())
        except OSError as exc:
            raise self._unreachable(exc) from exc

    def names(self, prefix: str = "") -> list[str]:
        """Names of what is directly in this folder (none if it does not exist)."""
        from pyarrow import fs as pafs

        filesystem, path = self.filesystem()
        try:
            found = filesystem.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        except OSError as exc:
            raise self._unreachable(exc) from exc
        return sorted(n for n in (posixpath.basename(i.path.rstrip("/")) for i in found) if n.startswith(prefix))

    def mkdir(self) -> None:
        """Make the folder (an object store needs none: a key's prefix is its folder)."""
        if self.is_local:
            Path(self.url).mkdir(parents=True, exist_ok=True)

    def delete(self) -> None:
        """Delete the file, if it is there."""
        self._remove(tree=False)

    def delete_tree(self) -> None:
        """Delete the folder and everything in it, if it is there."""
        self._remove(tree=True)

    def _remove(self, *, tree: bool) -> None:
        if self.is_local:
            if tree:
                shutil.rmtree(self.url, ignore_errors=True)
            else:
                Path(self.url).unlink(missing_ok=True)
            return
        filesystem, path = self.filesystem()
        try:
            (filesystem.delete_dir if tree else filesystem.delete_file)(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            if "not found" not in str(exc).lower() and "does not exist" not in str(exc).lower():
                raise self._unreachable(exc) from exc

    def _unreachable(self, exc: OSError) -> StreamingError:
        where = "" if self.is_local else " (the CDCPIPE_S3_* / AWS_* settings: endpoint, region, credentials)"
        return StreamingError(f"{self.url}: {exc}; check that the lake is reachable{where}")
