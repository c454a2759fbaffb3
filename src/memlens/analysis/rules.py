"""Custom rules: names mapped to regular expressions over frames; first match wins.

File format (JSON or YAML):
    {"rules": [{"name": "attention", "pattern": "attn|attention"}, ...]}
or the short form, a mapping in file order:
    {"attention": "attn|attention", "mlp": "mlp|ffn"}
A pattern is searched (re.search) in each frame's "filename:line:name" text; an allocation
takes the first rule (in file order) matching any frame of its stack, else "other".
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from memlens.analysis.curves import group_summary
from memlens.analysis.events import event_info
from memlens.analysis.matching import frame_texts
from memlens.analysis.results import RuleRow, RulesResult
from memlens.errors import MemlensError
from memlens.snapshot.model import DeviceTrace, Snapshot

OTHER = "other"


@dataclass(frozen=True)
class Rule:
    name: str
    pattern: str
    description: str = ""


def parse_rules(data: Any) -> list[Rule]:
    """Rules from an already-parsed JSON/YAML object (either form above). MemlensError on
    a bad shape or an invalid regex. A rule named "other" is refused (it is the rest)."""
    if isinstance(data, dict) and "rules" in data and isinstance(data["rules"], list):
        items = []
        for i, r in enumerate(data["rules"]):
            if not isinstance(r, dict) or "name" not in r or "pattern" not in r:
                raise MemlensError(f"rule {i + 1}: each rule needs a name and a pattern")
            items.append((str(r["name"]), r["pattern"], str(r.get("description", ""))))
    elif isinstance(data, dict):
        items = [(str(k), v, "") for k, v in data.items()]
    else:
        raise MemlensError(
            'a rules file holds {"rules": [{"name": ..., "pattern": ...}]} or {name: pattern}'
        )
    rules, seen = [], set()
    for name, pattern, desc in items:
        if not isinstance(pattern, str) or not pattern:
            raise MemlensError(f"rule {name!r}: the pattern must be a non-empty string")
        if name == OTHER:
            raise MemlensError(f'rule name "{OTHER}" is reserved for what no rule matches')
        if name in seen:
            raise MemlensError(f"rule {name!r} appears twice")
        seen.add(name)
        try:
            re.compile(pattern)
        except re.error as exc:
            raise MemlensError(
                f"rule {name!r}: bad regular expression {pattern!r}: {exc}"
            ) from None
        rules.append(Rule(name, pattern, desc))
    if not rules:
        raise MemlensError("the rules file has no rules")
    return rules


def load_rules(path: str) -> list[Rule]:
    """Read a .json / .yaml / .yml rules file (YAML needs PyYAML: memlens[rules])."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise MemlensError(f"cannot read rules file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise MemlensError(f"{path}: not a text file (rules are JSON or YAML)") from None
    if p.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise MemlensError("YAML rules need PyYAML: pip install 'memlens[rules]'") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise MemlensError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise MemlensError(f"{path}: not valid JSON: {exc}") from None
    return parse_rules(data)


def rule_of_stacks(snap: Snapshot, rules: list[Rule]) -> np.ndarray:
    """Per stack id: index of the first matching rule, or len(rules) for "other"."""
    texts = frame_texts(snap)
    k = len(rules)
    # per frame: the first rule that matches it (k: none)
    first = np.full(len(texts), k, dtype=np.int64)
    for j in range(k - 1, -1, -1):
        rx = re.compile(rules[j].pattern)
        hit = np.fromiter((rx.search(t) is not None for t in texts), dtype=bool, count=len(texts))
        first[hit] = j
    st = snap.stacks
    if len(st) == 0:
        return np.zeros(0, dtype=np.int64)
    per = first[st.frame_ids]
    # min over each stack's frames; empty stacks (none here: -1 marks "no frames") get k
    padded = np.concatenate([per, [k]])
    starts = st.offsets[:-1]
    out = np.minimum.reduceat(padded, np.minimum(starts, len(per)))
    empty = st.offsets[1:] == starts
    out[empty] = k
    return out.astype(np.int64)


def rule_of_allocations(dev: DeviceTrace, rules: list[Rule]) -> np.ndarray:
    """Rule index per allocation row (len(rules) = "other", also for rows with no stack)."""
    per_stack = rule_of_stacks(dev.snapshot, rules)
    out = np.full(dev.n_allocations, len(rules), dtype=np.int64)
    has = dev.alloc_stack >= 0
    out[has] = per_stack[dev.alloc_stack[has]]
    return out


def rules_analysis(
    dev: DeviceTrace,
    rules: list[Rule],
    *,
    event: int | None = None,
    points: int = 400,
    top: int = 3,
    hide_patterns: Sequence[str] | None = None,
) -> RulesResult:
    """Memory per rule at `event` (default: the peak) and over time.

    Returns {"device", "event", "time_us", "action", "active_bytes", "reserved_bytes",
    "rules": [{"name", "pattern", "description", "bytes", "count", "peak_bytes",
    "peak_event", "allocated_bytes", "allocated_count", "top_sites"}] (file order, "other"
    last, pattern None), "curve": {"event": [...], "bytes": {name: [...]}}}.
    """
    event = dev.peak_event_index if event is None else int(event)
    names = [r.name for r in rules] + [OTHER]
    items, curve = group_summary(
        dev,
        rule_of_allocations(dev, rules),
        names,
        event=event,
        points=points,
        top=top,
        hide_patterns=hide_patterns,
    )
    rows: list[RuleRow] = []
    for j, item in enumerate(items):
        r = rules[j] if j < len(rules) else None
        rows.append(
            {**item, "pattern": r.pattern if r else None, "description": r.description if r else ""}
        )
    return {"device": dev.device, **event_info(dev, event), "rules": rows, "curve": curve}


def check_rules_file(options: Mapping[str, Any]) -> None:
    """`memlens rules` reads and checks its rules file before the snapshot."""
    load_rules(options["rules_file"])


def rules_output(
    dev: DeviceTrace,
    rules_file: str,
    *,
    event: int | None = None,
    points: int = 400,
    top: int = 3,
    hide_patterns: Sequence[str] | None = None,
) -> RulesResult:
    """`memlens rules`: rules_analysis() with the rules of `rules_file` (JSON or YAML)."""
    rules = load_rules(rules_file)
    return rules_analysis(
        dev, rules, event=event, points=points, top=top, hide_patterns=hide_patterns
    )
