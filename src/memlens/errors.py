"""Errors memlens raises on purpose. The CLI turns any of them into one line and exit code 2."""

from __future__ import annotations


class MemlensError(Exception):
    """Base class: a problem with the user's input or environment, with a human message."""


class SnapshotError(MemlensError):
    """The file or object given is not a readable memory snapshot."""


class UnsafePickleError(SnapshotError):
    """The pickle asked to import or call something; it was refused and nothing ran."""


class CacheError(MemlensError):
    """The on-disk column cache could not be used (it is rebuilt when possible)."""


class EventOutOfRange(MemlensError, IndexError):
    """An event index outside a trace: valid are -1 (the state before the first event, the
    one the segments describe when there are no events) to n_events - 1. Also an IndexError,
    since it is one to code that indexes a trace like a sequence."""
