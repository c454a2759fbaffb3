"""What-if knobs that change how an unedited script runs in a simulation (`memlens plan
--what-if`): runtime patches of torch applied around `run_script`, each counting what it
covered so the report can say when it did not apply.

  checkpoint=REGEX    every nn.Module whose class name matches REGEX (re.fullmatch) runs
                      its forward under torch.utils.checkpoint (use_reentrant=False) when
                      grad is on; a matching module inside a checkpointed one is not
                      checkpointed again (its outer one's recomputation covers it);
                      checkpoint=auto: the largest repeated class of the first module
                      called with grad on (the model's blocks, as fsdp2= picks its units)
  autocast=bf16|fp16  every outermost nn.Module call runs under torch.autocast("cuda",
                      dtype); code outside any module (a functional loss, the backward,
                      the optimizer) runs as written, as in the recommended AMP pattern
  sdpa=math|flash|efficient|cudnn
                      only that scaled_dot_product_attention backend is enabled (the
                      torch.backends.cuda flags simulation/patches/sdpa.py reads); the script's
                      own sdpa_kernel contexts and enable_*_sdp calls are ignored
  foreach=true|false, fused=true|false
                      passed to every torch.optim optimizer that takes the option,
                      overriding the script's (forcing one on turns the other off)
  zero_grad=none|zeros
                      Optimizer.zero_grad and Module.zero_grad with set_to_none=True
                      (none) or False (zeros), overriding the script's
  autocast_cache=false|true
                      every torch.autocast region with cache_enabled=False (True),
                      overriding the script's: no weight cast kept across the region
  fsdp2=N[:REGEX], ddp=N
                      rank 0 of N GPUs, the model wrapped in FSDP2's fully_shard (its
                      units: the modules whose class matches REGEX, by default the
                      largest repeated class) or in DistributedDataParallel at its
                      first optimizer (knob_parallel.py)

Imports torch: only the simulated process (a plan worker) imports this module.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from memlens.errors import MemlensError
from memlens.simulation.knobs.parallel import KEYS as PARALLEL
from memlens.simulation.knobs.parallel import Wrapped
from memlens.simulation.knobs.parallel import check as check_parallel
from memlens.simulation.knobs.parallel import install as install_parallel
from memlens.simulation.patches.fake_cuda import Patches

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
SDPA_BACKENDS = ("math", "flash", "efficient", "cudnn")
BOOLS = {"true": True, "false": False}
ZERO_GRAD = {"none": True, "zeros": False}  # the set_to_none it forces
KEYS = (
    "checkpoint", "autocast", "autocast_cache", "sdpa", "foreach", "fused", "zero_grad",
    *PARALLEL,
)  # fmt: skip


def is_code_knob(spec: str) -> bool:
    """A `KEY=VALUE` what-if of this module (allocator settings are `KEY:VALUE`)."""
    key, sep, _ = spec.strip().partition("=")
    return bool(sep) and key.strip() in KEYS


@dataclass(frozen=True)
class CodeKnob:
    key: str
    value: str

    @property
    def spec(self) -> str:
        return f"{self.key}={self.value}"

    @classmethod
    def parse(cls, spec: str) -> CodeKnob:
        key, _, value = (s.strip() for s in spec.strip().partition("="))
        value = value if key in ("checkpoint", "fsdp2") else value.lower()
        allowed: Sequence[str] | None = {
            "autocast": tuple(AUTOCAST_DTYPES),
            "autocast_cache": tuple(BOOLS),
            "sdpa": SDPA_BACKENDS,
            "foreach": tuple(BOOLS),
            "fused": tuple(BOOLS),
            "zero_grad": tuple(ZERO_GRAD),
        }.get(key)
        if key not in KEYS:
            raise MemlensError(f"--what-if {spec!r}: unknown knob (known: {', '.join(KEYS)})")
        if allowed is not None and value not in allowed:
            raise MemlensError(f"--what-if {spec!r}: expected {key}={'|'.join(allowed)}")
        if key == "checkpoint" and value != AUTO:
            if not value:
                raise MemlensError(f"--what-if {spec!r}: expected checkpoint=CLASS_NAME_OR_REGEX")
            try:
                re.compile(value)
            except re.error as exc:
                raise MemlensError(f"--what-if {spec!r}: bad regex ({exc})") from None
        if key in PARALLEL:
            check_parallel(spec, key, value)
        return cls(key, value)


# checkpoint=auto: the model's largest repeated module class
AUTO = "auto"


@dataclass
class Counts:
    """What the patches saw during the run."""

    module_classes: set[str] = field(default_factory=set)  # every module class called
    checkpointed: Counter[str] = field(default_factory=Counter)  # class -> calls
    autocast_calls: int = 0
    autocast_regions: int = 0  # torch.autocast contexts made under autocast_cache=
    optimizers: dict[int, str] = field(default_factory=dict)  # id -> class, option applied
    zero_grad_calls: int = 0
    overridden: Counter[str] = field(default_factory=Counter)  # the script's own settings
    wrapped: Wrapped | None = None  # fsdp2= / ddp=


class _ModuleCalls:
    """nn.Module.__call__ for checkpoint= and autocast=: `depth` counts module calls
    under way (outermost = 0), `in_checkpoint` checkpointed calls under way."""

    def __init__(
        self,
        original: Callable[..., Any],
        counts: Counts,
        pattern: re.Pattern[str] | None,
        dtype: torch.dtype | None,
    ) -> None:
        self.original, self.counts, self.pattern, self.dtype = original, counts, pattern, dtype
        self.depth = 0
        self.in_checkpoint = 0
        # checkpoint=auto: the pattern is the model's repeated class, known at its first call
        self.auto = pattern is not None and pattern.pattern == AUTO
        if self.auto:
            self.pattern = None

    def _resolve_auto(self, module: Any) -> None:
        from memlens.simulation.knobs.parallel import largest_repeated

        names = sorted({type(m).__name__ for m in largest_repeated(module)})
        if names:
            self.auto = False
            self.pattern = re.compile("|".join(re.escape(n) for n in names))

    def __call__(self, module: Any, *args: Any, **kwargs: Any) -> Any:
        name = type(module).__name__
        self.counts.module_classes.add(name)
        outermost = self.depth == 0
        if outermost and self.auto and torch.is_grad_enabled():
            self._resolve_auto(module)
        self.depth += 1
        try:
            if self.dtype is not None and outermost:
                self.counts.autocast_calls += 1
                with torch.autocast("cuda", dtype=self.dtype):
                    return self._maybe_checkpoint(module, name, args, kwargs)
            return self._maybe_checkpoint(module, name, args, kwargs)
        finally:
            self.depth -= 1

    def _maybe_checkpoint(self, module: Any, name: str, args: Any, kwargs: Any) -> Any:
        if (
            self.pattern is None
            or self.in_checkpoint
            or not torch.is_grad_enabled()
            or not self.pattern.fullmatch(name)
        ):
            return self.original(module, *args, **kwargs)
        self.counts.checkpointed[name] += 1

        def run(*a: Any, **k: Any) -> Any:
            # also during the recomputation in backward: inner matches stay plain
            self.in_checkpoint += 1
            try:
                return self.original(module, *a, **k)
            finally:
                self.in_checkpoint -= 1

        from torch.utils.checkpoint import checkpoint

        return checkpoint(run, *args, use_reentrant=False, **kwargs)


def _optimizer_classes() -> list[type]:
    return [
        c
        for c in vars(torch.optim).values()
        if isinstance(c, type)
        and issubclass(c, torch.optim.Optimizer)
        and c is not torch.optim.Optimizer
    ]


def _patch_optimizers(patches: Patches, counts: Counts, forced: dict[str, bool]) -> None:
    """Every torch.optim class's __init__ gets the forced foreach/fused it accepts."""
    for cls in _optimizer_classes():
        init = vars(cls).get("__init__")
        if init is None:
            continue
        sig = inspect.signature(init)
        params = {k: v for k, v in forced.items() if k in sig.parameters}
        if not params:  # LBFGS, SparseAdam, ...: nothing to force
            continue
        # forcing one of them on turns the other off (both on is an error in torch)
        for on in [k for k, v in params.items() if v]:
            other = "fused" if on == "foreach" else "foreach"
            if other in sig.parameters and other not in params:
                params[other] = False
        patches.set(cls, "__init__", _forced_init(init, sig, params, counts))


