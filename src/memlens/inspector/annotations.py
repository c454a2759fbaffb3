"""The inspector's activation bytes as PyTorch `external_annotations`, so a memory snapshot
of the same run shows them: `memlens stages/view/tui/report SNAP --annotations RUN_DIR`.

Each sampled step becomes one START/END range over that step's forward pass (from the first
to the last watched module's output, on the snapshot's clock: epoch microseconds), named
with the bytes the watched modules returned and the step, e.g. ``forward activations 45.21
MiB (largest blocks.3.mlp 8.00 MiB)#20``. A memory view then draws it as a stage band, and
`memlens stages` puts the allocator's view of that forward pass (memory at start and end,
peak inside, bytes allocated) next to it. Reading needs no torch.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from memlens.analysis.annotations import MAX_TIME_US, annotation_entries, is_int, read_json
from memlens.errors import MemlensError
from memlens.inspector.store import ANNOTATIONS_FORMAT
from memlens.units import format_bytes


def _checked(p: Path, doc: Any) -> dict[str, Any]:
    if not isinstance(doc, dict) or doc.get("format") != ANNOTATIONS_FORMAT:
        raise MemlensError(f"{p}: not an inspector annotations file (format {ANNOTATIONS_FORMAT})")
    if not isinstance(doc.get("steps"), list):
        raise MemlensError(f"{p}: 'steps' is not a list")
    return doc


def read_activation_annotations(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The annotations.json document of an inspector run (`path`: the run directory or the
    file itself). Raises MemlensError with one line when it is missing or not one."""
    return _checked(*read_json(path))


def activation_annotations(path: str | os.PathLike[str], device: int = 0) -> list[dict[str, Any]]:
    """PyTorch-format annotation entries (START/END pairs) for every sampled step with a
    time; see the module docstring for the names."""
    return _activation_entries(read_activation_annotations(path), device)


def _activation_entries(doc: dict[str, Any], device: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for row in doc["steps"]:
        if not isinstance(row, dict):
            continue
        t0, t1 = row.get("time_us"), row.get("end_time_us", row.get("time_us"))
        if not is_int(t0, 0, MAX_TIME_US) or not is_int(t1, 0, MAX_TIME_US):
            continue  # a step without a clock cannot be placed on the trace
        modules = row.get("modules") or {}
        if not isinstance(modules, dict) or not all(
            is_int(b, 0, 1 << 53) for b in modules.values()
        ):
            raise MemlensError("an inspector step's modules are not {name: bytes}")
        total = row.get("total_bytes", sum(modules.values()))
        if not is_int(total, 0, 1 << 62):
            raise MemlensError("an inspector step's total_bytes is not a byte count")
        name = f"forward activations {format_bytes(total)}"
        if modules:
            top = max(modules, key=lambda m: modules[m])
            name += f" (largest {top} {format_bytes(int(modules[top]))})"
        # "#step" last, as in ProfilerStep#N: steps with the same activations group as one
        # repeated stage, so `memlens stages`/`leaks` compare them step by step
        name += f"#{row.get('step')}"
        out.append({"name": name, "stage": "START", "device": device, "time_us": t0})
        out.append({"name": name, "stage": "END", "device": device, "time_us": max(t0, t1)})
    return out


def annotations_from(path: str | os.PathLike[str], device: int = 0) -> list[dict[str, Any]]:
    """Annotations to add to a snapshot, from `path`: an inspector run (directory or its
    annotations.json), or a JSON list of PyTorch-style entries ({"name", "stage":
    "START"|"END", "time_us", optional "device"}) written by any other tool."""
    p, doc = read_json(path)
    if isinstance(doc, dict) and doc.get("format") == ANNOTATIONS_FORMAT:
        return _activation_entries(_checked(p, doc), device)
    return annotation_entries(p, doc, device)
