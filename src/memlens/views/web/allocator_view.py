"""The viewer's Allocator State card (MemoryViz's Allocator State History): the segments and
blocks right after one event, from analysis.allocator_state.state_at (what `memlens
fragmentation --event N --json` prints), cut to what a card can draw.

The card draws one row per segment, so at most MAX_SEGMENTS segments (lowest addresses
first) and MAX_BLOCKS blocks come with their blocks; the summary figures always cover all.
"""

from __future__ import annotations

from typing import Any

from memlens.analysis.allocator_state import rounding_waste, state_at
from memlens.snapshot.model import DeviceTrace
from memlens.views.web.answers import DrawnSegment, StateAnswer

MAX_SEGMENTS = 300  # rows of the card's canvas
MAX_BLOCKS = 20_000
MAX_SETTINGS = 200


def settings_list(settings: dict[str, Any]) -> list[list[str]]:
    """The snapshot's allocator settings as [name, value] text pairs (MemoryViz's Allocator
    Settings), sorted by name; values that are not plain scalars as their repr."""
    out = []
    for k in sorted(settings, key=str)[:MAX_SETTINGS]:
        v = settings[k]
        out.append([str(k)[:200], (v if isinstance(v, str) else repr(v))[:2000]])
    return out


def allocator_state(dev: DeviceTrace, event: int) -> StateAnswer:
    """state_at(dev, event) with segments by address (the first MAX_SEGMENTS, their blocks up
    to MAX_BLOCKS in all), each block's offset in its segment, and the rounding waste: bytes
    of the live blocks' 512-byte rounding (the allocator's smallest block), inside `free_bytes`;
    each segment's `pool` is state_at's (None when unknown)."""
    st = state_at(dev, event, blocks=True)
    segments = sorted(st.pop("segments", []), key=lambda s: int(s["address"], 16))
    drawn: list[DrawnSegment] = []
    n_blocks = 0
    for seg in segments[:MAX_SEGMENTS]:
        base = int(seg["address"], 16)
        blocks = seg["blocks"]
        keep = blocks[: max(MAX_BLOCKS - n_blocks, 0)]
        n_blocks += len(keep)
        drawn.append(
            {
                "address": seg["address"],
                "size": seg["size"],
                "stream": seg["stream"],
                "is_expandable": seg["is_expandable"],
                "pool": seg["pool"],
                "free_bytes": seg["free_bytes"],
                "largest_free_bytes": seg["largest_free_bytes"],
                "blocks": [{**b, "offset": int(b["address"], 16) - base} for b in keep],
                "blocks_total": len(blocks),
            }
        )
    out: StateAnswer = {
        **st,  # its segments were popped above
        "rounding_waste_bytes": rounding_waste(segments),
        "segments": drawn,
        "segments_shown": len(drawn),
        "blocks_shown": n_blocks,
        "settings": settings_list(dev.snapshot.allocator_settings),
    }
    return out
