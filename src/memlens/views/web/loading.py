"""The viewer's data while it loads (issue 37): `memlens view` serves the page before its
snapshots are loaded, so the browser starts, fetches the page and parses it while a
background thread loads them; every /api request waits here for that load (no polling),
then answers as it would have, or with the load's error as a clean 400 answer."""

from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING

from memlens.errors import MemlensError

if TYPE_CHECKING:  # (imported by the loading thread: the URL is printed before)
    from memlens.views.web.data import ViewerData


class Loading:
    """A ViewerData that may still be loading: given at once, or set (or failed) later by
    the thread that loads it."""

    def __init__(self, data: ViewerData | None = None) -> None:
        self.future: Future[ViewerData] = Future()
        if data is not None:
            self.future.set_result(data)

    def loaded(self) -> bool:
        """Whether the data is there (a failed load is not)."""
        return self.future.done() and self.future.exception() is None

    def wait(self) -> ViewerData:
        """The data, once loaded; a failed load raises MemlensError saying why (a new
        exception each time: the load's own one is the loading thread's to report)."""
        try:
            return self.future.result()
        except MemlensError as exc:
            raise MemlensError(f"the snapshot could not be opened: {exc}") from None
        except Exception as exc:  # a bug: said by the command on stderr, named here
            raise MemlensError(
                f"the snapshot could not be opened (internal error {type(exc).__name__})"
            ) from None
