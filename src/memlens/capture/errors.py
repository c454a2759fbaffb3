"""Errors raised while capturing. All are MemlensError, so the CLI prints one line, exit 2."""

from __future__ import annotations

from memlens.errors import MemlensError

NO_CUDA_MESSAGE = (
    "CUDA is not available: recording a snapshot needs a GPU; "
    "use `memlens simulate` to predict the snapshot without one"
)


class RecordError(MemlensError):
    """Recording could not start, or a snapshot could not be written."""


class NoCudaError(RecordError):
    """No CUDA device (or no torch at all): a real snapshot cannot be recorded here."""

    def __init__(self, detail: str | None = None) -> None:
        super().__init__(NO_CUDA_MESSAGE if detail is None else f"{NO_CUDA_MESSAGE} ({detail})")


class RecordingActiveError(RecordError):
    """CUDA memory history is already being recorded by code outside memlens."""


class UnwritablePathError(RecordError):
    """The snapshot path cannot be written."""
