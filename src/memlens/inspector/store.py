"""The run directory: what the inspector writes, and reading it back.

Layout (all paths relative to the run directory)::

    meta.json                  run settings and status ("running", "complete", "interrupted")
    tensors/<id>/stats.jsonl   one JSON object per sample of one tracked tensor
    tensors/<id>/heatmaps.f32  pooled heatmaps, raw little-endian float32, appended
    activation_bytes.jsonl     one line per sampled step: bytes of each module's outputs
    annotations.json           the same, as one document for memlens memory views
    alerts.jsonl               one line per alert
    dashboard.html, plots/*.png, videos/*.mp4|*.gif   rendered from the above

Everything is appended line by line (heatmap bytes first, then the line that points at
them), and whole-file documents are written to a temporary name and renamed, so a run that
is interrupted at any moment leaves files that read back: a torn last line is skipped.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from memlens.errors import MemlensError
from memlens.inspector.stats import STAT_NAMES

FORMAT = "memlens.inspect/1"
ANNOTATIONS_FORMAT = "memlens.inspect.annotations/1"


def tensor_dir_name(key: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", key).strip("_")[:80] or "tensor"
    return f"{safe}-{hashlib.sha1(key.encode()).hexdigest()[:8]}"


def _clean(v: float) -> float | None:
    return v if isinstance(v, (int, float)) and math.isfinite(v) else None


def atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        with contextlib.suppress(OSError):
            os.fsync(fh.fileno())
    os.replace(tmp, path)


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=1, allow_nan=False))


# What a new run in the same directory replaces (and nothing else there).
_RUN_FILES = (
    "meta.json",
    "activation_bytes.jsonl",
    "annotations.json",
    "alerts.jsonl",
    "dashboard.html",
)
_RUN_DIRS = ("tensors", "plots", "videos")


def start_run(root: Path, meta: dict[str, Any]) -> None:
    """Make ``root`` a fresh run directory: an earlier run's files in it are deleted (only
    those: the user's other files stay), then ``meta.json`` is written."""
    root.mkdir(parents=True, exist_ok=True)
    if (root / "meta.json").exists():
        for name in _RUN_FILES:
            with contextlib.suppress(FileNotFoundError):
                (root / name).unlink()
        for name in _RUN_DIRS:
            shutil.rmtree(root / name, ignore_errors=True)
    atomic_write_json(root / "meta.json", meta)


def mark_unfinished(root: Path, status: str, info: dict[str, Any]) -> None:
    """Say in ``meta.json`` that the background process did not finish: the run's end (when
    it never got to write it) or an incomplete rendering. Never raises."""
    path = root / "meta.json"
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        meta = {}
    if meta.get("status") in (None, "running"):
        meta.update(info)
        meta["status"] = "interrupted" if status == "complete" else status
        meta["end_reason"] = f"{status}; background process did not finish"
    else:
        meta["rendering"] = "incomplete: run `memlens inspect-report` on this directory"
    with contextlib.suppress(OSError, ValueError):
        atomic_write_json(path, meta)


