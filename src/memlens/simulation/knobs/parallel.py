"""The `fsdp2=N` and `ddp=N` what-if knobs (`memlens plan --what-if`): an unedited
single-GPU script simulated as rank 0 of N, its model wrapped the way users wrap theirs.

The script never names its model to us, so the wrap happens where the model meets the
optimizer: the first `torch.optim.Optimizer.__init__` (every optimizer's base, so the
foreach=/fused= knobs' own patches still apply) finds the live nn.Module that owns all
the parameters it was given (the outermost one; the smallest of several), starts the fake
process group at world N (simulation/distributed: torchrun's environment for rank 0,
collectives that move nothing), wraps that module, and hands the optimizer the wrapped
module's parameters in place of the ones it was given. So it assumes:

- the optimizer is built after the model is on the GPU and from its parameters (a model
  moved or built later is not wrapped; "not applied" says why);
- the data each rank sees is the script's own: the per-GPU batch is kept, not divided;
- the script holds the parameters only through the model and the optimizer (its own
  parameter-group dicts are updated; a list of them it keeps elsewhere would keep the
  unsharded ones alive, as it would on a GPU);
- rank 0 stands for every rank (FSDP2's shards differ by padding only on the last rank).

  fsdp2=N  `fully_shard` on every module of the largest repeated class (the class with
           two or more modules holding parameters, none inside a module of another such
           class, with the most parameters in all: transformer blocks), then on the root
  fsdp2=N:REGEX
           the same with the outermost modules whose class name matches REGEX
           (re.fullmatch) as the units
  ddp=N    `DistributedDataParallel(root)` with its defaults (25 MiB buckets, gradients
           not bucket views); the script's calls of the root go through the DDP wrapper
           (its forward prepares the reducer that fills the buckets in backward)

Imports torch: only the simulated process imports this module.
"""

from __future__ import annotations

import gc
import os
import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from memlens.errors import MemlensError
from memlens.execution.isolated import restore_environ
from memlens.simulation.distributed.env import World
from memlens.simulation.patches.fake_cuda import Patches

KEYS = ("fsdp2", "ddp")
ASSUMES = "rank 0 of {n}, per-GPU batch as the script's; the optimizer built after the model"


def check(spec: str, key: str, value: str) -> tuple[int, str | None]:
    """(N, the unit class regex or None) of `fsdp2=N[:REGEX]` / `ddp=N`."""
    n, sep, units = value.partition(":")
    if not (n.isdigit() and int(n) >= 1) or (sep and (key != "fsdp2" or not units)):
        shape = "fsdp2=N or fsdp2=N:CLASS_REGEX" if key == "fsdp2" else "ddp=N"
        raise MemlensError(f"--what-if {spec!r}: expected {shape}, N GPUs (1 or more)")
    if units:
        try:
            re.compile(units)
        except re.error as exc:
            raise MemlensError(f"--what-if {spec!r}: bad regex ({exc})") from None
    return int(n), units or None


@dataclass
class Wrapped:
    """What the wrap did: the root's class and the FSDP2 units, or why it did not."""

    key: str
    world: int
    pattern: str | None = None  # fsdp2=N:REGEX
    root: str | None = None
    units: list[str] = field(default_factory=list)  # class of each fully_shard unit
    params: int = 0  # parameters wrapped (numel)
    not_applied: str = "no torch.optim optimizer was constructed"

    def line(self) -> str:
        spec = f"{self.key}={self.world}" + (f":{self.pattern}" if self.pattern else "")
        if self.root is None:
            return f"{spec}: not applied: {self.not_applied}"
        assumes = ASSUMES.format(n=self.world)
        if self.key == "ddp":
            return (
                f"{spec}: DistributedDataParallel({self.root}) of {self.params:,} parameters "
                f"({assumes})"
            )
        units = f"{self.units[0]} x{len(self.units)}, then " if self.units else ""
        return (
            f"{spec}: fully_shard on {units}the root {self.root} ({self.params:,} "
            f"parameters; {assumes})"
        )


def install(patches: Patches, key: str, value: str) -> Wrapped:
    """Rank 0's environment at the knob's world, and the optimizer hook that wraps."""
    world, pattern = check(f"{key}={value}", key, value)
    done = Wrapped(key, world, pattern)
    saved = {k: os.environ.get(k) for k in World(world).env(0)}
    os.environ.update(World(world).env(0))
    patches.on_restore(lambda: restore_environ(saved))
    base = torch.optim.Optimizer
    original: Callable[..., None] = vars(base)["__init__"]
    # id of a given parameter -> (it, weakly: a later tensor may reuse a dead one's id;
    # the wrapped module's parameter)
    renamed: dict[int, tuple[weakref.ref[Any], torch.nn.Parameter]] = {}
    tried: list[bool] = []

    def wrapped(p: Any) -> Any:
        hit = renamed.get(id(p))
        return hit[1] if hit is not None and hit[0]() is p else p

    def __init__(self: Any, params: Any, defaults: dict[str, Any]) -> None:
        groups = _groups(params)
        if not tried:
            tried.append(True)
            given = [p for g in groups for p in g["params"]]
            new = _wrap(done, given)
            renamed.update({id(p): (weakref.ref(p), new[id(p)]) for p in given if id(p) in new})
        for g in groups:
            g["params"] = [wrapped(p) for p in g["params"]]
        original(self, groups, defaults)

    patches.set(base, "__init__", __init__)
    return done


