"""Driving the app with Textual's pilot, and reading back what each widget shows."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from rich.text import Text
from textual import events
from textual.pilot import Pilot

from memlens import DeviceTrace
from memlens.views.tui.app import Lines, Session, TuiApp

SIZE = (120, 40)


def shown(app: TuiApp, selector: str) -> str:
    """The plain text a widget of the current screen shows."""
    w = app.screen.query_one(selector)
    out = w.render()
    if isinstance(out, Text):
        return "\n".join(line.rstrip() for line in out.plain.splitlines())
    return str(out)


def chart(app: TuiApp, k: int = 0) -> str:
    return shown(app, f"#chart{k}")


def run(
    devs: list[DeviceTrace],
    script: Callable[[TuiApp, object], Awaitable[None]],
    size: tuple[int, int] = SIZE,
) -> None:
    """Run the app on these devices headless and hand it and its pilot to `script`."""

    async def main() -> None:
        app = TuiApp([Session.of(f"snap{k}", d) for k, d in enumerate(devs)])
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            await script(app, pilot)

    asyncio.run(main())


async def wheel(pilot: Pilot[None], selector: str, steps: int) -> None:
    """Turn the mouse wheel over a widget: steps > 0 down, < 0 up."""
    w = pilot.app.screen.query_one(selector)
    for _ in range(abs(steps)):
        cls = events.MouseScrollDown if steps > 0 else events.MouseScrollUp
        w.post_message(cls(w, 1, 1, 0, 1 if steps > 0 else -1, 0, False, False, False))
    await pilot.pause()


async def press(pilot: Pilot[None], *keys: str) -> None:
    for k in keys:
        await pilot.press(k)
    await pilot.pause()


__all__ = ["Lines", "chart", "press", "run", "shown", "wheel"]
