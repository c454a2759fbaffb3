"""`memlens.estimate(model, inputs, optimizer)`: "will it fit?" without a script file.

The model (or the function that builds it) runs a few steps under `memlens.simulate`,
the loop a user would write, and the answer is read from the snapshot that produced:

    model to cuda (built inside the simulation, or a fake copy of the one given)
    model cast to bf16/fp16 for the pure precisions
    [FSDP2 / DDP wrap at the optimizer, simulation/knobs/parallel.py, rank 0 of world]
    optimizer = factory(the parameters that require grad)
    repeat `steps` times (default 2, so the optimizer's state exists, as in a real loop):
        batch = inputs moved to cuda (the previous step's batch dies when replaced)
        with autocast for the mixed precisions:
            out = model(batch); loss = loss(out) or out.loss or out.sum()
        loss.backward() (scaled by a GradScaler for fp16-mixed); step; zero_grad(None)

Inference runs the forward `steps` times (default 1) under `torch.inference_mode()`,
or, with `generate=M`, greedy decoding with the model's KV cache as Hugging Face's
`generate` does (prefill with `logits_to_keep=1`, then M - 1 one-token forwards).
`docs/estimate.md` says what each option covers and what it does not.

Imports torch when called (the facade's lazy name imports only this module's top).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memlens.errors import MemlensError
from memlens.simulation.estimate_result import Estimate, breakdown

if TYPE_CHECKING:
    import torch

# precision -> (parameter dtype name or None: fp32, autocast dtype name or None)
PRECISIONS: dict[str, tuple[str | None, str | None]] = {
    "fp32": (None, None),
    "bf16-mixed": (None, "bfloat16"),
    "fp16-mixed": (None, "float16"),
    "bf16": ("bfloat16", None),
    "fp16": ("float16", None),
}
SHARDINGS = ("fsdp2", "ddp")

ModelArg = Any  # an nn.Module, or a function of no arguments that builds one
OptimizerArg = Any  # an Optimizer class, (class, kwargs), or a function of the parameters


@dataclass(frozen=True)
class Workload:
    """What one estimate runs: everything but the card and the device memory."""

    model: ModelArg
    inputs: Any
    optimizer: Callable[[list[Any]], Any] | None
    loss: Callable[[Any], Any] | None
    train: bool
    steps: int
    precision: str
    generate: int
    world: int
    sharding: str | None


def estimate(
    model: ModelArg,
    inputs: Any,
    optimizer: OptimizerArg = None,
    *,
    optimizer_kwargs: Mapping[str, Any] | None = None,
    loss: Callable[[Any], Any] | None = None,
    train: bool = True,
    steps: int | None = None,
    precision: str = "fp32",
    generate: int = 0,
    gpu: str | None = None,
    world: int = 1,
    sharding: str | None = None,
) -> Estimate:
    """The memory `model` needs for `steps` training steps (or inference) on `inputs`,
    simulated on fake CUDA tensors: no GPU is touched and no script file is needed.

    - `model`: an nn.Module (a fake copy is simulated; yours is left as it is; a model on
      the meta device is materialised with `to_empty`) or a function of no arguments that
      builds one (built inside the simulation: nothing is allocated for real).
    - `inputs`: a tensor (`model(x)`), a tuple or list (`model(*x)`) or a dict
      (`model(**x)`), on the CPU; moved to cuda at every step.
    - `optimizer`: an Optimizer class with `optimizer_kwargs`, a `(class, kwargs)` pair, or
      a function of the parameter list that returns one; default AdamW with torch's
      defaults. Built from the parameters that require grad (LoRA-style freezing works).
    - `loss`: a function of the model's output to the scalar to backpropagate; default
      the output's `.loss` (Hugging Face with labels), else a tensor output's `.sum()`.
    - `train`: False runs inference under `torch.inference_mode()`; `generate=M` then
      decodes M tokens with the model's KV cache (Hugging Face's `past_key_values`).
    - `steps`: default 2 in training (the optimizer's state exists from the first step),
      1 in inference.
    - `precision`: "fp32", "bf16-mixed" / "fp16-mixed" (fp32 weights, CUDA autocast;
      fp16-mixed trains with a GradScaler), "bf16" / "fp16" (weights cast).
    - `gpu`: the card simulated ("h100" default, "a100", "rtx4090", ...): its cuBLAS
      workspace and attention kernels; memory is unlimited, `.fits()` compares.
    - `world`, `sharding`: rank 0 of `world` GPUs, the model wrapped at its optimizer in
      FSDP2 (`fully_shard` per repeated block, then the root) or DDP, as
      `memlens plan --what-if fsdp2=N` does; the per-GPU batch is `inputs`.
    """
    work = workload(
        model, inputs, optimizer, optimizer_kwargs, loss, train, steps, precision, generate,
        world, sharding,
    )  # fmt: skip
    return run(work, gpu)


def workload(
    model: ModelArg,
    inputs: Any,
    optimizer: OptimizerArg,
    optimizer_kwargs: Mapping[str, Any] | None,
    loss: Callable[[Any], Any] | None,
    train: bool,
    steps: int | None,
    precision: str,
    generate: int,
    world: int,
    sharding: str | None,
) -> Workload:
    """The arguments checked (MemlensError on a bad one, before anything runs)."""
    if precision not in PRECISIONS:
        raise MemlensError(f"precision {precision!r}: one of {', '.join(PRECISIONS)}")
    if steps is not None and steps < 1:
        raise MemlensError(f"steps must be 1 or more, not {steps}")
    if generate < 0 or (generate and train):
        raise MemlensError("generate=M (M >= 1 new tokens) is for inference (train=False)")
    if world < 1:
        raise MemlensError(f"world must be 1 or more, not {world}")
    if sharding is not None and sharding not in SHARDINGS:
        raise MemlensError(f"sharding {sharding!r}: one of {', '.join(SHARDINGS)} or None")
    if world > 1 and sharding is None:
        raise MemlensError(f"world={world} needs sharding='fsdp2' or 'ddp'")
    if not train and optimizer is not None:
        raise MemlensError("an optimizer is for training: inference (train=False) has none")
    return Workload(
        model=model,
        inputs=inputs,
        optimizer=_optimizer_factory(optimizer, optimizer_kwargs) if train else None,
        loss=loss,
        train=train,
        steps=steps if steps is not None else (2 if train else 1),
        precision=precision,
        generate=generate,
        world=world,
        sharding=sharding if world > 1 else None,
    )


def _optimizer_factory(
    optimizer: OptimizerArg, kwargs: Mapping[str, Any] | None
) -> Callable[[list[Any]], Any]:
    import torch

    if isinstance(optimizer, torch.optim.Optimizer):
        raise MemlensError(
            "pass the optimizer's class (and optimizer_kwargs) or a function of the "
            "parameters: an optimizer instance holds your real parameters"
        )
    if isinstance(optimizer, tuple):
        if len(optimizer) != 2 or not isinstance(optimizer[1], Mapping):
            raise MemlensError("optimizer=(class, kwargs): a pair of a class and a dict")
        optimizer, kwargs = optimizer[0], {**optimizer[1], **(kwargs or {})}
    cls = torch.optim.AdamW if optimizer is None else optimizer
    if isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer):
        given = dict(kwargs or {})
        return lambda params: cls(params, **given)
    if kwargs:
        raise MemlensError("optimizer_kwargs go with an optimizer class, not a function")
    if not callable(cls):
        raise MemlensError(f"optimizer {cls!r}: an Optimizer class or a function")
    factory: Callable[[list[Any]], Any] = cls
    return factory


# The device memory of an estimate's own run: more than any card, so the run never
# stops at a limit (a card's preset would otherwise set its own memory as the limit).
UNLIMITED = 2**50


def run(work: Workload, gpu: str | None, device_memory: int | None = None) -> Estimate:
    """Simulate `work` on `gpu` (with `device_memory`, else unlimited): the estimate."""
    import torch

    from memlens.simulation.api import simulate
    from memlens.simulation.knobs.code import applied

    knobs = [f"{work.sharding}={work.world}"] if work.sharding else []
    oom, kept = None, ()
    with applied(knobs) as patched:
        sim = simulate(None, gpu=gpu, device_memory=device_memory or UNLIMITED)
        try:
            with sim:
                # the model and the optimizer stay alive into the state at exit, where
                # the categories tell parameters and optimizer state by being alive
                kept = _steps(work)
                # the workspaces' addresses, while the simulation still holds them
                workspaces = list(sim._workspaces.values())
        except torch.OutOfMemoryError as exc:
            oom, workspaces = str(exc), []
        del kept  # the simulation's fakes go with the simulation
    snapshot = sim.snapshot
    assert snapshot is not None  # __exit__ built it
    from memlens.snapshot.loader import load

    dev = load(snapshot, warn=False).device(0)
    wrapped = patched.report(sim.sdpa_backends)
    return Estimate(
        peak_active_bytes=int(dev.peak_active_bytes),
        peak_reserved_bytes=int(dev.peak_reserved_bytes),
        breakdown=breakdown(snapshot, workspaces),
        snapshot=snapshot,
        gpu=sim.gpu.key,
        world=work.world,
        sharding=work.sharding,
        wrapped=wrapped[0] if wrapped else None,
        oom=oom,
        notes=list(sim.notes),
        rerun=lambda capacity: _rerun(work, gpu, capacity),
    )


def _rerun(work: Workload, gpu: str | None, capacity: int) -> tuple[str | None, int]:
    done = run(work, gpu, capacity)
    return done.oom, done.peak_reserved_bytes


def _steps(work: Workload) -> tuple[Any, ...]:
    """The user's loop (see the module's docstring), inside the simulation; the model
    and the optimizer."""
    import torch

    model = _on_cuda(work.model)
    param_dtype, autocast_dtype = (
        None if name is None else getattr(torch, name) for name in PRECISIONS[work.precision]
    )
    if param_dtype is not None:
        model.to(param_dtype)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = None
    if work.optimizer is not None:
        optimizer = work.optimizer(trainable)
    elif work.sharding is not None:
        # the knob wraps where the model meets an optimizer: inference builds one that
        # allocates nothing (SGD without momentum keeps no state) and drops it
        torch.optim.SGD(trainable, lr=0.0)
    scaler = (
        torch.amp.GradScaler("cuda") if work.train and autocast_dtype is torch.float16 else None
    )
    if not work.train:
        model.eval()
    for _ in range(work.steps):
        batch = _to_cuda(work.inputs, param_dtype)
        if not work.train:
            with torch.inference_mode(), _autocast(autocast_dtype):
                if work.generate:
                    _decode(model, batch, work.generate)
                else:
                    _call(model, batch)
            continue
        with _autocast(autocast_dtype):
            value = _loss(_call(model, batch), work.loss)
        (value if scaler is None else scaler.scale(value)).backward()
        assert optimizer is not None  # training has one
        if scaler is None:
            optimizer.step()
        else:
            scaler.step(optimizer)
            scaler.update()
        optimizer.zero_grad(set_to_none=True)
    return model, optimizer


def _on_cuda(model: ModelArg) -> torch.nn.Module:
    """The model on the fake cuda device: built here, or a fake copy of the one given (a
    deep copy inside the fake mode clones the parameters into fakes: the caller's model
    keeps its real tensors)."""
    import torch

    if isinstance(model, torch.nn.Module):
        # every tensor replaced by a fake of its shape (tied weights stay tied): a deep
        # copy of real storages cannot run inside the fake mode, and would cost memory
        memo: dict[int, Any] = {}
        for t in [*model.parameters(), *model.buffers()]:
            if id(t) not in memo:
                fake = torch.empty_like(t, device="meta" if t.is_meta else "cpu")
                is_param = isinstance(t, torch.nn.Parameter)
                memo[id(t)] = torch.nn.Parameter(fake, t.requires_grad) if is_param else fake
        built = copy.deepcopy(model, memo)
    elif callable(model):
        built = model()
        if not isinstance(built, torch.nn.Module):
            raise MemlensError(f"the model function returned {type(built).__name__}, not a Module")
    else:
        raise MemlensError(f"model: an nn.Module or a function that builds one, not {model!r}")
    if any(t.is_meta for t in _tensors(built)):
        return built.to_empty(device="cuda")
    return built.to("cuda")


def _tensors(model: torch.nn.Module) -> Iterable[torch.Tensor]:
    yield from model.parameters()
    yield from model.buffers()


def _to_cuda(inputs: Any, dtype: torch.dtype | None) -> Any:
    """`inputs` on cuda; floating tensors in the weights' dtype for the pure precisions."""
    import torch
    from torch.utils._pytree import tree_map

    def move(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        if dtype is not None and t.is_floating_point():
            return t.to("cuda", dtype)
        return t.to("cuda")

    return tree_map(move, inputs)


def _call(model: torch.nn.Module, batch: Any) -> Any:
    if isinstance(batch, Mapping):
        return model(**batch)
    if isinstance(batch, (tuple, list)):
        return model(*batch)
    return model(batch)


def _loss(out: Any, loss: Callable[[Any], Any] | None) -> Any:
    import torch

    if loss is not None:
        return loss(out)
    value = getattr(out, "loss", None)
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(out, torch.Tensor):
        return out if out.dim() == 0 else out.sum()
    raise MemlensError(
        f"the model returned {type(out).__name__} with no .loss: pass loss=, a function of "
        "the output to the scalar to backpropagate"
    )


def _autocast(dtype: torch.dtype | None) -> Any:
    import contextlib

    import torch

    return contextlib.nullcontext() if dtype is None else torch.autocast("cuda", dtype=dtype)


def _decode(model: torch.nn.Module, batch: Any, new_tokens: int) -> None:
    """Greedy decoding with the KV cache, as `generate(max_new_tokens=M)` runs it: a
    prefill that keeps only the last position's logits, then M - 1 forwards of one token
    (the last token's keys and values are never computed). `generate` itself cannot run
    on fakes: its stopping checks read tensor values."""
    if not isinstance(batch, Mapping) or "input_ids" not in batch:
        raise MemlensError("generate=M needs inputs={'input_ids': prompt}")
    import inspect

    # transformers 5.x names the cache `cache` (`past_key_values` before, deprecated)
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    out = model(**batch, use_cache=True, logits_to_keep=1)
    for _ in range(new_tokens - 1):
        token = out.logits[:, -1:].argmax(-1)
        out = model(input_ids=token, use_cache=True, **{name: getattr(out, name)})
