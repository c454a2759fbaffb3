"""The test fleet's shape: 64 small ranks, three of them skewed (the ground truth)."""

import os
import signal

from memlens.fleet.record import RankRecord

RANKS = 64
PLANTED = {5: "leak", 23: "activations", 42: "pipeline"}
EVENTS = 1_500


def die_on_poison(item: str) -> str:
    """A task for the local pool that kills its own worker process on "poison"."""
    if item == "poison":
        os._exit(1)
    return item.upper()


class KillFirstWorker:
    """An `on_record` callback that SIGKILLs the worker process of the first record it is
    given (its pid ends `rec.worker`, "host:pid"); `seen` holds every rank reported."""

    def __init__(self) -> None:
        self.killed: list[int] = []
        self.seen: list[int] = []

    def __call__(self, rec: RankRecord) -> None:
        self.seen.append(rec.rank)
        if not self.killed:
            pid = int(rec.worker.rsplit(":", 1)[1])
            self.killed.append(pid)
            os.kill(pid, signal.SIGKILL)
