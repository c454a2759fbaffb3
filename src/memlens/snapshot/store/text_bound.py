"""How much text a cache entry may hold (its meta.json: the strings table and
allocator_settings), and a bound of what json.dumps would write for it, known without
writing it."""

from __future__ import annotations

from typing import Any

# An entry's text (meta.json: the strings table, allocator_settings) may be at most this
# many bytes or TEXT_PER_BYTE x the source file's: text is made from a file's values up to
# the 'text' limit (a 2 KB file may make 63 MB of it, 6 bytes of JSON a character when not
# ASCII), and such a file is read again rather than cached.
TEXT_FLOOR_BYTES = 16 << 20
TEXT_PER_BYTE = 4


def text_too_large(value: Any, source_size: int) -> bool:
    """Would `value`'s JSON pass the bound for an entry of a file of `source_size` bytes?"""
    bound = max(TEXT_FLOOR_BYTES, TEXT_PER_BYTE * source_size)
    return json_size_bound(value, bound) > bound


def json_size_bound(value: Any, stop: int) -> int:
    """An upper bound of the bytes json.dumps writes for `value` (6 a character of a string
    that is not plain printable ASCII: the \\uXXXX escape), counted no further than past
    `stop` (so a huge value costs no more than a walk to the bound)."""
    total = 0
    stack = [value]
    while stack and total <= stop:
        v = stack.pop()
        if isinstance(v, str):
            plain = v.isascii() and v.isprintable() and '"' not in v and "\\" not in v
            total += (len(v) if plain else 6 * len(v)) + 4  # quotes and a separator
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
            total += 2
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
            total += 2
        else:
            total += 32  # a number, a bool, null
    return total