def _groups(params: Any) -> list[dict[str, Any]]:
    """The optimizer's argument as parameter groups, as Optimizer takes it: an iterable
    of tensors or of dicts with "params". The script's own dicts are kept (Optimizer
    keeps them too), so that the wrapped parameters replace the given ones in them: a
    dict the script still holds would keep the unsharded parameters alive."""
    items: list[Any] = [params] if isinstance(params, torch.Tensor) else list(params)
    if not items or not isinstance(items[0], dict):
        return [{"params": items}]
    groups: list[dict[str, Any]] = items
    for g in groups:
        ps = g["params"]
        g["params"] = [ps] if isinstance(ps, torch.Tensor) else list(ps)
    return groups


def _owner(params: list[Any]) -> torch.nn.Module | None:
    """The live module holding all of `params`: the outermost such module (one no other
    holds), the one with fewest parameters if several are."""
    wanted = {id(p) for p in params}
    holders = []
    for obj in gc.get_objects():
        # type(), not isinstance: a deprecated torch object warns when asked its class
        if issubclass(type(obj), torch.nn.Module):
            mine = {id(p) for p in obj.parameters()}
            if wanted <= mine:
                holders.append((obj, len(mine)))
    inner = {id(m) for h, _ in holders for m in h.modules() if m is not h}
    outer = [(h, n) for h, n in holders if id(h) not in inner]
    return min(outer, key=lambda hn: hn[1])[0] if outer else None


def largest_repeated(root: torch.nn.Module, pattern: str | None = None) -> list[torch.nn.Module]:
    """The modules of the largest repeated class, or the outermost of those whose class
    matches `pattern` (see the module's docstring)."""
    if pattern is not None:
        rx = re.compile(pattern)
        return _outermost([m for m in root.modules()
                           if m is not root and rx.fullmatch(type(m).__name__)])  # fmt: skip
    by_class: dict[type, list[torch.nn.Module]] = {}
    for m in root.modules():
        if m is not root and any(True for _ in m.parameters()):
            by_class.setdefault(type(m), []).append(m)
    repeated = {c: ms for c, ms in by_class.items() if len(ms) >= 2}
    inside: set[type] = set()
    for c, ms in repeated.items():
        for m in ms:
            inside.update(type(s) for s in m.modules() if s is not m and type(s) is not c)
    # a class nested in itself (a block of blocks) keeps its outermost modules only
    candidates = {c: _outermost(ms) for c, ms in repeated.items() if c not in inside}
    if not candidates:
        return []
    best = max(
        candidates.values(), key=lambda ms: sum(p.numel() for m in ms for p in m.parameters())
    )
    return best


def _outermost(modules: list[torch.nn.Module]) -> list[torch.nn.Module]:
    nested = {id(s) for m in modules for s in m.modules() if s is not m}
    return [m for m in modules if id(m) not in nested]


def _wrap(done: Wrapped, params: list[Any]) -> dict[int, torch.nn.Parameter]:
    """Wrap the owner of `params`; the map from each given parameter to its wrap's."""
    import torch.distributed as dist

    if not params:
        done.not_applied = "the first optimizer was given no parameters"
        return {}
    if dist.is_available() and dist.is_initialized():
        done.not_applied = "the script starts torch.distributed itself"
        return {}
    root = _owner(params)
    if root is None:
        done.not_applied = "no nn.Module holds all the first optimizer's parameters"
        return {}
    devices = sorted({str(p.device) for p in root.parameters()})
    if any(not d.startswith("cuda") for d in devices):
        done.not_applied = (
            f"the model's parameters are on {', '.join(devices)} when the optimizer is built"
        )
        return {}
    units = largest_repeated(root, done.pattern) if done.key == "fsdp2" else []
    if done.pattern is not None and not units:
        seen = sorted({type(m).__name__ for m in root.modules() if m is not root})
        done.not_applied = (
            f"no module class under {type(root).__name__} matched {done.pattern!r} "
            f"(classes: {', '.join(seen) or 'none'})"
        )
        return {}
    names = {id(p): n for n, p in root.named_parameters(remove_duplicate=False)}
    dist.init_process_group("nccl")
    done.root = type(root).__name__
    done.params = sum(p.numel() for p in root.parameters())
    if done.key == "ddp":
        _ddp(root)
        return {}
    from torch.distributed.fsdp import fully_shard

    done.units = [type(m).__name__ for m in units]  # fully_shard renames the class
    for m in units:
        fully_shard(m)
    fully_shard(root)
    return {i: root.get_parameter(n) for i, n in names.items()}


def _ddp(root: torch.nn.Module) -> None:
    """DDP around `root`, and the script's calls of `root` routed through it: DDP's
    forward calls `root` again, which then runs its own forward."""
    from torch.nn.parallel import DistributedDataParallel

    device = next(root.parameters()).device
    ddp = DistributedDataParallel(root, device_ids=[device])
    inside: list[bool] = []

    def call(*args: Any, **kwargs: Any) -> Any:
        if inside:
            return root._call_impl(*args, **kwargs)
        inside.append(True)
        try:
            return ddp(*args, **kwargs)
        finally:
            inside.pop()

    # nn.Module.__call__ runs `_compiled_call_impl` when set (what Module.compile uses):
    # the hook for a call of this one module instance
    root._compiled_call_impl = call
