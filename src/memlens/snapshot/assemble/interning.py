"""Interning of strings, frames and stacks while reading the raw structure.

PyTorch shares one dict per distinct frame and one list per distinct traceback, and the
pickle memo keeps that sharing, so we first look objects up by identity (one dict probe
per event) and only fall back to content for objects we have not seen (e.g. JSON input,
where every event has its own copies).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from memlens.snapshot.frames import classify_frame
from memlens.snapshot.limits import Budget, bounded_walk, unlimited

# Text made from a non-string is cut to this many characters: it names a value (a dict of
# user_metadata, a frame whose filename is a list) and is printed, cached and shown, so a
# file cannot make it megabytes long even within the 'text' limit.
TEXT_CAP = 4096


def as_text(value: Any, budget: Budget, what: str) -> str:
    """A non-string where text belongs, as text of at most TEXT_CAP characters; the walk,
    and the characters its JSON would have, are charged to `budget` first, so a
    shared-reference bomb stops at the 'items' or 'text' limit instead of being printed
    2^32 times or a GB long."""
    if isinstance(value, str):
        return value
    bounded_walk(value, budget, what)
    try:
        if isinstance(value, (dict, list, tuple)):
            text = json.dumps(value, sort_keys=True, default=str)
        else:
            text = str(value)
    except (TypeError, ValueError):  # mixed key types, an int over 4,300 digits
        try:
            text = repr(value)
        except ValueError:
            text = f"<unprintable {type(value).__name__}>"
    if len(text) > TEXT_CAP:
        return f"{text[: TEXT_CAP - 30]}... ({len(text):,} characters)"
    return text


class StringTable:
    def __init__(self, budget: Budget | None = None) -> None:
        self.strings: list[str] = []
        self._ids: dict[str, int] = {}
        self.budget = budget if budget is not None else Budget(unlimited())

    def __call__(self, s: Any) -> int:
        if not isinstance(s, str):
            s = as_text(s, self.budget, "a value where text belongs")
        i = self._ids.get(s)
        if i is None:
            i = self._ids[s] = len(self.strings)
            self.strings.append(s)
        return i


class FrameTable:
    def __init__(self, strings: StringTable) -> None:
        self._strings = strings
        self._by_obj: dict[int, int] = {}
        self._by_key: dict[tuple[int, int, int], int] = {}
        self._keep: list[Any] = []  # keeps id()s valid for objects we created ourselves
        self.filename: list[int] = []
        self.line: list[int] = []
        self.name: list[int] = []
        self.kind: list[int] = []

    def frame_id(self, fr: Any) -> int:
        i = self._by_obj.get(id(fr))
        if i is not None:
            return i
        if isinstance(fr, dict):
            filename = fr.get("filename", "??")
            name = fr.get("name", "??")
            line = fr.get("line", 0)
        else:  # a bare string frame (seen in hand-made files): keep it as the name
            filename, name, line = "??", fr, 0
        try:
            line = int(line)
        except (TypeError, ValueError):
            line = 0
        if not -(2**63) <= line < 2**63:
            line = -1  # garbage from the C++ symbolizer (seen in real files): not a line
        key = (self._strings(filename), line, self._strings(name))
        i = self._by_key.get(key)
        if i is None:
            i = self._by_key[key] = len(self.line)
            self.filename.append(key[0])
            self.line.append(line)
            self.name.append(key[2])
            text = self._strings.strings
            self.kind.append(classify_frame(text[key[0]], text[key[2]]))
        self._by_obj[id(fr)] = i
        self._keep.append(fr)
        return i

    def arrays(self) -> dict[str, np.ndarray]:
        return {
            "filename": np.asarray(self.filename, dtype=np.int32),
            "line": np.asarray(self.line, dtype=np.int64),
            "name": np.asarray(self.name, dtype=np.int32),
            "kind": np.asarray(self.kind, dtype=np.uint8),
        }


class StackTable:
    def __init__(self, frames: FrameTable) -> None:
        self._frames = frames
        self._by_obj: dict[int, int] = {}
        self._by_key: dict[tuple[int, ...], int] = {}
        # by the identities of the frame objects: PyTorch writes a new list per allocation
        # but shares the frame dicts, so most lists repeat a sequence already seen
        self._by_frame_objs: dict[tuple[int, ...], int] = {}
        self._keep: list[Any] = []
        self.offsets: list[int] = [0]
        self.frame_ids: list[int] = []

    def stack_id(self, frames: Any, *, charge: bool = True) -> int:
        """Stack id of a frames list (innermost first); -1 for a missing or empty one.
        `charge=False` when the caller charged the budget for the frames already."""
        i = self._by_obj.get(id(frames))
        if i is not None:
            return i
        if not frames or not isinstance(frames, (list, tuple)):
            i = -1
        else:
            if charge:
                self._frames._strings.budget.charge(len(frames), "stack frames")
            objs = tuple(map(id, frames))  # the frames stay alive in self._keep
            i = self._by_frame_objs.get(objs)
            if i is None:
                key = tuple(map(self._frames.frame_id, frames))
                i = self._by_key.get(key)
                if i is None:
                    i = self._by_key[key] = len(self.offsets) - 1
                    self.frame_ids.extend(key)
                    self.offsets.append(len(self.frame_ids))
                self._by_frame_objs[objs] = i
        self._by_obj[id(frames)] = i
        self._keep.append(frames)
        return i

    def alias(self, frames: Any, stack: int) -> None:
        """Know `frames` as stack `stack` already (an object the compiled reader met and
        charged, whose stack it passed as another list with the same frames)."""
        if id(frames) not in self._by_obj:
            self._by_obj[id(frames)] = stack
            self._keep.append(frames)

    def stack_ids(self, frame_lists: list[Any], *, charge: bool = True) -> np.ndarray:
        """Stack ids for a column of frame lists, interning each distinct list object once.

        An allocation's free shares its frames list through the pickle memo, so a million
        events hold far fewer distinct list objects: find those with numpy, intern them,
        and scatter back. (The compiled reader goes further and passes one list per
        distinct stack; it charges the budget itself, hence `charge`.)
        """
        n = len(frame_lists)
        if n == 0:
            return np.zeros(0, dtype=np.int32)
        obj_ids = np.fromiter(map(id, frame_lists), dtype=np.uint64, count=n)
        uniq, first, inverse = np.unique(obj_ids, return_index=True, return_inverse=True)
        # intern in order of first use, not of memory address: the ids (and so the order
        # of equal-sized sites everywhere) must be the same on every load of a file
        order = np.argsort(first, kind="stable")
        table = np.empty(len(uniq), dtype=np.int32)
        table[order] = np.fromiter(
            (self.stack_id(frame_lists[i], charge=charge) for i in first[order].tolist()),
            dtype=np.int32,
            count=len(uniq),
        )
        return table[inverse.reshape(-1)]

    def arrays(self) -> dict[str, np.ndarray]:
        return {
            "offsets": np.asarray(self.offsets, dtype=np.int64),
            "frame_ids": np.asarray(self.frame_ids, dtype=np.int32),
        }
