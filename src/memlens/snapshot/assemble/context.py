"""The state one snapshot build shares between its parts (entries, segments, annotations)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memlens.errors import SnapshotError
from memlens.snapshot.actions import KNOWN_ACTIONS, Action
from memlens.snapshot.assemble.checks import INT64, UINT64, checked_int, glimpse
from memlens.snapshot.assemble.interning import FrameTable, StackTable, StringTable
from memlens.snapshot.limits import Budget

Warn = Callable[[str, str], None]
# Pools are indexed by an int16 per event (DeviceTrace.pool): a process has a handful (the
# default pool, one per CUDA graph pool or MemPool), so 32,767 is a bound no run reaches.
MAX_POOLS = (1 << 15) - 1


class BadPool(Exception):
    """A trace entry's pool_id that is not a pair of integers (the value, as it was)."""


class BuildContext:
    """What building one snapshot shares: the budget, warnings, and the tables (strings,
    frames, stacks, streams, actions) whose ids every column uses."""

    def __init__(self, warn: Warn, budget: Budget) -> None:
        self.warn = warn
        self.budget = budget
        self.strings = StringTable(budget)
        self.frames = FrameTable(self.strings)
        self.stacks = StackTable(self.frames)
        self.streams: list[int] = [0]
        self._stream_ids: dict[int, int] = {0: 0}
        self.action_names: list[str] = []
        self.action_codes: dict[str, int] = dict(KNOWN_ACTIONS)
        self.pools: list[tuple[int, int]] = []
        self._pool_ids: dict[tuple[int, int], int] = {}

    def stream_id(self, raw: Any) -> int:
        if raw is None:
            raw = 0
        if not isinstance(raw, int):  # also keeps unhashable and deep values out of the dict
            raise SnapshotError(
                f"a stream is a {type(raw).__name__} ({glimpse(raw)}), expected an integer"
            )
        i = self._stream_ids.get(raw)
        if i is None:
            value = checked_int(raw, "a stream", (INT64[0], UINT64[1]))
            i = self._stream_ids.get(value)
            if i is None:
                i = len(self.streams)
                self.streams.append(value)
                self._stream_ids[value] = i
            self._stream_ids[raw] = i
        return i

    def pool_id(self, raw: Any) -> int:
        """The index in `pools` of an entry's pool_id (a pair of ints); -1 for None (the
        entry does not say). Anything else: BadPool, which the caller words with the
        entry's index."""
        if raw is None:
            return -1
        if not isinstance(raw, (tuple, list)) or len(raw) != 2:
            raise BadPool(raw)
        try:
            pair = (checked_int(raw[0], "pool_id", INT64), checked_int(raw[1], "pool_id", INT64))
        except SnapshotError:
            raise BadPool(raw) from None
        i = self._pool_ids.get(pair)
        if i is None:
            if len(self.pools) >= MAX_POOLS:
                raise SnapshotError(
                    f"more than {MAX_POOLS} distinct memory pools in the trace: not a snapshot"
                )
            i = self._pool_ids[pair] = len(self.pools)
            self.pools.append(pair)
        return i

    def action_code(self, name: Any) -> int:
        code = self.action_codes.get(name)
        if code is None:
            code = Action.FIRST_UNKNOWN + len(self.action_names)
            if code > 255:
                raise SnapshotError("more than 200 distinct unknown trace actions: not a snapshot")
            self.action_names.append(str(name))
            self.action_codes[name] = code
            self.warn(
                f"action:{name}",
                f"unknown trace action {name!r} kept going past (ignored by the replay)",
            )
        return code
