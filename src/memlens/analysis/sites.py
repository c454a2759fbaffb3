"""Call sites: who allocated the bytes, by first user frame.

The site is the user's line: snapshot.frames.first_user_frames skips torch and the
standard library, and here thin third-party glue (GLUE_PATTERNS: einops, accelerate's
hooks, bitsandbytes, PEFT's layers, ...) yields to the next frame out, so
`forward (model.py:22)` is named instead of `einsum (einops/_backends.py:288)`. A glue
frame yields only to a user frame further out (a stack of glue alone keeps its glue
frame), and stays visible as the site's "via": the frame the torch/stdlib rule alone
would have named.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memlens.analysis.cells import cell_name
from memlens.analysis.events import memo
from memlens.analysis.results import Frame, NetSite, Site
from memlens.snapshot.frames import (
    DEFAULT_HIDE_PATTERNS,
    PYTHON,
    first_user_frames,
    hidden_filename_mask,
    short_cpp_name,
)
from memlens.snapshot.model import DeviceTrace, Snapshot

# The two names of allocations without a site frame, the same in every view: no stack
# was recorded at all, or (in a Python-frames-only tree, analysis.tree) the stack holds
# C++ frames only - autograd's backward threads, C++ code.
NO_STACK_LABEL = "<no stack recorded>"
NO_PYTHON_LABEL = "<no Python frames: C++ / backward>"


_PKG = r"[/\\](?:site-packages|dist-packages)[/\\]"
# Libraries between the user's line and torch that only pass the call on (or, like torch
# itself, are the kernels a model line calls): the line that called them is the answer.
GLUE_PATTERNS: tuple[str, ...] = (
    _PKG + r"einops[/\\]",  # einsum/rearrange/reduce call torch for the caller
    _PKG + r"opt_einsum[/\\]",
    r"[/\\]functools\.py$",  # wraps, partial, lru_cache
    _PKG + r"accelerate[/\\]hooks\.py$",  # new_forward: a module's forward, wrapped
    _PKG + r"bitsandbytes[/\\]",  # quantized layers and their autograd functions
    _PKG + r"peft[/\\]tuners[/\\]",  # LoRA & co: a layer around the model's layer
    _PKG + r"transformers[/\\](?:utils|integrations)[/\\]",  # decorators, attention fns
    _PKG + r"wrapt[/\\]",
)
# The default hide patterns of every site: torch, the standard library, then the glue.
SITE_HIDE_PATTERNS: tuple[str, ...] = (*DEFAULT_HIDE_PATTERNS, *GLUE_PATTERNS)


def hide_patterns(hide: Sequence[str] = (), hide_only: Sequence[str] = ()) -> list[str] | None:
    """The patterns of --hide (added to the defaults) and --hide-only (instead of them);
    None keeps the defaults; --hide-only '' alone means hide nothing. The CLI and the MCP
    tools both resolve their options here, so they name the same call sites."""
    if not hide and not hide_only:
        return None
    base = list(SITE_HIDE_PATTERNS) if not hide_only else [h for h in hide_only if h]
    return base + [h for h in hide if h and h not in base]


def user_frame_of_stacks(snap: Snapshot, hide_patterns: Sequence[str] | None = None) -> np.ndarray:
    """Per stack id, its site frame id (-1 if none), cached on the snapshot object.
    hide_patterns None: SITE_HIDE_PATTERNS; else exactly those patterns."""
    patterns = SITE_HIDE_PATTERNS if hide_patterns is None else tuple(hide_patterns)
    return memo(snap, ("user_frames", patterns), lambda: _site_frames(snap, patterns))


def _site_frames(snap: Snapshot, patterns: tuple[str, ...]) -> np.ndarray:
    site = first_user_frames(snap, patterns)
    plain = tuple(p for p in patterns if p not in GLUE_PATTERNS)
    if plain == patterns:
        return site
    # glue yields only to a user frame: where every Python frame is hidden, the site is
    # what the rule without the glue patterns names (the glue frame, not torch's code)
    user = _is_user_frame(snap, patterns)
    found = site >= 0
    found[found] = user[site[found]]
    out: np.ndarray = np.where(found, site, first_user_frames(snap, plain))
    return out


def _is_user_frame(snap: Snapshot, patterns: Sequence[str]) -> np.ndarray:
    """Per frame: a Python frame none of `patterns` hides."""
    f = snap.frames
    hidden = hidden_filename_mask(snap.strings, f.filename, patterns)
    mask: np.ndarray = (np.asarray(f.kind) == PYTHON) & ~hidden
    return mask


def via_frame_of_stacks(snap: Snapshot, hide_patterns: Sequence[str] | None = None) -> np.ndarray:
    """Per stack id, the frame the site was reached through (-1 if none): the first frame
    outside torch and the standard library, where the site is another frame further out
    (a glue frame that yielded, or one a --hide pattern skipped)."""
    patterns = SITE_HIDE_PATTERNS if hide_patterns is None else tuple(hide_patterns)

    def make() -> np.ndarray:
        site = user_frame_of_stacks(snap, patterns)
        near = user_frame_of_stacks(snap, DEFAULT_HIDE_PATTERNS)
        user = _is_user_frame(snap, DEFAULT_HIDE_PATTERNS)
        ok = (site >= 0) & (near >= 0) & (site != near)
        ok[ok] = user[site[ok]] & user[near[ok]]  # both outside torch: near is inside
        out: np.ndarray = np.where(ok, near, -1).astype(np.int32)
        return out

    return memo(snap, ("via_frames", patterns), make)


def frame_label(snap: Snapshot, frame_id: int) -> str:
    if frame_id < 0:
        return NO_STACK_LABEL
    f = snap.frames
    name = snap.strings[f.name[frame_id]]
    filename = snap.strings[f.filename[frame_id]]
    if f.kind[frame_id] != PYTHON:
        name = short_cpp_name(name)
        return name if filename in ("", "??") else f"{name} ({filename})"
    return python_frame_text(name, filename, int(f.line[frame_id]))


def python_frame_text(name: str, filename: str, line: int) -> str:
    """`name (file:line)`, or `name (cell In [3], line 6)` for a notebook cell's file
    (analysis.cells): every label of a Python frame, long or short, is made here."""
    cell = cell_name(filename)
    return f"{name} ({cell}, line {line})" if cell else f"{name} ({filename}:{line})"


def frame_dict(snap: Snapshot, frame_id: int) -> Frame:
    if frame_id < 0:
        return {"filename": None, "line": None, "name": None}
    f = snap.frames
    return {
        "filename": snap.strings[f.filename[frame_id]],
        "line": int(f.line[frame_id]),
        "name": snap.strings[f.name[frame_id]],
    }


def site_of_allocations(
    dev: DeviceTrace, rows: np.ndarray, hide_patterns: Sequence[str] | None = None
) -> np.ndarray:
    """First user frame id of each allocation row (-1 where no stack)."""
    return _of_rows(dev, rows, user_frame_of_stacks(dev.snapshot, hide_patterns))


def _of_rows(dev: DeviceTrace, rows: np.ndarray, per_stack: np.ndarray) -> np.ndarray:
    """per_stack's frame id for each allocation row's stack (-1 where it has none)."""
    stacks = dev.alloc_stack[rows]
    out = np.full(len(rows), -1, dtype=np.int32)
    has = stacks >= 0
    out[has] = per_stack[stacks[has]]
    return out


def top_sites(
    dev: DeviceTrace,
    rows: np.ndarray,
    *,
    limit: int | None = 10,
    hide_patterns: Sequence[str] | None = None,
) -> list[Site]:
    """Allocations `rows` grouped by first user frame, largest total first."""
    rows = np.asarray(rows, dtype=np.int64)
    if len(rows) == 0:
        return []
    site = site_of_allocations(dev, rows, hide_patterns)
    sizes = dev.alloc_size[rows]
    uniq, inv = np.unique(site, return_inverse=True)
    total = np.bincount(inv, weights=sizes, minlength=len(uniq))
    # weights go through float64: exact below 2**53 bytes (8 PiB), far above any GPU
    count = np.bincount(inv, minlength=len(uniq))
    order = np.lexsort((uniq, -total))
    if limit is not None:
        order = order[:limit]
    via = _main_via(dev, rows, inv, len(uniq), hide_patterns)
    snap = dev.snapshot
    return [_site_row(snap, int(uniq[k]), int(total[k]), int(count[k]), int(via[k])) for k in order]


def _main_via(
    dev: DeviceTrace,
    rows: np.ndarray,
    inv: np.ndarray,
    n_sites: int,
    hide_patterns: Sequence[str] | None,
) -> np.ndarray:
    """Per site group (inv: each row's group), the via frame of most bytes (-1: none)."""
    via = _of_rows(dev, rows, via_frame_of_stacks(dev.snapshot, hide_patterns))
    out = np.full(n_sites, -1, dtype=np.int64)
    if not (via >= 0).any():
        return out
    pair, pinv = np.unique(np.stack([inv, via]), axis=1, return_inverse=True)
    nbytes = np.bincount(pinv.ravel(), weights=dev.alloc_size[rows], minlength=pair.shape[1])
    nbytes[pair[1] < 0] = -1  # "no via" loses to any via of the site
    best = np.lexsort((-nbytes, pair[0]))  # per group, most bytes first
    first = best[np.r_[True, pair[0][best][1:] != pair[0][best][:-1]]]
    out[pair[0][first]] = pair[1][first]
    return out


def _site_row(snap: Snapshot, site: int, nbytes: int, count: int, via: int = -1) -> Site:
    """One Site object of the JSON (docs/json-schema.md): the site's name, its frame's
    filename/line/name, bytes and count, and the glue frame it was reached through."""
    return {
        "site": frame_label(snap, site),
        **frame_dict(snap, site),
        "bytes": nbytes,
        "count": count,
        "via": frame_label(snap, via) if via >= 0 else None,
    }


def net_sites(
    dev: DeviceTrace,
    plus_rows: np.ndarray,
    minus_rows: np.ndarray,
    *,
    limit: int | None = 10,
    hide_patterns: Sequence[str] | None = None,
    positive_only: bool = True,
) -> list[NetSite]:
    """Net bytes per first user frame: sizes of `plus_rows` minus sizes of `minus_rows`
    (e.g. allocated inside a window and still alive, minus freed there but made before).
    Largest net first; with positive_only, sites that did not grow are left out.
    Each row: top_sites fields with "bytes" = net, plus "added_bytes", "removed_bytes"."""
    plus_rows = np.asarray(plus_rows, dtype=np.int64)
    minus_rows = np.asarray(minus_rows, dtype=np.int64)
    if len(plus_rows) + len(minus_rows) == 0:
        return []
    rows = np.concatenate([plus_rows, minus_rows])
    site = site_of_allocations(dev, rows, hide_patterns)
    size = dev.alloc_size[rows].astype(np.float64)
    sign = np.concatenate([np.ones(len(plus_rows)), -np.ones(len(minus_rows))])
    uniq, inv = np.unique(site, return_inverse=True)
    added = np.bincount(inv, weights=size * (sign > 0), minlength=len(uniq)).astype(np.int64)
    removed = np.bincount(inv, weights=size * (sign < 0), minlength=len(uniq)).astype(np.int64)
    count = np.bincount(inv[: len(plus_rows)], minlength=len(uniq))
    net = added - removed
    via = _main_via(dev, rows, inv, len(uniq), hide_patterns)
    order = np.lexsort((uniq, -net))
    if positive_only:
        order = order[net[order] > 0]
    if limit is not None:
        order = order[:limit]
    snap = dev.snapshot
    return [
        {
            **_site_row(snap, int(uniq[k]), int(net[k]), int(count[k]), int(via[k])),
            "added_bytes": int(added[k]),
            "removed_bytes": int(removed[k]),
        }
        for k in order
    ]
