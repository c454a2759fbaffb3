"""A sweep's points: `--sweep`/`--sweep-env` parsed, and the script's arguments and
environment at each point (set in the arguments, or handed to a sweep hook)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memlens.errors import MemlensError
from memlens.planning.hook import Hook
from memlens.planning.results import PlanFindMax, PlanPoint

if TYPE_CHECKING:
    from memlens.planning.request import PointRequest


@dataclass(frozen=True)
class Sweep:
    """`--sweep 'ARG=V1,V2,...'`: a script argument and its values, in the given order;
    `--sweep-env 'NAME=V1,...'` (env): an environment variable of the script instead."""

    arg: str
    values: tuple[str, ...]
    env: bool = False

    @classmethod
    def parse(cls, spec: str, env: bool = False) -> Sweep:
        arg, sep, values = spec.partition("=")
        items = tuple(v.strip() for v in values.split(","))
        if not sep or not arg.strip() or not all(items):
            flag, what = ("--sweep-env", "NAME") if env else ("--sweep", "ARG")
            example = "BATCH=1,2,4" if env else "--batch-size=1,2,4"
            raise MemlensError(f"{flag} {spec!r}: expected '{what}=V1,V2,...', e.g. '{example}'")
        if env and not arg.strip().isidentifier():
            raise MemlensError(f"--sweep-env {spec!r}: {arg.strip()!r} is not a variable name")
        return cls(arg.strip(), items, env)


@dataclass(frozen=True)
class PointSpec:
    """One point: the swept values, the script's arguments and the environment variables
    it runs with on top of the inherited ones."""

    values: dict[str, str]
    argv: list[str]
    env: dict[str, str]

    @property
    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.values.items())

    def request(self, base: PointRequest) -> PointRequest:
        """`base` run at this point: its arguments and environment."""
        return base.at(self.argv, self.env)


def with_value(args: Sequence[str], arg: str, value: str) -> list[str]:
    """The script's arguments with `arg` set to `value`: replaced where it is given (as
    `ARG V` or `ARG=V`), appended as `ARG V` where it is not."""
    out, i, found = [], 0, False
    while i < len(args):
        a = args[i]
        if a == arg and i + 1 < len(args):
            out += [arg, value]
            i, found = i + 2, True
            continue
        if a.startswith(arg + "="):
            out.append(f"{arg}={value}")
            found = True
        else:
            out.append(a)
        i += 1
    return out if found else [*out, arg, value]


def configure(
    args: Sequence[str],
    values: dict[str, str],
    env_names: Iterable[str] = (),
    hook: Hook | None = None,
) -> PointSpec:
    """A point's run: each value of `env_names` an environment variable, the others script
    arguments, or, with a hook, handed to it (hook.py) with the script's arguments."""
    envs = set(env_names)
    env = {k: v for k, v in values.items() if k in envs}
    rest = {k: v for k, v in values.items() if k not in envs}
    if hook is not None:
        argv, more = hook.call(rest, list(args))
        return PointSpec(values, argv, {**env, **more})
    argv = list(args)
    for name, value in rest.items():
        argv = with_value(argv, name, value)
    return PointSpec(values, argv, env)


@dataclass(frozen=True)
class Search:
    """`--find-max ARG --lo LO --hi HI`: the values of `arg` from `lo` to `hi`, each run as
    the script's `args` with `arg` set to it (an environment variable when `env_names`
    names it; with a `hook`, handed to the hook)."""

    args: tuple[str, ...]
    arg: str
    lo: int
    hi: int
    env_names: tuple[str, ...] = ()
    hook: Hook | None = None

    def spec(self, value: int) -> PointSpec:
        """The point where `arg` is `value`."""
        return configure(self.args, {self.arg: str(value)}, self.env_names, self.hook)

    def answer(self, best: int | None, probes: list[PlanPoint], simulations: int) -> PlanFindMax:
        """The search's answer as bisection to one integer leaves it: no margin yet, nothing
        interpolated (interpolated_plan.py fills in its own), no fit (plan.py's)."""
        return {
            "arg": self.arg,
            "lo": self.lo,
            "hi": self.hi,
            "largest_fitting": best,
            "simulations": simulations,
            "probes": probes,
            "step": 1,
            "margin_bytes": None,
            "shortfall_bytes": None,
            "failing": [],
            "interpolated": False,
            "confirmed": None,
            "fit": None,
        }


def grid(args: Sequence[str], sweeps: Sequence[Sweep], hook: Hook | None = None) -> list[PointSpec]:
    """Every point of the cartesian product of `sweeps`, in order."""
    names = [s.arg for s in sweeps]
    if len(set(names)) != len(names):
        raise MemlensError("each argument may be swept only once")
    env_names = [s.arg for s in sweeps if s.env]
    return [
        configure(args, dict(zip(names, combo, strict=True)), env_names, hook)
        for combo in itertools.product(*(s.values for s in sweeps))
    ]