def _forced_init(
    init: Callable[..., Any], sig: inspect.Signature, params: dict[str, bool], counts: Counts
) -> Callable[..., Any]:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        bound = sig.bind(self, *args, **kwargs)
        for k, v in params.items():
            given = bound.arguments.get(k)
            if given is not None and given != v:
                counts.overridden[f"{k}={given}"] += 1
            bound.arguments[k] = v
        counts.optimizers.setdefault(id(self), type(self).__name__)
        init(*bound.args, **bound.kwargs)

    return __init__


def _patch_autocast_cache(patches: Patches, counts: Counts, forced: bool) -> None:
    """torch.autocast (and torch.cuda.amp.autocast, its subclass) with cache_enabled
    forced; autocast= knob's own regions too."""
    cls = torch.amp.autocast_mode.autocast
    init = vars(cls)["__init__"]
    sig = inspect.signature(init)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        bound = sig.bind(self, *args, **kwargs)
        given = bound.arguments.get("cache_enabled")
        if given is not None and given != forced:
            counts.overridden[f"cache_enabled={given}"] += 1
        bound.arguments["cache_enabled"] = forced
        counts.autocast_regions += 1
        init(*bound.args, **bound.kwargs)

    patches.set(cls, "__init__", __init__)


def _patch_zero_grad(patches: Patches, counts: Counts, forced: bool) -> None:
    for owner in (torch.optim.Optimizer, torch.nn.Module):
        original = vars(owner)["zero_grad"]

        # the script's own set_to_none (positional or keyword) is taken and ignored
        def zero_grad(self: Any, set_to_none: bool = True, *, _orig: Any = original) -> None:
            counts.zero_grad_calls += 1
            if set_to_none != forced:
                counts.overridden[f"set_to_none={set_to_none}"] += 1
            _orig(self, forced)

        patches.set(owner, "zero_grad", zero_grad)


