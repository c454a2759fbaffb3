"""Annotation files: stages from outside the snapshot (`--annotations PATH`), as PyTorch's
external_annotations entries ({"name", "stage": "START"|"END", "device", "time_us"}).

A file is a JSON list of such entries, written by any tool; an inspector run directory
(memlens.inspector.annotations) is read by the inspector, which knows its format."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

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
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MemlensError(f"{p}: not readable as JSON ({exc})") from None


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
            or not isinstance(a.get("time_us"), int)
        ):
            raise MemlensError(
                f"{p}: entry {i} is not an annotation "
                '({"name": str, "stage": "START" or "END", "time_us": int})'
            )
    return [{"device": device, **a} for a in doc]
