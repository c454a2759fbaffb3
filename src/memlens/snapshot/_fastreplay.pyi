"""Types of the compiled replay (_fastreplay.c)."""

from typing import Any

def replay(
    events: tuple[Any, Any, Any, Any, Any],
    ghosts: tuple[Any, Any, Any, Any],
    codes: tuple[int, int, int, bytes, bytes],
    requests_as_frees: bool,
    end_reserved: int | None,
    /,
) -> dict[str, Any]: ...
