"""Paths a command or a tool reads, checked before anything opens them, so that a bad name
is one foreseen error line instead of an OSError or ValueError from deep inside a reader.

Refused: a NUL character (no file system can name it; Python raises ValueError), a name
longer than the system allows (ENAMETOOLONG), and anything that exists but is not a regular
file after symbolic links are followed: a device (/dev/zero never ends), a pipe or socket
(blocks), /proc/self/mem (EIO on read). A name that does not exist is left to the reader
(its own "no such file" line).
"""

from __future__ import annotations

import os
import stat

from memlens.errors import MemlensError

# kernel file systems whose entries stat as regular files but are not data: /proc/self/mem
# fails on read (EIO), /proc/kmsg blocks, /sys files are a few bytes made on each read
PSEUDO = ("/proc", "/sys", "/dev")
# Linux's PATH_MAX and NAME_MAX; other systems allow no more than these in practice
PATH_MAX = 4096
NAME_MAX = 255
SHOWN = 300  # characters of an overlong name quoted in an error


def shown(path: str) -> str:
    """`path` as an error quotes it: its start and length when it is long."""
    return path if len(path) <= SHOWN else f"{path[:SHOWN]}… ({len(path):,} characters)"


def check_name(path: str) -> None:
    """Fail on a name that cannot be a file's: a NUL or over the system's lengths."""
    if "\0" in path:
        raise MemlensError(f"{shown(path.replace(chr(0), '?'))}: a path cannot contain NUL")
    if len(os.fsencode(path)) > PATH_MAX or any(
        len(os.fsencode(part)) > NAME_MAX for part in path.split(os.sep)
    ):
        raise MemlensError(f"{shown(path)}: the path is longer than the system allows")


def check_input(path: str, *, dir_okay: bool = False, given: str | None = None) -> None:
    """Fail unless `path` names a regular file (or, with `dir_okay`, a folder) or nothing;
    the error names it as `given` (the name before it was resolved) when there is one."""
    check_name(path)
    name = shown(given if given is not None else path)
    try:
        mode = os.stat(path).st_mode  # follows symbolic links: what a reader would open
    except FileNotFoundError:
        return
    except OSError as exc:
        raise MemlensError(f"{name}: cannot read it: {exc.strerror}") from None
    real = os.path.realpath(path)
    pseudo = next((p for p in PSEUDO if real == p or real.startswith(p + "/")), None)
    if pseudo is not None:
        raise MemlensError(f"{name}: not a regular file (a kernel file under {pseudo})")
    if stat.S_ISREG(mode) or (dir_okay and stat.S_ISDIR(mode)):
        return
    kind = "a folder" if stat.S_ISDIR(mode) else "a device, pipe or socket"
    raise MemlensError(f"{name}: not a regular file ({kind})")