def append_lines(path: Path, objs: Iterable[dict[str, Any]]) -> None:
    text = "".join(json.dumps(o, allow_nan=False, separators=(",", ":")) + "\n" for o in objs)
    if text:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(text)


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Lines of a JSONL file; a torn or corrupt line (from a hard kill) is skipped."""
    if not path.exists():
        return
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.endswith("\n"):
                break
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                yield obj


def sample_line(
    key: str, module: str, kind: str, meta: dict[str, Any], summary: dict[str, Any], heat_ref: Any
) -> dict[str, Any]:
    line = {
        "key": key,
        "module": module,
        "kind": kind,
        "step": meta["step"],
        "time": meta["time"],
        "shape": list(meta["shape"]),
        "dtype": meta["dtype"],
        "numel": meta["numel"],
        "bytes": meta["bytes"],
    }
    for name in STAT_NAMES:
        line[name] = _clean(summary[name])
    line["hist"] = [int(c) for c in summary["hist"]]
    line["hist_lo"] = _clean(summary["hist_lo"])
    line["hist_hi"] = _clean(summary["hist_hi"])
    line["heat"] = heat_ref
    return line


@dataclass
class TensorSeries:
    """Every saved sample of one tracked tensor, as arrays over samples."""

    key: str
    module: str
    kind: str
    dir: Path
    steps: np.ndarray
    times: np.ndarray
    stats: dict[str, np.ndarray]
    bytes: np.ndarray
    hist: np.ndarray  # (samples, bins)
    hist_lo: np.ndarray
    hist_hi: np.ndarray
    shapes: list[list[int]]
    dtypes: list[str]
    heat_refs: list[Any]  # [offset, h, w] or None per sample

    def __len__(self) -> int:
        return len(self.steps)

    @property
    def has_heatmaps(self) -> bool:
        return any(r is not None for r in self.heat_refs)

    def heatmaps(self) -> list[tuple[int, np.ndarray]]:
        """(step, heatmap) for every sample that has one."""
        path = self.dir / "heatmaps.f32"
        if not path.exists():
            return []
        n = path.stat().st_size // 4  # a torn tail (hard kill mid-write) is ignored
        data = np.memmap(path, dtype="<f4", mode="r", shape=(n,)) if n else np.zeros(0, "<f4")
        out = []
        for step, ref in zip(self.steps.tolist(), self.heat_refs, strict=True):
            if ref is None:
                continue
            off, h, w = ref
            start = off // 4
            if start + h * w > data.size:
                continue
            out.append((int(step), np.array(data[start : start + h * w]).reshape(h, w)))
        return out


def _nan(v: Any) -> float:
    return math.nan if v is None else float(v)


def load_series(directory: Path) -> TensorSeries | None:
    lines = list(read_jsonl(directory / "stats.jsonl"))
    if not lines:
        return None
    bins = max(len(ln.get("hist") or []) for ln in lines)
    hist = np.zeros((len(lines), bins), dtype=np.int64)
    for i, ln in enumerate(lines):
        h = ln.get("hist") or []
        hist[i, : len(h)] = h
    first = lines[0]
    return TensorSeries(
        key=first["key"],
        module=first.get("module", ""),
        kind=first.get("kind", ""),
        dir=directory,
        steps=np.array([ln["step"] for ln in lines], dtype=np.int64),
        times=np.array([ln.get("time", math.nan) for ln in lines], dtype=np.float64),
        stats={n: np.array([_nan(ln.get(n)) for ln in lines]) for n in STAT_NAMES},
        bytes=np.array([ln.get("bytes", 0) for ln in lines], dtype=np.int64),
        hist=hist,
        hist_lo=np.array([_nan(ln.get("hist_lo")) for ln in lines]),
        hist_hi=np.array([_nan(ln.get("hist_hi")) for ln in lines]),
        shapes=[ln.get("shape", []) for ln in lines],
        dtypes=[ln.get("dtype", "") for ln in lines],
        heat_refs=[ln.get("heat") for ln in lines],
    )


@dataclass
class Run:
    """A run directory read back: settings, tensors, activation bytes and alerts."""

    path: Path
    meta: dict[str, Any]
    tensors: dict[str, TensorSeries] = field(default_factory=dict)
    activation_bytes: list[dict[str, Any]] = field(default_factory=list)
    alerts: list[dict[str, Any]] = field(default_factory=list)

    def series(self, key: str) -> TensorSeries:
        return self.tensors[key]


def load_run(path: str | os.PathLike[str]) -> Run:
    root = Path(path)
    if not root.is_dir():
        raise MemlensError(f"{root}: not a directory (expected an inspector run directory)")
    meta_path = root / "meta.json"
    meta: dict[str, Any] = {}
    if meta_path.exists():
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise MemlensError(f"{meta_path}: not valid JSON ({exc})") from exc
    elif not (root / "tensors").is_dir():
        raise MemlensError(f"{root}: no meta.json and no tensors/: not an inspector run directory")
    run = Run(path=root, meta=meta)
    tdir = root / "tensors"
    if tdir.is_dir():
        for d in sorted(p for p in tdir.iterdir() if p.is_dir()):
            s = load_series(d)
            if s is not None:
                run.tensors[s.key] = s
    run.activation_bytes = list(read_jsonl(root / "activation_bytes.jsonl"))
    run.alerts = list(read_jsonl(root / "alerts.jsonl"))
    return run


def annotations_document(rows: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    """The annotations.json document (see docs/inspect.md, "Annotations")."""
    modules = sorted({m for r in rows for m in r.get("modules", {})})
    return {
        "format": ANNOTATIONS_FORMAT,
        "kind": "activation_bytes",
        "unit": "bytes",
        "description": (
            "Bytes of the tensors each tracked module returned from forward, per sampled step. "
            "time_us is wall-clock microseconds since the epoch at the step's first capture."
        ),
        "run": {k: meta.get(k) for k in ("model", "started", "every", "max_per_second")},
        "modules": modules,
        "steps": [
            {
                "step": r["step"],
                "time_us": r.get("time_us"),
                "end_time_us": r.get("end_time_us", r.get("time_us")),
                "total_bytes": int(sum(r.get("modules", {}).values())),
                "modules": r.get("modules", {}),
            }
            for r in rows
        ],
    }
