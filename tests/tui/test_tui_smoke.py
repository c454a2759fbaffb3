"""Smoke run in a real terminal: tmux drives `memlens tui` on a real snapshot."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from memlens.units import format_bytes

REAL = "cs336_memory_ctx256_fullstep.pickle"  # 20,128 events, peak 51.06 GiB at event 20,121
OTHER = "cs336_memory_ctx128_fullstep.pickle"

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


class Tmux:
    """One tmux server of our own (its own socket), so nothing else is touched."""

    def __init__(self, command: str, width: int = 120, height: int = 40) -> None:
        self.socket = f"memlens-tui-{uuid.uuid4().hex[:8]}"
        self._tmux("new-session", "-d", "-s", "t", "-x", str(width), "-y", str(height), command)

    def _tmux(self, *args: str) -> str:
        p = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True)
        return p.stdout

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", "t")

    def keys(self, *keys: str) -> None:
        for k in keys:
            self._tmux("send-keys", "-t", "t", k)
            time.sleep(0.15)

    def wait_for(self, text: str, timeout: float = 20.0) -> str:
        return self.wait_until(lambda screen: text in screen, timeout, f"{text!r} never shown")

    def wait_until(self, ok, timeout: float = 20.0, what: str = "condition never met") -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            out = self.screen()
            if ok(out):
                return out
            time.sleep(0.2)
        raise AssertionError(f"{what}; screen was:\n{self.screen()}")

    def close(self) -> None:
        socket_path = self._tmux("display", "-p", "#{socket_path}").strip()
        self._tmux("kill-server")
        if socket_path:  # tmux leaves its socket file behind
            Path(socket_path).unlink(missing_ok=True)


def _command(*paths) -> str:
    env = f"MEMLENS_CACHE_DIR={shlex.quote(os.environ['MEMLENS_CACHE_DIR'])} TERM=xterm-256color"
    args = " ".join(shlex.quote(str(p)) for p in paths)
    # COLUMNS/LINES (set under pytest) would override the pane's real size in Textual;
    # the pane stays open after exit so the test can see how it ended
    return f"env -u COLUMNS -u LINES {env} {shlex.quote(sys.executable)} -m memlens tui {args}; echo EXITED $?; sleep 30"


def test_real_snapshot_in_tmux(shared_snapshots_dir):
    t = Tmux(_command(shared_snapshots_dir / REAL))
    try:
        out = t.wait_for("event 20,121 alloc")
        assert f"{REAL} · device 0 · 20,128 events over 0.400 s · peak 51.06 GiB at" in out
        # the summary's rest on a second line, the y axis topped by the reserved peak
        assert "reserved peak 56.91 GiB · end 50.87 GiB · 7,095 allocations" in out
        assert " 56.91 GiB│" in out
        assert "185 events/column · events 0–20,127 of 20,128 shown" in out
        assert "▲" in out and "█" in out and "░" in out
        t.keys("Enter")
        out = t.wait_for("live after event 20,121")
        assert "51.06 GiB in 1,204 allocations" in out
        # backward's allocations: grouped as in every view, named by autograd node
        assert "12.72 GiB  24.9% <no Python frames: C++ / backward>  (292)" in out
        t.keys("/", "B", "m", "m", "Enter")
        out = t.wait_for("/Bmm   match 1/")
        assert "torch::autograd::generated::BmmBackward0::apply" in out
        t.keys("Escape", "h")
        t.wait_for("all frames (h: user frames only)")
        t.keys("q", "?")
        t.wait_for("memlens tui: keys")
        t.keys("x", "Left")
        t.wait_until(lambda screen: "event 20,121 " not in screen)
        t.keys("p")
        t.wait_for("event 20,121 ")
        t.keys("q")
        t.wait_for("EXITED 0")
    finally:
        t.close()


def test_compare_in_tmux(shared_snapshots_dir, expected_figures):
    a, b = expected_figures[OTHER], expected_figures[REAL]
    t = Tmux(_command(shared_snapshots_dir / OTHER, shared_snapshots_dir / REAL))
    try:
        out = t.wait_for("B: " + REAL)
        assert "A: " + OTHER in out
        # one shared cursor, on A's peak: the same event in B
        assert f"event {a['peak_event_index']:,} alloc 97.66 MiB" in out
        assert f"event {a['peak_event_index']:,} alloc 25.00 MiB" in out
        t.keys("d")
        change = format_bytes(b["peak_active_bytes"] - a["peak_active_bytes"])
        out = t.wait_for("diff B - A at the peaks")
        assert (
            f"diff B - A at the peaks (A event {a['peak_event_index']:,}, "
            f"B event {b['peak_event_index']:,}): +{change} "
            f"({format_bytes(a['peak_active_bytes'])} → {format_bytes(b['peak_active_bytes'])})"
        ) in out
        t.keys("q", "q")
        t.wait_for("EXITED 0")
    finally:
        t.close()


def test_tiny_terminal_without_colour_in_tmux(shared_snapshots_dir):
    t = Tmux("NO_COLOR=1 " + _command(shared_snapshots_dir / REAL), width=40, height=10)
    try:
        out = t.wait_for("event 20,121 alloc")
        lines = out.splitlines()
        assert lines[0] == f"{REAL} · d…"  # one line: no room for two
        assert lines[1].startswith(" 56.91 GiB│") and "too small" not in out
        assert any(x.startswith("          └") and x.endswith("▲") for x in lines)
        t.keys("Enter")
        out = t.wait_for("live after event 20,121")
        assert "▾   51.06 GiB 100.0% all  (1,204)" in out
        t.keys("q", "s")
        out = t.wait_for("summary of")
        # long lines go on over the next line (between words), not cut
        assert f"\n    {REAL}\n" in out
        t.keys("PageDown")
        t.wait_for("average      ")
        t.keys("q", "q")
        out = t.wait_for("EXITED 0")
        assert "Traceback" not in out
    finally:
        t.close()
