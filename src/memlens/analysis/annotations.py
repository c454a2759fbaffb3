"""Annotation files: stages from outside the snapshot (`--annotations PATH`), as PyTorch's
external_annotations entries ({"name", "stage": "START"|"END", "device", "time_us"}).

A file is a JSON list of such entries, written by any tool; an inspector run directory
(memlens.inspector.annotations) is read by the inspector, which knows its format."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, TypeGuard

from memlens.errors import MemlensError


def read_json(path: str | os.PathLike[str]) -> tuple[Path, Any]:
    """(the file read, its JSON): `path` itself, or a run directory's annotations.json."""
    p = Path(path)
    if p.is_dir():
        p = p / "annotations.json"
    try:
        return p, json.loads(p.read_text("utf-8"))
    except FileNotFoundError:
        raise MemlensError(
            f"{p}: no such file (an inspector run directory has annotations.json)"
        ) from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # ValueError: 5,000 digits too
        raise MemlensError(f"{p}: not readable as JSON ({exc})") from None
    except RecursionError:
        raise MemlensError(f"{p}: not readable as JSON (nested too deeply)") from None


def annotation_entries(p: Path, doc: Any, device: int) -> list[dict[str, Any]]:
    """The entries of a JSON list read from `p`, on `device` unless an entry says; one
    MemlensError line for anything else."""
    if not isinstance(doc, list):
        raise MemlensError(
            f"{p}: expected an inspector annotations.json or a JSON list of annotations"
        )
    for i, a in enumerate(doc):
        if (
            not isinstance(a, dict)
            or not isinstance(a.get("name"), str)
            or a.get("stage") not in ("START", "END")
            or not is_int(a.get("time_us"), 0, MAX_TIME_US)
            or not is_int(a.get("device", 0), 0, MAX_DEVICE)
        ):
            raise MemlensError(
                f"{p}: entry {i} is not an annotation "
                '({"name": str, "stage": "START" or "END", "time_us": int 0..2^62, '
                '"device": int 0..2^20, optional})'
            )
    return [{"device": device, **a} for a in doc]


# a side input is checked as a snapshot is: times as the loader accepts them (int64, and
# below 2^62 so that differences cannot overflow), devices as segment devices
MAX_TIME_US = (1 << 62) - 1
MAX_DEVICE = 1 << 20


def is_int(v: Any, lo: int, hi: int) -> TypeGuard[int]:
    """An integer (not a bool) within lo..hi."""
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi
