"""One allocation row's facts as the viewer's allocation card and the TUI's allocation view
show them: its flags, by name and in words, and the events of its life."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memlens.snapshot.model import GHOST, LIVE_AT_END, OVERWRITTEN, PENDING_FREE, PREEXISTING

if TYPE_CHECKING:
    from memlens.snapshot.model import DeviceTrace

# bit, name (the viewer's allocation card), what it means (None: no line of its own in the TUI)
FLAGS: tuple[tuple[int, str, str | None], ...] = (
    (PREEXISTING, "preexisting", "allocated before the trace window"),
    (GHOST, "ghost", "known only from the final segments"),
    (LIVE_AT_END, "live_at_end", "still allocated after the last event"),
    (PENDING_FREE, "pending_free", "free requested, not completed"),
    (OVERWRITTEN, "overwritten", None),
)


def flag_names(dev: DeviceTrace, row: int) -> list[str]:
    flags = int(dev.alloc_flags[row])
    return [name for bit, name, _ in FLAGS if flags & bit]


def flag_notes(dev: DeviceTrace, row: int) -> list[str]:
    flags = int(dev.alloc_flags[row])
    return [text for bit, _, text in FLAGS if flags & bit and text is not None]


def life_events(dev: DeviceTrace, row: int) -> tuple[int, int, int]:
    """(alloc, free requested, free) events of an allocation row: alloc -1 when it was made
    before the trace, free requested -1 when nothing asked, free n_events when never freed."""
    return (
        int(dev.alloc_event[row]),
        int(dev.free_requested_event[row]),
        int(dev.free_event[row]),
    )
