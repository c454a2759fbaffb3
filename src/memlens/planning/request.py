"""`PointRequest`: everything one plan point's simulation depends on, typed and frozen. The
runner keys its cache on it, the local pool hands it to a worker as it is, and a Dask task
carries it as JSON (`to_json`/`from_json`) to a fresh interpreter."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from memlens.simulation.config import SimulateConfig
from memlens.simulation.script import ScriptTarget


@dataclass(frozen=True)
class PointRequest:
    """One simulation of a plan: the script and its arguments, the simulation's settings,
    the code knobs patched in around the run (simulation.knobs.code), whether the bytes
    per call site at the peak are wanted (`sites`: they cost the stacks' collection, so
    only the knob table asks), and environment variables set on top of the inherited
    ones (`--sweep-env`, a sweep hook's); whether the allocator requests are wanted
    (`requests`: the sequence `--interpolate` fits and replays, simulation/request_log.py)."""

    target: ScriptTarget
    config: SimulateConfig
    knobs: tuple[str, ...] = ()
    sites: bool = False
    env: dict[str, str] = field(default_factory=dict)
    requests: bool = False

    def at(self, args: list[str] | tuple[str, ...], env: dict[str, str]) -> PointRequest:
        """This request for one point of a sweep: its arguments and environment."""
        return replace(self, target=self.target.with_args(args), env=dict(env))

    def identity(self) -> dict[str, Any]:
        """What determines the figures, as JSON data (the cache key's part): `sites` is
        left out, as is `requests` (an entry stored with them serves a run without them)."""
        return {
            "args": list(self.target.args),
            "module": self.target.module,
            "config": asdict(self.config),
            "knobs": list(self.knobs),
            "env": dict(sorted(self.env.items())),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target.to_json(),
            "config": asdict(self.config),
            "knobs": list(self.knobs),
            "sites": self.sites,
            "env": dict(self.env),
            "requests": self.requests,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PointRequest:
        return cls(
            ScriptTarget.from_json(data["target"]),
            SimulateConfig(**data["config"]),
            tuple(str(k) for k in data["knobs"]),
            bool(data["sites"]),
            {str(k): str(v) for k, v in data["env"].items()},
            bool(data["requests"]),
        )
