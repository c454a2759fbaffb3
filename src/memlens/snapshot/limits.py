"""Bounds on the work a snapshot may ask of us: the one place they are defined.

A snapshot can come from anyone, and pickle lets a tiny file describe a huge amount of
work: a memo index of 2^28 (a 4 GB table), a list holding its predecessor twice 32 levels
deep (2^32 items to walk from 400 bytes), 3,000 segments sharing one 3,000-block list, a
gzip stream that inflates a thousandfold. Sharing is legal (PyTorch shares every frame by
memo), so instead of refusing it we count what we materialize or walk and stop at a limit
derived from the file's size, below a generous absolute cap. Every reader (the Python
path, the compiled reader, the JSON path) takes its limits from `limits_for`.

Each limit can be raised with `memlens --limit NAME=N` or the environment variable
MEMLENS_MAX_<NAME> (0 means no limit); the error names both.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from memlens.errors import SnapshotError

MiB = 1 << 20
GiB = 1 << 30


@dataclass(frozen=True)
class _Rule:
    """limit = min(cap, max(floor, per_byte * size)); size is the (decompressed) file size."""

    floor: int
    per_byte: float
    cap: int
    what: str


# A legitimate snapshot spends at least a few bytes of pickle per item it holds (an opcode
# per value), so one item per byte, with a floor for tiny files, is generous; the caps keep
# a huge file from deriving an absurd limit.
RULES: dict[str, _Rule] = {
    "items": _Rule(1_000_000, 1.0, 4_000_000_000, "values walked while reading"),
    "memo": _Rule(1_000_000, 1.0, 1_000_000_000, "pickle memo slots"),
    "depth": _Rule(100, 0.0, 100, "levels of nested containers"),
    # pickled and JSON snapshots compress 5-30x; a gzip bomb, a thousandfold
    "decompressed": _Rule(256 * MiB, 64.0, 256 * GiB, "decompressed bytes"),
    # extra address space while the C unpickler builds the object graph (it cannot be
    # interrupted, so this is how its memo table and payloads are bounded); the scan's
    # estimate, an upper bound for every shape, is 9-14 x a real snapshot's pickle
    "memory": _Rule(1 * GiB, 32.0, 512 * GiB, "bytes of memory while unpickling"),
    # text made from the file's values (forward_frames joined, JSON of a dict where text
    # belongs, allocator_settings): one memo-shared 1 MiB string referenced a thousand
    # times is 5 KB of pickle and a GB of text, so characters are counted, not values
    "text": _Rule(64 * MiB, 16.0, 64 * GiB, "characters of text made from the snapshot's values"),
    # stages tabulated per device (annotated ranges and the steps found in the trace): each
    # costs a pass of its own in the analyses (its sites, its nesting, its comparison), about
    # 0.3 ms here; 300k annotations (13 MB) took 79 s and 1.1 GB in `stages`
    "stages": _Rule(
        100_000, 0.0, 100_000, "stages (annotated ranges and steps found in the trace)"
    ),
}


class LimitExceeded(SnapshotError):
    """A hostile-input limit was reached; the message says which and how to raise it."""

    def __init__(self, name: str, limit: int, detail: str = "", source: str = "") -> None:
        self.name = name
        self.limit = limit
        self.detail = detail
        rule = RULES[name]
        suggest = max(limit * 4, 1)
        extra = f" ({detail})" if detail else ""
        where = f"{source}: " if source else ""
        super().__init__(
            f"{where}stopped: more than {limit:,} {rule.what}{extra}, the '{name}' limit for a file "
            f"this size (a crafted file?); if you trust it, raise it with "
            f"`memlens --limit {name}={suggest}` or MEMLENS_MAX_{name.upper()}={suggest} "
            "(0 = no limit)"
        )

    def at(self, source: str) -> LimitExceeded:
        """The same error naming the file it happened in."""
        return LimitExceeded(self.name, self.limit, self.detail, source)


@dataclass(frozen=True)
class Limits:
    items: int
    memo: int
    depth: int
    decompressed: int
    memory: int
    text: int
    stages: int

    def check(self, name: str, value: int, detail: str = "") -> None:
        limit = getattr(self, name)
        if limit and value > limit:
            raise LimitExceeded(name, limit, detail)


def env_var(name: str) -> str:
    return f"MEMLENS_MAX_{name.upper()}"


def _override(name: str) -> int | None:
    raw = os.environ.get(env_var(name))
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(float(raw))
    except (ValueError, OverflowError):
        raise SnapshotError(
            f"{env_var(name)}={raw!r} is not a number (give a count; 0 = no limit)"
        ) from None
    if value < 0:
        raise SnapshotError(f"{env_var(name)}={raw!r} is negative (give a count; 0 = no limit)")
    return value


def limits_for(size: int) -> Limits:
    """The limits for a source of `size` bytes (decompressed, when known)."""
    values = {}
    for name, rule in RULES.items():
        forced = _override(name)
        if forced is not None:
            values[name] = forced
        else:
            values[name] = int(min(rule.cap, max(rule.floor, rule.per_byte * max(size, 0))))
    return Limits(**values)


def unlimited() -> Limits:
    """For objects handed to us in memory (the caller built them), still with the caps."""
    return limits_for(1 << 62)


class Budget:
    """Counts the values a reader walks against `limits.items` (shared values count each time
    they are walked: that is where the work goes)."""

    __slots__ = ("limits", "used", "text_used")

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.used = 0
        self.text_used = 0

    def charge(self, n: int, what: str = "") -> None:
        self.used += n
        limit = self.limits.items
        if limit and self.used > limit:
            raise LimitExceeded("items", limit, what)

    def charge_text(self, n: int, what: str = "") -> None:
        """Charge `n` characters of text about to be made (a join, a json.dumps, a str())."""
        self.text_used += n
        limit = self.limits.text
        if limit and self.text_used > limit:
            raise LimitExceeded("text", limit, what)


def text_size(v: object) -> int:
    """An upper bound of the characters json.dumps or str() writes for a scalar (a
    non-ASCII character may become a 6-character escape)."""
    if isinstance(v, str):
        return (len(v) if v.isascii() else 6 * len(v)) + 2
    if isinstance(v, int):
        return v.bit_length() * 3 // 10 + 3
    return 24  # float, None, bool, and any other scalar's repr in a value from a file


def bounded_walk(value: object, budget: Budget, what: str) -> None:
    """Walk a nested value (no memo: shared parts count every time), charging each node to
    `budget` and checking the depth, and the characters its text (json.dumps, str) would
    have to the 'text' limit, so that converting it afterwards is known to be cheap."""
    depth_limit = budget.limits.depth
    stack: list[tuple[object, int]] = [(value, 0)]
    pending = 1
    text = 0
    while stack:
        v, depth = stack.pop()
        if isinstance(v, (list, tuple)):
            children: list[object] | tuple[object, ...] | list[object] = v
        elif isinstance(v, dict):
            children = [*v.keys(), *v.values()]
        else:
            text += text_size(v)
            continue
        text += 2 + 2 * len(children)  # brackets and separators
        if not children:
            continue
        if depth_limit and depth >= depth_limit:
            raise LimitExceeded("depth", depth_limit, what)
        pending += len(children)
        if pending > 65536 or text > 1 << 20:  # charge before going on, in chunks (cheap)
            budget.charge(pending, what)
            budget.charge_text(text, what)
            pending = text = 0
        stack.extend((c, depth + 1) for c in children)
    budget.charge(pending, what)
    budget.charge_text(text, what)
