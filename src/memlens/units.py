"""Byte sizes for people: binary units, as PyTorch's viewer prints them."""

from __future__ import annotations

import re

from memlens.errors import MemlensError

_UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]
_PARSE = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "kib": 1024,
    "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
    "g": 1000**3, "gb": 1000**3, "gib": 1024**3,
    "t": 1000**4, "tb": 1000**4, "tib": 1024**4,
}  # fmt: skip


def format_bytes(n: int | float, precision: int = 2) -> str:
    """1610612736 -> '1.50 GiB'. Negative values keep their sign (used for diffs)."""
    sign = "-" if n < 0 else ""
    v = float(abs(n))
    for unit in _UNITS:
        if v < 1024 or unit == _UNITS[-1]:
            if unit == "B":
                return f"{sign}{int(v)} B"
            return f"{sign}{v:.{precision}f} {unit}"
        v /= 1024
    raise AssertionError("unreachable")


def parse_bytes(text: str) -> int:
    """'12GiB', '1.5 GB', '4096' -> bytes. Decimal (GB) and binary (GiB) units both accepted."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _PARSE:
        raise MemlensError(f"not a size: {text!r} (examples: 12GiB, 1.5GB, 800MiB, 4096)")
    return int(round(float(m.group(1)) * _PARSE[m.group(2).lower()]))
