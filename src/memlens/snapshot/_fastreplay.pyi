"""Types of the compiled replay (csrc/replay.c)."""

from typing import Any

ALLOC_FLAGS: dict[str, int]

def replay(
    *,
    action: Any,
    addr: Any,
    size: Any,
    stack: Any,
    stream: Any,
    ghost_addr: Any,
    ghost_size: Any,
    ghost_stack: Any,
    ghost_stream: Any,
    alloc_code: int,
    free_code: int,
    request_code: int,
    grow_codes: bytes,
    shrink_codes: bytes,
    requests_as_frees: bool,
    end_reserved: int | None,
) -> dict[str, Any]: ...
