"""Byte sizes for people: printed in binary units, as PyTorch's viewer prints them, and
read with one convention for every command (parse_bytes)."""

from __future__ import annotations

import math
import re
from fractions import Fraction

from memlens.errors import MemlensError

_UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]
# One convention for every command (check, anomalies, simulate, ...): a bare K/M/G/T is
# binary, as PyTorch's own *_mb settings (max_split_size_mb: 1 "mb" = 2**20 bytes) mean it;
# the SI names (KB, MB, GB, TB) are decimal; the IEC names (KiB ... TiB) binary.
_PARSE = {
    "": 1, "b": 1,
    "k": 1024, "kb": 1000, "kib": 1024,
    "m": 1024**2, "mb": 1000**2, "mib": 1024**2,
    "g": 1024**3, "gb": 1000**3, "gib": 1024**3,
    "t": 1024**4, "tb": 1000**4, "tib": 1024**4,
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


def bare_size_note(flag: str, text: object) -> str | None:
    """A warning for a size a person wrote without a unit (`--max-peak 20`: 20 bytes, which
    they rarely mean), or None. parse_bytes still reads it as bytes: scripts that pass
    exact byte counts keep working, and `20B` says bytes without the warning."""
    if not isinstance(text, str) or not re.fullmatch(r"\s*[0-9]*\.?[0-9]+\s*", text):
        return None
    n = text.strip()
    return f"{flag} {n} has no unit, so it means {n} bytes; write {n}B to say so, or e.g. {n}GiB"


def parse_bytes(text: str | int) -> int:
    """Bytes for a size a person wrote: '12GiB', '80G', '1.5 GB', '4096' (an int is taken as is).

    Units, case-insensitive: a bare K, M, G, T is binary (80G = 80 x 2**30, as PyTorch's
    max_split_size_mb means MiB); KB, MB, GB, TB are decimal (80GB = 80 x 10**9);
    KiB, MiB, GiB, TiB binary; B or nothing is bytes. A fraction is computed exactly and
    rounded to the nearest byte, a half up: 0.3MiB = 314573 (314572.8), 1.5K = 1536.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise MemlensError(f"a size must not be negative: {text}")
        return text
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _PARSE:
        raise MemlensError(
            f"cannot read the size {text!r} (examples: 80GiB, 80G = 80GiB, 80GB = 80x10^9, "
            "512MiB, 4096)"
        )
    exact = Fraction(m.group(1)) * _PARSE[m.group(2).lower()]
    return math.floor(exact + Fraction(1, 2))
