"""The framework-independent half of the trainer callbacks: which steps to record, the
stage ranges, the OOM dump and the file names.

Files, in `<output_dir>/memlens/`, one set per rank:
- `steps3-5_rank0.pickle` and its HTML report `steps3-5_rank0.html`: steps 3 to 5
  (`record_steps=(3, 5)`; a run that stops earlier is cut at its last step, `steps3-4_...`);
- `oom/oom_step4_rank0.pickle`: the first CUDA out-of-memory error, taken inside the failing
  allocation during step 4 (step 0: before the first step).
Every name carries `rank<N>`, which `memlens fleet` reads the rank from, so
`memlens fleet out/memlens` compares the ranks' recorded steps; OOM dumps have a folder of
their own so the two kinds never mix in one fleet.

Stages: each step is a range `memlens.step#N` (N: the trainer's step, counted from 1)
holding `forward`, `backward` and `optimizer` ranges. Analyses group the steps by base name
("memlens.step"), as they do torch.profiler's ProfilerStep#N.

Recording goes through memlens's capture layer (`memlens.capture`), so a GPU, `memlens
simulate` and the tests' fake backend are driven the same way.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from types import EllipsisType
from typing import Any

from memlens.capture import oom, session
from memlens.capture.backend import DEFAULT_MAX_ENTRIES, Backend, RecordSettings, get_backend
from memlens.capture.errors import RecordError, RecordingActiveError
from memlens.capture.markers import STEP_PREFIX, stage
from memlens.capture.output import dump_snapshot, prepare_output
from memlens.keywords import with_options
from memlens.recording import write_report_beside

log = logging.getLogger("memlens.integrations")

FOLDER = "memlens"
OOM_FOLDER = "oom"
STAGES = ("forward", "backward", "optimizer")


def window_name(first: int, last: int, rank: int) -> str:
    return f"steps{first}-{last}_rank{rank}.pickle"


def oom_name(step: int, rank: int) -> str:
    return f"oom_step{step}_rank{rank}.pickle"


def check_steps(record_steps: tuple[int, int] | None) -> tuple[int, int] | None:
    """`(first, last)`, both counted from 1, first <= last; None records no steps."""
    if record_steps is None:
        return None
    try:
        first, last = record_steps
    except (TypeError, ValueError):
        raise RecordError(
            f"record_steps must be (first, last), e.g. (3, 5), got {record_steps!r}"
        ) from None
    for n in (first, last):
        if isinstance(n, bool) or not isinstance(n, int):
            raise RecordError(f"record_steps must be two whole numbers, got {record_steps!r}")
    if not 1 <= first <= last:
        raise RecordError(
            f"record_steps must satisfy 1 <= first <= last (steps count from 1), "
            f"got {record_steps!r}"
        )
    return first, last


@dataclasses.dataclass(frozen=True)
class RecorderConfig:
    """What a trainer callback records: the keywords of `MemlensCallback` (hf, lightning)
    and `TrainingRecorder`, written once.

    - `record_steps`: (first, last), both counted from 1; None only watches for OOMs.
    - `output_dir`: where `memlens/` goes (default: the trainer's output folder).
    - `dump_on_oom`: dump a snapshot on the first CUDA OOM (False: history is off outside
      the recorded steps, at no cost). `report`: the HTML report beside each recording.
    - `max_entries`, `stacks`, `context`: `memlens.record`'s.
    """

    record_steps: tuple[int, int] | None = (3, 5)
    output_dir: str | os.PathLike[str] | None = None
    dump_on_oom: bool = True
    report: bool = True
    max_entries: int = DEFAULT_MAX_ENTRIES
    stacks: str = "python"
    context: str | None = "all"

    @classmethod
    def of(
        cls,
        record_steps: tuple[int, int] | None | EllipsisType,
        config: RecorderConfig | None,
        options: Mapping[str, Any],
    ) -> RecorderConfig:
        """`config` (or the defaults) with the keywords given replacing its fields
        (`record_steps` is `...` when not given); an unknown keyword is a TypeError."""
        given = dict(options) if record_steps is ... else {**options, "record_steps": record_steps}
        return with_options(cls, config, given, "the memlens recorder")


def _say(message: str) -> None:
    # stderr, as `memlens run` does: the training script's stdout stays its own.
    print(f"memlens: {message}", file=sys.stderr, flush=True)


# Recorders between start() and finish()/abandon(). A training run that raised (an OOM in
# transformers.Trainer, which has no exception hook) leaves its recorder here; the next
# start() in the process ends it, so its recording does not leak into the next run.
_running: list[TrainingRecorder] = []


class TrainingRecorder:
    """Records steps `record_steps` of one training run and dumps on OOM; see the module
    docstring for the files. The callbacks call start / begin_step / enter / exit /
    end_step / finish (or abandon, when training raised).

    `TrainingRecorder((3, 5), report=False)`: the keywords are `RecorderConfig`'s fields;
    `config=` passes a whole one, which the keywords then override."""

    def __init__(
        self,
        record_steps: tuple[int, int] | None | EllipsisType = ...,
        *,
        config: RecorderConfig | None = None,
        **options: Any,
    ) -> None:
        self.config = cfg = RecorderConfig.of(record_steps, config, options)
        self.steps = check_steps(cfg.record_steps)
        self.output_dir = None if cfg.output_dir is None else Path(cfg.output_dir).expanduser()
        self.dump_on_oom = cfg.dump_on_oom
        self.report = cfg.report
        self.settings = RecordSettings(
            max_entries=cfg.max_entries, stacks=cfg.stacks, context=cfg.context
        )
        self.folder: Path | None = None
        self.rank = 0
        self.step = 0  # the step in progress (or the last one); 0 before the first
        self.snapshot_path: Path | None = None
        self.report_path: Path | None = None
        self._backend: Backend | None = None
        self._background: session.Token | None = None  # history kept for an OOM dump
        self._window: session.Token | None = None  # the recorded steps
        self._window_first = 0
        self._dumper: oom.OomDumper | None = None
        self._ranges: dict[str, stage] = {}
        self._step_range: stage | None = None

    @property
    def oom_paths(self) -> list[Path]:
        """OOM snapshots written (at most one per run)."""
        return list(self._dumper.paths) if self._dumper is not None else []

    @property
    def in_step(self) -> bool:
        return self._step_range is not None

    # ------------------------------------------------------------------ run lifecycle
    def start(self, output_dir: str | os.PathLike[str], rank: int) -> None:
        """Training begins: check the output folder, start the OOM watch. Without CUDA
        (and outside `memlens simulate`) it says so once and records nothing."""
        for stale in list(_running):
            stale.abandon()
        backend = get_backend()
        if not backend.is_available():
            reason = backend.unavailable_reason()
            _say(
                "no CUDA device"
                + (f" ({reason})" if reason else "")
                + ": the memlens callback records nothing (`memlens simulate` predicts it)"
            )
            return
        self.rank = rank
        self.step = 0
        self.snapshot_path = self.report_path = None
        self.folder = (self.output_dir or Path(output_dir).expanduser()) / FOLDER
        if self.steps is not None:
            # Checked now, not after the steps it would lose.
            prepare_output(self.folder / window_name(*self.steps, rank))
            if session.active_settings(backend) is None and backend.history_enabled():
                raise RecordingActiveError(session.ACTIVE_ELSEWHERE_MESSAGE)
        self._backend = backend
        _running.append(self)
        if self.dump_on_oom:
            self._watch_ooms(backend, self.folder / OOM_FOLDER)

    def _watch_ooms(self, backend: Backend, folder: Path) -> None:
        prepare_output(folder / oom_name(0, self.rank))
        self._background = self._keep_history(backend)
        dumper = oom.OomDumper(backend, lambda _n: folder / oom_name(self.step, self.rank))
        try:
            self._dumper = oom.watch(dumper)
        except RecordError as exc:  # a PyTorch build without the OOM observer
            dumper.close()
            _say(f"no snapshot on OOM: {exc}")

    def _keep_history(self, backend: Backend) -> session.Token | None:
        """Record in the background so an OOM snapshot shows what led to it, unless some
        recording (memlens run, the user's own) already does."""
        if session.active_settings(backend) is not None or backend.history_enabled():
            return None
        return session.begin(self.settings, backend)

    def finish(self) -> None:
        """Training ended: close the ranges, write a window cut short, stop recording."""
        if self._backend is None:
            return
        self._close_ranges()
        if self._window is not None:
            self._write_window(self.step)
        self._stop()

    def abandon(self) -> None:
        """Training raised: stop recording without writing the window (an OOM has its own
        snapshot already); write the OOM snapshots' reports, now that it is safe to."""
        if self._backend is None:
            return
        # The ranges' record_function objects are dropped, not exited: the frame that
        # raised may have left torch's profiler state anywhere.
        self._ranges.clear()
        self._step_range = None
        if self._window is not None:
            self._end_quietly(self._window)
            self._window = None
        if self.report:
            for path in self.oom_paths:
                write_report_beside(path)
        self._stop()

    def _stop(self) -> None:
        if self._dumper is not None:
            self._dumper.close()
        if self._background is not None:
            self._end_quietly(self._background)
            self._background = None
        self._backend = None
        if self in _running:
            _running.remove(self)

    @staticmethod
    def _end_quietly(token: session.Token) -> None:
        # After a failed run the device (or the simulation) may be gone; ending a recording
        # must not hide the error that ended the run.
        try:
            session.end(token)
        except Exception as exc:
            log.debug("memlens: stopping a recording failed: %s", exc)

    # ------------------------------------------------------------------ steps and stages
    def begin_step(self, step: int) -> None:
        """Step `step` (from 1) starts: open the window at its first step, then the range."""
        if self._backend is None:
            return
        self._close_ranges()
        self.step = step
        first_of_window = (
            self.steps is not None
            and self.steps[0] <= step <= self.steps[1]  # from `first`, or a resumed run's first
            and self._window is None
            and self.snapshot_path is None
        )
        if first_of_window:
            if self._background is not None:
                # Switching history off clears it: the window holds its steps only.
                session.end(self._background)
                self._background = None
            self._window = session.begin(self.settings, self._backend)
            self._window_first = step
        if self._marking():
            self._step_range = stage(f"{STEP_PREFIX}{step}")
            self._step_range.__enter__()

    def end_step(self, step: int) -> None:
        """Step `step` ended: close its ranges; after the last recorded step, write it."""
        if self._backend is None:
            return
        self._close_ranges()
        if self._window is not None and self.steps is not None and step >= self.steps[1]:
            self._write_window(step)

    def enter(self, name: str) -> None:
        """Open the range `name` (once: entering an open range does nothing)."""
        if self._marking() and self._step_range is not None and name not in self._ranges:
            s = stage(name)
            s.__enter__()
            self._ranges[name] = s

    def exit(self, name: str) -> None:
        s = self._ranges.pop(name, None)
        if s is not None:
            s.__exit__(None, None, None)

    def is_open(self, name: str) -> bool:
        return name in self._ranges

    def _marking(self) -> bool:
        # Ranges cost a little on every step; they are only kept while history is on.
        return self._window is not None or self._dumper is not None

    def _close_ranges(self) -> None:
        for name in reversed(list(self._ranges)):
            self.exit(name)
        if self._step_range is not None:
            self._step_range.__exit__(None, None, None)
            self._step_range = None

    def _write_window(self, last: int) -> None:
        assert self._backend is not None and self._window is not None and self.folder
        assert self.steps is not None
        first, last = self._window_first, min(last, self.steps[1])
        path = self.folder / window_name(first, last, self.rank)
        try:
            # The dump comes first: switching recording off clears the history.
            self.snapshot_path = dump_snapshot(self._backend, path)
        finally:
            session.end(self._window)
            self._window = None
        if self._dumper is not None:
            self._background = self._keep_history(self._backend)
        if self.report:
            self.report_path = write_report_beside(path)
        _say(f"steps {first}-{last} written to {path}")
