"""`memlens view`'s snapshot loading, beside the server (issue 37): the checks that need
only a file's first bytes run before the URL is printed (a missing file or a text file is
one error line and no URL, as before); the load itself runs on a background thread while
the browser starts and fetches the page, and then warms the viewer's indexes."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from memlens.cli.options import open_snapshots
from memlens.views.web.loading import Loading

if TYPE_CHECKING:
    from memlens.views.web.data import ViewerData


def check_cheaply(paths: Sequence[str | None]) -> None:
    """Raise the reader's own SnapshotError for a file that is missing, a directory, empty
    or not a pickle, from its first and last bytes (mapped, not read). A gzip stream is
    left to the load: it would have to be inflated."""
    from memlens.snapshot.read.reader import GZIP_MAGIC, JSON_STARTS, open_data
    from memlens.snapshot.read.sniff import refuse_non_pickle

    for path in (p for p in paths if p is not None):
        try:
            with open(path, "rb") as fh:
                if fh.read(2) == GZIP_MAGIC:
                    continue
        except OSError:
            pass  # open_data says what is wrong in the reader's words
        with open_data(Path(path)) as (data, what, _):
            if bytes(data[:1]) not in JSON_STARTS:
                refuse_non_pickle(data, what)


def start_loading(
    loading: Loading,
    paths: Sequence[str | None],
    no_cache: bool,
    annotation_files: tuple[str, ...],
    device: int | None,
    go: threading.Event,
    then: Callable[[ViewerData, list[Callable[[], None]]], None],
) -> None:
    """Load the snapshots into `loading` on a daemon thread, once `go` is set;
    `then(data, cache_writes)` runs on it once they are loaded (the warm-up). A failed
    load (a bad file, an unknown --device) fails `loading` with its error."""

    def load() -> None:
        # a cold load's column cache is written later, after the first viewport
        cache_writes: list[Callable[[], None]] = []
        go.wait()
        try:
            from memlens.views.web.data import ViewerData

            opened = open_snapshots(paths, no_cache, annotation_files, device, cache_writes)
            snaps = [s for _, s in opened]
            if device is not None:
                for s in snaps:
                    s.device(device)  # fails early, with the list of devices
            data = ViewerData(snaps, [p for p, _ in opened])
            data.defer_indexes()
        except BaseException as exc:  # the command reports it, once it stopped serving
            loading.future.set_exception(exc)
            return
        loading.future.set_result(data)
        then(data, cache_writes)

    loading.future.set_running_or_notify_cancel()  # (the command waits for a running one)
    threading.Thread(target=load, name="memlens-load", daemon=True).start()
