"""Write one file under a folder without following a symbolic link anywhere below it:
`memlens skill install` writes into folders a project can ship (.claude/skills/...,
.cursor/rules), where a link could point the write at another file.

Each folder below `base` is opened with O_NOFOLLOW|O_DIRECTORY (created first if absent),
relative to the one above it, so a link among them is refused, not followed, and cannot be
swapped in between a check and the write. The text goes to a temporary file of an
unpredictable name created with O_CREAT|O_EXCL|O_NOFOLLOW in the target folder, then
renamed over the file (whole or not at all, for a host reading it meanwhile; the rename
replaces a link at the file's name, never the file it points to). `base` itself (a home
folder) may be a link: it is the user's own choice.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from pathlib import Path

from memlens.errors import MemlensError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0)
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)


def _open_below(base: Path, parts: tuple[str, ...]) -> int:
    """A descriptor of base/parts..., each folder made if absent and refused if a link."""
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    where = base
    try:
        for part in parts:
            where = where / part
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o777, dir_fd=fd)
            try:
                inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise MemlensError(
                        f"{where} is a symbolic link or not a folder: not writing through it"
                    ) from None
                raise
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_below(base: Path, target: Path, text: str) -> None:
    """Write `text` to `target` (under `base`) as the module says."""
    parts = target.relative_to(base).parts
    folder = _open_below(base, parts[:-1])
    try:
        tmp = f".{parts[-1]}.{secrets.token_hex(8)}.tmp"
        fd = os.open(tmp, _NEW_FILE, 0o666, dir_fd=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, parts[-1], src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            os.unlink(tmp, dir_fd=folder)
            raise
    finally:
        os.close(folder)
