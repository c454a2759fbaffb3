"""The snapshots simulated code writes itself, and the window of the run each one holds.

Code writes snapshots two ways: `torch.cuda.memory._dump_snapshot(path)`, or
`torch.cuda.memory._snapshot()` saved with `pickle.dump` / `torch.save` (PyTorch's own
blog post, and memlens's trainer callbacks). The dicts `_snapshot()` returns are
remembered by identity, and `pickle.dump` / `torch.save` are wrapped while simulating to
notice when one of them is written and where. Each file's window (which trace entries
of the whole run it holds) is kept so that `memlens simulate` can say what each file is.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_unflatten

if TYPE_CHECKING:
    from memlens.simulation.patches.fake_cuda import Patches


@dataclass(frozen=True)
class OwnSnapshot:
    """A snapshot file the simulated code wrote: where, how, and the window it holds
    (trace entries `first` to `stop` - 1 of the whole run, which had `run_entries` when
    the file was written; the state is the one at that moment)."""

    path: Path
    how: str
    first: int
    stop: int
    run_entries: int
    snapshot: dict[str, Any] = field(repr=False, compare=False)

    def window(self) -> str:
        if self.stop == self.first:
            return "no trace entries (history was off), the state when written"
        entries = (
            f"trace entry {self.stop:,}"
            if self.stop == self.first + 1
            else f"trace entries {self.first + 1:,} to {self.stop:,}"
        )
        span = f"{entries} of the run's {self.run_entries:,}"
        if self.first == 0 and self.stop == self.run_entries:
            span = f"the whole run so far ({self.run_entries:,} trace entries)"
        return f"{span}, the state when written"


def _path_of(file: Any) -> Path | None:
    if isinstance(file, (str, os.PathLike)):
        return Path(file)
    name = getattr(file, "name", None)
    if isinstance(name, int):  # os.fdopen(mkstemp()[0]): an atomic writer's temporary file
        try:
            return Path(os.readlink(f"/proc/self/fd/{name}"))
        except OSError:
            return None
    return Path(name) if isinstance(name, (str, os.PathLike)) else None


class OwnSnapshots:
    def __init__(self) -> None:
        self.written: list[OwnSnapshot] = []
        # id -> (the dict, its window): the dict is held so that its id cannot be reused
        # by another object while it may still be written
        self._taken: dict[int, tuple[dict[str, Any], tuple[int, int, int]]] = {}

    def taken(self, snapshot: dict[str, Any], window: tuple[int, int, int]) -> None:
        """`_snapshot()` returned `snapshot`; window: (first, stop, run entries)."""
        self._taken[id(snapshot)] = (snapshot, window)

    def wrote(
        self, path: Path, how: str, snapshot: dict[str, Any], window: tuple[int, int, int]
    ) -> None:
        self.written.append(OwnSnapshot(path, how, *window, snapshot=snapshot))

    def _saved(self, obj: Any, file: Any, how: str) -> None:
        taken = self._taken.get(id(obj))
        path = _path_of(file)
        if taken is not None and taken[0] is obj and path is not None:
            self.wrote(path, how, obj, taken[1])

    def _moved(self, src: Any, dst: Any) -> None:
        # atomic writers (memlens's own callbacks) write a temporary file, then rename it
        for i, own in enumerate(self.written):
            if os.path.abspath(own.path) == os.path.abspath(src):
                self.written[i] = replace(own, path=Path(dst))

    def install(self, patches: Patches, note: Callable[[str], None]) -> None:
        """Wrap pickle.dump and torch.save to notice `_snapshot()` dicts being written,
        and os.replace / os.rename to follow a temporary file to its final name. A
        checkpoint's fake tensors are saved as meta tensors (`_shapes_only`)."""
        dump, save, os_replace, os_rename = pickle.dump, torch.save, os.replace, os.rename

        def renamed(move: Callable[..., None]) -> Callable[..., None]:
            def wrapper(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
                move(src, dst, *args, **kwargs)
                if self.written and isinstance(src, (str, os.PathLike)):
                    self._moved(src, dst)

            return wrapper

        patches.set(os, "replace", renamed(os_replace))
        patches.set(os, "rename", renamed(os_rename))

        def pickle_dump(obj: Any, file: Any, *args: Any, **kwargs: Any) -> None:
            dump(obj, file, *args, **kwargs)
            self._saved(obj, file, "pickle.dump(torch.cuda.memory._snapshot())")

        def torch_save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
            # a `_snapshot()` dict holds no tensors: saved as it is, not walked
            save(obj if id(obj) in self._taken else _shapes_only(obj, note), f, *args, **kwargs)
            self._saved(obj, f, "torch.save(torch.cuda.memory._snapshot())")

        patches.set(pickle, "dump", pickle_dump)
        patches.set(torch, "save", torch_save)


def _shapes_only(obj: Any, note: Callable[[str], None]) -> Any:
    """A checkpoint (`torch.save` of state dicts) with each fake tensor in its dicts,
    lists and tuples as a meta tensor of the same shape, strides and dtype: a fake has
    no values to write and does not pickle (its fake mode's weak references). On a GPU
    the save copies each tensor to the host: no device memory either way. The file is
    small and `torch.load` reads it back as meta tensors."""
    leaves, spec = tree_flatten(obj)
    if not any(isinstance(leaf, FakeTensor) for leaf in leaves):
        return obj
    note("torch.save wrote the fake tensors' shapes and dtypes (meta tensors), not values")
    with _disable_current_modes():
        metas = [
            torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
            if isinstance(t, FakeTensor)
            else t
            for t in leaves
        ]
    return tree_unflatten(metas, spec)