def _patch_sdpa(patches: Patches, counts: Counts, backend: str) -> None:
    cuda = torch.backends.cuda
    flags: dict[str, tuple[Callable[[], bool], Callable[[bool], None]]] = {
        "flash": (cuda.flash_sdp_enabled, cuda.enable_flash_sdp),
        "efficient": (cuda.mem_efficient_sdp_enabled, cuda.enable_mem_efficient_sdp),
        "math": (cuda.math_sdp_enabled, cuda.enable_math_sdp),
        "cudnn": (cuda.cudnn_sdp_enabled, cuda.enable_cudnn_sdp),
    }
    for name, (get, enable) in flags.items():
        saved = get()
        enable(name == backend)
        patches.on_restore(functools.partial(enable, saved))

    def ignore(owner: Any, what: str) -> None:
        original = getattr(owner, what)

        def call(*args: Any, **kwargs: Any) -> Any:
            counts.overridden[what] += 1
            return _Null()

        # torch._dynamo reads sdpa_kernel.__wrapped__ when it is first imported
        call.__wrapped__ = getattr(original, "__wrapped__", original)  # type: ignore[attr-defined]
        patches.set(owner, what, call)

    import torch.nn.attention as attention

    ignore(attention, "sdpa_kernel")
    for name in (
        "enable_flash_sdp",
        "enable_mem_efficient_sdp",
        "enable_math_sdp",
        "enable_cudnn_sdp",
        "sdp_kernel",
    ):
        ignore(cuda, name)


