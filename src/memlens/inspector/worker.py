"""The background process: statistics, files, alerts and rendering, off the training process.

Started with the ``spawn`` start method (safe after CUDA is initialised; nothing is inherited
from the training process but the queue). It never imports torch. It ignores SIGINT (Ctrl-C
in a terminal reaches the whole process group: the training process decides when to stop and
tells this one), notices a dead parent within a fraction of a second, and always leaves its
files complete: see ``store.py``.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import queue
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from memlens.inspector import store
from memlens.inspector.alerts import AlertChecker, AlertConfig
from memlens.inspector.stats import summarize_array, unpack_reduced

FLUSH_EVERY_S = 1.0
ANNOTATIONS_EVERY_S = 10.0
ORPHAN_GRACE_S = 60.0  # after the parent died: time to save and render before giving up


@dataclass
class _Tensor:
    dir: Path
    lines: list[Any] = field(default_factory=list)
    heat: list[Any] = field(default_factory=list)
    heat_size: int = 0


class Worker:
    def __init__(self, cfg: dict[str, Any]):
        self.cfg = cfg
        self.root = Path(cfg["out"])
        self.bins = int(cfg["bins"])
        self.heatmap_size = int(cfg["heatmap_size"])
        self.tensors: dict[str, _Tensor] = {}
        self.act_rows: list[dict[str, Any]] = []
        self.act_pending: list[dict[str, Any]] = []
        self.alerts = AlertChecker(AlertConfig(**cfg.get("alerts", {})))
        self.received = 0
        self.errors = 0
        self.last_flush = time.monotonic()
        self.last_annotations = 0.0
        self.annotations_dirty = False
        self.last_live = time.monotonic()

    # -- messages -------------------------------------------------------------------------
    def handle(self, msg: tuple[Any, ...]) -> None:
        if msg[0] == "sample":
            _, key, module, kind, meta, payload = msg
            try:
                self._sample(key, module, kind, meta, payload)
            except Exception:  # a bad sample must never stop the run
                self.errors += 1
                if self.errors <= 3:
                    traceback.print_exc()
        elif msg[0] == "bytes":
            _, step, time_us, end_time_us, modules = msg
            row = {"step": step, "time_us": time_us, "end_time_us": end_time_us, "modules": modules}
            self.act_rows.append(row)
            self.act_pending.append(row)
            self.annotations_dirty = True

    def _sample(
        self, key: str, module: str, kind: str, meta: dict[str, Any], payload: tuple[Any, ...]
    ) -> None:
        if payload[0] == "raw":
            summary = summarize_array(payload[1], bins=self.bins, heatmap_size=self.heatmap_size)
        else:
            _, packed, nchunks, heat = payload
            summary = unpack_reduced(packed, nchunks, self.bins, heat)
        self.received += 1
        t = self.tensors.get(key)
        if t is None:
            d = self.root / "tensors" / store.tensor_dir_name(key)
            d.mkdir(parents=True, exist_ok=True)
            t = self.tensors[key] = _Tensor(d)
        ref = None
        hm = summary["heatmap"]
        if hm is not None:
            data = np.ascontiguousarray(hm, dtype="<f4").tobytes()
            ref = [t.heat_size, int(hm.shape[0]), int(hm.shape[1])]
            t.heat.append(data)
            t.heat_size += len(data)
        t.lines.append(store.sample_line(key, module, kind, meta, summary, ref))
        for a in self.alerts.check(key, module, kind, meta["step"], meta["numel"], summary):
            line = self.alerts.should_print(a)
            if line:
                print(line, file=sys.stderr, flush=True)
            with contextlib.suppress(OSError):
                store.append_lines(self.root / "alerts.jsonl", [a])

    # -- files ----------------------------------------------------------------------------
    def flush(self, final: bool = False) -> None:
        for t in self.tensors.values():
            if t.heat:
                with open(t.dir / "heatmaps.f32", "ab") as fh:
                    fh.write(b"".join(t.heat))
                t.heat.clear()
            if t.lines:
                store.append_lines(t.dir / "stats.jsonl", t.lines)
                t.lines.clear()
        if self.act_pending:
            store.append_lines(self.root / "activation_bytes.jsonl", self.act_pending)
            self.act_pending.clear()
        now = time.monotonic()
        if self.annotations_dirty and (final or now - self.last_annotations >= ANNOTATIONS_EVERY_S):
            store.atomic_write_json(
                self.root / "annotations.json",
                store.annotations_document(self.act_rows, self._meta()),
            )
            self.annotations_dirty = False
            self.last_annotations = now
        self.last_flush = now

    def tick(self) -> None:
        now = time.monotonic()
        if now - self.last_flush >= FLUSH_EVERY_S:
            self.flush()
        live = float(self.cfg.get("live_every_s") or 0)
        if live > 0 and now - self.last_live >= live:
            self.flush()
            self.render(videos=False, plots=False)
            self.last_live = time.monotonic()

    def _meta(self) -> dict[str, Any]:
        try:
            meta: dict[str, Any] = json.loads((self.root / "meta.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return meta

    def write_meta(self, status: str, info: dict[str, Any]) -> None:
        meta = self._meta()
        meta.update(info)
        meta.update(
            {
                "status": status,
                "ended": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "samples_written": self.received,
                "sample_errors": self.errors,
                "tensors": len(self.tensors),
            }
        )
        store.atomic_write_json(self.root / "meta.json", meta)

    def render(self, *, videos: bool = True, plots: bool = True) -> None:
        from memlens.inspector import render

        try:
            render.render_run(
                self.root,
                videos=videos,
                plots=plots,
                video_format=self.cfg.get("video_format", "auto"),
                fps=self.cfg.get("fps", 8),
            )
        except Exception:
            traceback.print_exc()


def _watchdog(parent: Any, done: threading.Event) -> None:
    """Last resort: if the parent is gone and the main loop is still stuck, leave."""
    while not done.wait(1.0):
        if parent is not None and not parent.is_alive():
            if not done.wait(ORPHAN_GRACE_S):
                os._exit(3)
            return


def worker_main(q: Any, inflight: Any, cfg: dict[str, Any]) -> None:
    """Entry point of the background process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    nice = int(cfg.get("nice", 0))
    if nice and hasattr(os, "nice"):
        # Training comes first: this process gets the CPU time training leaves over.
        with contextlib.suppress(OSError):
            os.nice(nice)
    # Keep no write end of the queue's pipe here: if the parent dies in the middle of
    # sending a message, reading the rest then ends in EOFError instead of waiting forever.
    writer = getattr(q, "_writer", None)
    if writer is not None:
        with contextlib.suppress(OSError):
            writer.close()
    w = Worker(cfg)
    parent = mp.parent_process()
    done = threading.Event()
    threading.Thread(target=_watchdog, args=(parent, done), daemon=True).start()
    status, info, render = "interrupted", {"end_reason": "parent process died"}, "dashboard"
    try:
        while True:
            try:
                msg = q.get(timeout=0.2)
            except queue.Empty:
                if parent is not None and not parent.is_alive():
                    break
                w.tick()
                continue
            except (EOFError, OSError):
                break
            if msg[0] == "stop":
                status, info, render = msg[1], msg[2], msg[3]
                break
            msgs = msg[1] if msg[0] == "batch" else [msg]
            nbytes = sum(m[-1][1].nbytes for m in msgs if m[0] == "sample")
            if nbytes:
                with inflight.get_lock():
                    inflight.value -= nbytes
            for m in msgs:
                w.handle(m)
            w.tick()
    finally:
        w.flush(final=True)
        w.write_meta(status, info)
    if render != "none":
        w.render(videos=render == "all", plots=render == "all")
    done.set()
