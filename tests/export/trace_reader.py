"""A strict reader of Trace Event Format JSON (the subset Perfetto and chrome://tracing
import from a torch.profiler trace), for the fast checks of what `memlens export` writes:
it fails on anything a viewer would reject or silently mis-draw (unknown phases,
non-numeric ts, a counter arg that is not a number, an E without its B, a negative
duration). The same files are also read by Perfetto's own trace processor in
test_export_perfetto.py (slower: a browser).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PHASES = set("BEXiIICbneMsftPNODR") | {"C"}


@dataclass
class Trace:
    events: list[dict[str, Any]]
    process_names: dict[Any, str]


@dataclass
class Slice:
    process: str
    tid: Any
    name: str
    ts: float
    dur: float


def read_tef(path: Path) -> Trace:
    data = json.loads(Path(path).read_text())
    events = data["traceEvents"] if isinstance(data, dict) else data
    assert isinstance(events, list)
    names: dict[Any, str] = {}
    for e in events:
        ph = e["ph"]
        assert ph in PHASES, f"unknown phase {ph!r}"
        if ph == "M":
            if e["name"] == "process_name":
                names[e["pid"]] = e["args"]["name"]
            continue
        assert isinstance(e["ts"], (int, float)) and not isinstance(e["ts"], bool), e
        if ph == "X":
            assert e["dur"] >= 0, e
        if ph == "C":
            assert all(isinstance(v, (int, float)) for v in e["args"].values()), e
    return Trace(events, names)


def _process(trace: Trace, pid: Any) -> str:
    return trace.process_names.get(pid, str(pid))


def counter_tracks(trace: Trace) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """(process name, counter name) -> [(ts, value)] in file order; a counter event with
    several args makes one series per arg, named "name arg" (one arg: just "name")."""
    out: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for e in trace.events:
        if e["ph"] != "C":
            continue
        args = e["args"]
        for key, value in args.items():
            series = e["name"] if len(args) == 1 else f"{e['name']} {key}"
            out[(_process(trace, e["pid"]), series)].append((e["ts"], value))
    return dict(out)


def slices(trace: Trace) -> list[Slice]:
    """Complete events, and B/E pairs matched per (pid, tid) as a stack."""
    out: list[Slice] = []
    open_: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    for e in trace.events:
        key = (e.get("pid"), e.get("tid"))
        if e["ph"] == "X":
            out.append(Slice(_process(trace, e["pid"]), e.get("tid"), e["name"], e["ts"], e["dur"]))
        elif e["ph"] == "B":
            open_[key].append(e)
        elif e["ph"] == "E":
            assert open_[key], f"E without B: {e}"
            b = open_[key].pop()
            assert e["ts"] >= b["ts"], (b, e)
            out.append(
                Slice(
                    _process(trace, e["pid"]), e.get("tid"), b["name"], b["ts"], e["ts"] - b["ts"]
                )
            )
    return out