class _Null:
    """A context manager that does nothing (the script's ignored sdpa_kernel)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


@dataclass
class Applied:
    """The knobs of one run and what they covered; `report` says it in one line each."""

    knobs: list[CodeKnob]
    counts: Counts = field(default_factory=Counts)

    def report(self, sdpa_backends: Sequence[str] | None) -> list[str]:
        return [self._line(k, sdpa_backends) for k in self.knobs]

    def _line(self, knob: CodeKnob, sdpa: Sequence[str] | None) -> str:
        c = self.counts
        if knob.key in PARALLEL and c.wrapped is not None:
            return c.wrapped.line()
        if knob.key == "checkpoint":
            if not c.checkpointed:
                seen = ", ".join(sorted(c.module_classes)) or "none"
                return (
                    f"{knob.spec}: not applied: no module class matched "
                    f"{knob.value!r} with grad on (classes called: {seen})"
                )
            done = ", ".join(f"{n} x{k}" for n, k in sorted(c.checkpointed.items()))
            return f"{knob.spec}: forward checkpointed (use_reentrant=False): {done}"
        if knob.key == "autocast":
            if not c.autocast_calls:
                return f"{knob.spec}: not applied: no nn.Module was called"
            return (
                f"{knob.spec}: {c.autocast_calls} outermost module calls under "
                "torch.autocast('cuda'); code outside modules ran as written"
            )
        if knob.key == "sdpa":
            taken = Counter(sdpa or ())
            if not taken:
                return f"{knob.spec}: not applied: no scaled_dot_product_attention call on cuda"
            ways = ", ".join(f"{n} x{k}" for n, k in sorted(taken.items()))
            return f"{knob.spec}: scaled_dot_product_attention calls took {ways}" + self._ignored()
        if knob.key == "autocast_cache":
            if not c.autocast_regions:
                return f"{knob.spec}: not applied: no torch.autocast region was entered"
            return (
                f"{knob.spec}: {c.autocast_regions} torch.autocast regions with "
                f"cache_enabled={BOOLS[knob.value]}" + self._ignored()
            )
        if knob.key in ("foreach", "fused"):
            if not c.optimizers:
                return (
                    f"{knob.spec}: not applied: no torch.optim optimizer taking "
                    f"{knob.key}= was constructed"
                )
            names = ", ".join(sorted(Counter(c.optimizers.values())))
            return f"{knob.spec}: {len(c.optimizers)} optimizers ({names})" + self._ignored()
        if not c.zero_grad_calls:
            return f"{knob.spec}: not applied: zero_grad was never called"
        forced = ZERO_GRAD[knob.value]
        return f"{knob.spec}: {c.zero_grad_calls} zero_grad calls with set_to_none={forced}" + (
            self._ignored()
        )

    def _ignored(self) -> str:
        over = self.counts.overridden
        if not over:
            return ""
        return (
            "; the script's own "
            + ", ".join(f"{k} x{n}" for k, n in sorted(over.items()))
            + (" overridden")
        )


@contextmanager
def applied(specs: Sequence[str]) -> Iterator[Applied]:
    """Apply the code knobs `specs` for the block (around run_script) and undo them."""
    knobs = [CodeKnob.parse(s) for s in specs]
    keys = [k.key for k in knobs]
    if len(set(keys)) != len(keys):
        raise MemlensError(f"each knob may be given once per what-if: {', '.join(specs)}")
    out = Applied(knobs)
    by = {k.key: k.value for k in knobs}
    patches = Patches()
    try:
        pattern = re.compile(by["checkpoint"]) if "checkpoint" in by else None
        dtype = AUTOCAST_DTYPES[by["autocast"]] if "autocast" in by else None
        if pattern is not None or dtype is not None:
            calls = _ModuleCalls(torch.nn.Module.__call__, out.counts, pattern, dtype)

            def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
                # a function, not the bound method: it must bind to the module
                return calls(module, *args, **kwargs)

            patches.set(torch.nn.Module, "__call__", __call__)
        forced: dict[str, bool] = {k: BOOLS[by[k]] for k in ("foreach", "fused") if k in by}
        if forced:
            _patch_optimizers(patches, out.counts, forced)
        if "autocast_cache" in by:
            _patch_autocast_cache(patches, out.counts, BOOLS[by["autocast_cache"]])
        if "zero_grad" in by:
            _patch_zero_grad(patches, out.counts, ZERO_GRAD[by["zero_grad"]])
        if "sdpa" in by:
            _patch_sdpa(patches, out.counts, by["sdpa"])
        parallel = [k for k in PARALLEL if k in by]
        if len(parallel) > 1:
            raise MemlensError(f"fsdp2= and ddp= are two ways to wrap: {', '.join(specs)}")
        if parallel:
            key = parallel[0]
            out.counts.wrapped = install_parallel(patches, key, by[key])
        yield out
    finally:
        patches.restore()
