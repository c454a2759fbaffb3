"""Short file names that stay unique: enough parent folders to tell equal basenames apart.

Trees and tables name a frame `name (file.py:line)`. Two files with the same basename in
one snapshot (torch's `torch/optim/optimizer.py` and the user's `mylib/optimizer.py`) would
read alike, so each is shown with the fewest trailing path components that no other
filename of the snapshot ends with: `optim/optimizer.py` and `mylib/optimizer.py`. Computed
once per snapshot over its distinct filename strings (a few hundred), not per frame.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import numpy as np

from memlens.analysis.events import memo
from memlens.snapshot.model import Snapshot


def unique_suffixes(paths: Iterable[str]) -> dict[str, str]:
    """Each path -> its shortest trailing part (whole components, '/' or '\\' separated)
    that no other path of `paths` shares. A path that is a suffix of another keeps its
    whole text (nothing shorter tells them apart)."""
    parts = {p: p.replace("\\", "/").split("/") for p in set(paths)}
    by_base: dict[str, list[str]] = defaultdict(list)
    for p, comps in parts.items():
        by_base[comps[-1]].append(p)
    out: dict[str, str] = {}
    for base, group in by_base.items():
        if len(group) == 1:
            out[group[0]] = base
            continue
        for p in group:
            comps = parts[p]
            k = 1
            while k < len(comps) and any(parts[q][-k:] == comps[-k:] for q in group if q != p):
                k += 1
            out[p] = "/".join(comps[-k:]) if k < len(comps) else p
    return out


def short_filenames(snap: Snapshot) -> dict[int, str]:
    """Per filename string id used by a frame: its unique short name (cached)."""

    def make() -> dict[int, str]:
        ids = np.unique(np.asarray(snap.frames.filename)).tolist()
        names = {i: snap.strings[i] for i in ids}
        short = unique_suffixes(names.values())
        return {i: short[n] for i, n in names.items()}

    return memo(snap, "short_filenames", make)
