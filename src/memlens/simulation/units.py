"""Parse human byte sizes such as "80GiB", "40GB", "512MiB" or a plain integer."""

from __future__ import annotations

import re

from memlens.errors import MemlensError

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "k": 2**10,
    "m": 2**20,
    "g": 2**30,
    "t": 2**40,
}


def parse_size(text: str | int | None) -> int | None:
    """Bytes for `text`; None stays None (no limit)."""
    if text is None or isinstance(text, int):
        return text
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    if not match or match.group(2).lower() not in _UNITS:
        raise MemlensError(f"cannot read the size {text!r}: use e.g. 80GiB, 40GB or 512MiB")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])
