"""Every string from a snapshot is literal text in the TUI (issue 16, point 4): names made of
Textual markup and terminal escapes are shown as written, clicking them runs nothing, and
no file appears where the snapshot asked for one."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
from corpus import base_snapshot

import memlens
from memlens.views.tui.app import Session, TuiApp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tui"))
from tui_pilot import shown  # noqa: E402


def hostile_snapshot(target: Path) -> dict[str, Any]:
    click = f"[@click=app.screenshot('{target.name}','{target.parent}')]CLICK[/]"
    snap = base_snapshot()
    trace = snap["device_traces"][0]
    frames = trace[1]["frames"]
    # escapes first: a long tmp path (under xdist) makes the row end in an ellipsis
    frames[0]["name"] = f"\x1b]0;pwned\x07\x1b[2J [b]bold[/b] {click}"
    frames[1]["name"] = click
    frames[1]["filename"] = "/x/[red]file[/red]\x1b[31m.py"
    # a live allocation with the hostile stack, and an unknown action named with markup last
    trace.insert(2, dict(trace[1], addr=0x7F0000200000))
    trace.append({"action": click, "addr": 0, "size": 0, "stream": 0, "time_us": 2000})
    return snap


def _all_text(app: TuiApp) -> str:
    parts = []
    for w in app.screen.query("*"):
        try:
            out = w.render()
        except Exception:  # containers without a render of their own
            continue
        parts.append(getattr(out, "plain", str(out)))
    return "\n".join(parts)


def test_hostile_names_are_literal_and_clicks_run_nothing(tmp_path, monkeypatch):
    target = tmp_path / "pwned.svg"
    snap = memlens.load(hostile_snapshot(target))
    dev = snap.device(0)
    ran: list[str] = []
    monkeypatch.setattr(TuiApp, "action_screenshot", lambda self, *a: ran.append(str(a)))
    monkeypatch.setattr(TuiApp, "save_screenshot", lambda self, *a, **k: ran.append(str(a)))
    seen: dict[str, str] = {}

    async def main() -> None:
        app = TuiApp([Session.of("hostile", dev)])
        async with app.run_test(size=(160, 40), notifications=True) as pilot:
            await pilot.pause()
            await pilot.press("end", "a")  # the unknown action's event: a toast names it
            await pilot.pause()
            toasts = list(app.screen.query("Toast"))
            assert toasts, "expected the 'belongs to no allocation' toast"
            seen["toast"] = " ".join(str(t.render()) for t in toasts)
            for t in toasts:  # click all over the toast, where a link would be
                for x in range(0, t.size.width, 3):
                    await pilot.click(t, offset=(x, 1))
            await pilot.pause()
            seen["timeline"] = _all_text(app)
            await pilot.press("home", "p", "enter")  # the live tree at the peak
            await pilot.pause()
            await pilot.press("h", "e")  # torch frames shown, all expanded: every name on screen
            await pilot.pause()
            seen["tree"] = shown(app, "#tree")
            for y in range(0, 12):
                await pilot.click("#tree", offset=(40, y))
            await pilot.press("q", "s")  # the summary screen
            await pilot.pause()
            seen["summary"] = _all_text(app)

    asyncio.run(main())
    assert ran == []
    assert not target.exists() and list(tmp_path.iterdir()) == []
    assert "[@click=app.screenshot(" in seen["toast"]  # shown, not interpreted
    assert "[@click=app.screenshot(" in seen["tree"]
    assert "[b]bold[/b]" in seen["tree"]
    assert "\\x1b]0;pwned" in seen["tree"]  # escapes shown as escapes
    for text in seen.values():
        assert "\x1b" not in text and "\x07" not in text


@pytest.mark.parametrize("name", ["[@click=app.quit]q", "[link=file:///etc/passwd]x[/link]"])
def test_unknown_action_toast_is_not_markup(name, monkeypatch):
    snap = base_snapshot()
    snap["device_traces"][0].append(
        {"action": name, "addr": 0, "size": 0, "stream": 0, "time_us": 3000}
    )
    dev = memlens.load(snap).device(0)
    notes: list[tuple[str, bool]] = []
    real_notify = TuiApp.notify

    def spy(self, message, *, markup=True, **kw):
        notes.append((message, markup))
        return real_notify(self, message, markup=markup, **kw)

    monkeypatch.setattr(TuiApp, "notify", spy)

    async def main() -> None:
        app = TuiApp([Session.of("s", dev)])
        async with app.run_test(size=(120, 30)) as pilot:
            await pilot.pause()
            await pilot.press("end", "a")
            await pilot.pause()
            assert app.is_running  # [@click=app.quit] did not quit

    asyncio.run(main())
    assert notes and all(markup is False for _, markup in notes)
    assert name in notes[-1][0]


def test_every_toast_and_static_in_the_tui_is_literal():
    """A guard for code written later: each notify() passes markup=False, and each Static or
    Label gets a string literal (no snapshot data) or a rich Text (never parsed as markup)."""
    import ast

    tui = Path(memlens.__file__).parent / "views" / "tui"
    offenders = []
    for path in sorted(tui.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            if name == "notify":
                markup = [k for k in node.keywords if k.arg == "markup"]
                if not (markup and isinstance(markup[0].value, ast.Constant)
                        and markup[0].value.value is False):  # fmt: skip
                    offenders.append(f"{path.name}:{node.lineno} notify without markup=False")
            elif name in ("Static", "Label") and node.args:
                arg = node.args[0]
                literal = isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                text = isinstance(arg, ast.Call) and getattr(
                    arg.func, "id", getattr(arg.func, "attr", "")
                ) in ("one_line", "Text")
                if not (literal or text):
                    offenders.append(f"{path.name}:{node.lineno} {name}() of a non-Text value")
    assert offenders == []
