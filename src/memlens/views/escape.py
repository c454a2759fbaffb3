"""Text from a snapshot, made safe to show: the one escaping function of every text view,
and the one error line every host (the CLI, the MCP tools, the notebook magic) shows.

A frame, file, action or annotation name is whatever the snapshot says. Written raw to a
terminal, ESC and BEL sequences retitle the window, clear the screen or worse; CR and
backspace overwrite what was printed; bidi overrides reorder it. `visible` turns each such
character into its Python escape (ESC -> `\\x1b`), which is also how Python itself would
print the string, so what you see is exactly what the file holds.
"""

from __future__ import annotations

import re

# C0 and C1 controls, DEL, and the Unicode line/paragraph separators and bidi controls.
# Newline and tab are kept only by `visible_output` (whole outputs, not names).
# Lone surrogates too (pickle decodes strings with surrogatepass; stdout cannot encode them).
_UNSAFE = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
_UNSAFE_OUTPUT = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def visible(text: str) -> str:
    """A name or other one-line value with every control character shown as an escape."""
    if text.isprintable():  # the usual case: one C-speed check, no regex
        return text
    return _UNSAFE.sub(_escape, text)


def visible_output(text: str) -> str:
    """A whole multi-line output: like `visible`, but newlines and tabs stay."""
    return _UNSAFE_OUTPUT.sub(_escape, text)


def error_line(exc: BaseException, *, how_to_see_more: str = "") -> str:
    """The one line for an error, `memlens: error: ...`, escaped (a message may quote a
    snapshot's names): a MemlensError's message, or a last-resort line for anything else
    (a bug, or a file we failed to foresee); `how_to_see_more` is the host's way to the
    traceback ("run with --debug for the traceback")."""
    from memlens.errors import MemlensError

    if isinstance(exc, MemlensError):
        return f"memlens: error: {visible(str(exc))}"
    detail = visible(str(exc))[:300]
    more = f"{how_to_see_more}, and " if how_to_see_more else ""
    return f"memlens: error: unexpected {type(exc).__name__}: {detail} ({more}please report it)"
