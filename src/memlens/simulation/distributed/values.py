"""Real values for the few tensors expert parallelism reads back: the routing counts.

A fake tensor has no values, so `.tolist()` of the token counts an expert-parallel
layer exchanges answered zeros: the dispatch all-to-all moved nothing and the combine
failed on shapes. Here the router's choices get values from the routing assumption
(routing.py) and those values follow the integer bookkeeping built from them:

- source: `topk`'s indices over E candidates (the router picking K experts for each of T
  tokens) get the assumption's choices: the experts listed in order, expert e repeated
  as often as its count, dealt token by token (choice k of token t is entry k x T + t),
  so a token never gets one expert twice;
- integer and bool constant fills made after that (`zeros_like(scores, dtype=bool)` that
  a one-hot map is scattered into, `new_empty` for an exchange's output) hold their
  constant, made only when an op reads them with a tensor that has values;
- an op whose every tensor argument has values (scatter, sum, histc, view, cumsum, to
  the host...) is run on them too, on the host; its small outputs keep theirs, and a
  tensor it writes into otherwise loses its values;
- all-to-all of a tensor with values: every rank routes its tokens by the same rule, so
  peer s sends this rank what this rank sends to rank r (its chunk r): the output is
  that chunk once per peer, when the split sizes agree;
- `.item()` / `.tolist()` of a tensor with values answers them;
- source: integer random draws on the host (`torch.randint`, `torch.randperm` on the CPU,
  `random_()` into a host tensor: a data loader's batch offsets, a sampler's order, the
  DataLoader's seed) are drawn for real, from the CPU
  generator a GPU run draws them from (same seed, same numbers, the generator advanced
  as there): `data[i : i + block_size]` with `i` from `torch.randint` is a block of
  block_size tokens, not the empty slice two zeros would give.

- source: host data. A real host tensor an op reads (`torch.from_numpy` of a data file,
  `torch.tensor([...])`, one made before the simulation) becomes a fake in the fake mode,
  which keeps no values: its fake gets the real one's. `torch.from_file` reads the file
  for real; `.numpy()` of a host fake answers a real array that is then its values
  (a data loader's `f.readinto(tokens.numpy())` fills them).

Everything else stays without values (zeros, as before). The values live beside the
fake tensors (weakly keyed), as real host tensors of at most `_MAX_NUMEL` elements.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.weak import WeakIdKeyDictionary

from memlens.simulation.distributed.routing import Routing

if TYPE_CHECKING:
    from memlens.simulation.host import SimulationHost

_aten = torch.ops.aten
_CPU = torch.device("cpu")
_MAX_NUMEL = 1 << 22  # values beyond this size are not kept (4M elements)
# ops that make a tensor of one constant whatever their tensor argument holds
_FILLS = {
    _aten.zeros_like.default: 0,
    _aten.ones_like.default: 1,
    _aten.empty_like.default: 0,
    _aten.new_zeros.default: 0,
    _aten.new_ones.default: 1,
    _aten.new_empty.default: 0,
    _aten.zeros.default: 0,
    _aten.ones.default: 1,
    _aten.empty.memory_format: 0,
    _aten.full.default: None,  # its fill argument
    _aten.full_like.default: None,
    _aten.new_full.default: None,
}
# integer random draws made on the host for real (see the module's text)
_HOST_DRAWS = {
    _aten.randint.default,
    _aten.randint.low,
    _aten.randint.generator,
    _aten.randint.low_generator,
    _aten.randperm.default,
    _aten.randperm.generator,
    # in place into a host tensor: DataLoader's `torch.empty((), dtype=torch.int64).random_()`
    _aten.random_.default,
    getattr(_aten.random_, "from"),  # a Python keyword
    _aten.random_.to,
}
_functional = torch.ops._c10d_functional
_ALL_TO_ALL = _functional.all_to_all_single.default
_WAIT = _functional.wait_tensor.default  # answers its argument


def host_numpy(original: Any, values: Values) -> Any:
    """`Tensor.numpy` in a simulation: a fake answers a real array (`Values.host_array`:
    its values when known, else zeros), a fake CUDA tensor is refused as torch refuses
    it, and a dtype numpy lacks (bfloat16) raises as torch's does. A real tensor's is
    its own (with the modes on, the fake mode would see it and answer garbage)."""

    def numpy_(self: torch.Tensor, *, force: bool = False) -> Any:
        real = self
        if isinstance(self, FakeTensor):
            if self.fake_device.type == "cuda" and not force:
                raise TypeError(
                    f"can't convert {self.fake_device} device type tensor to numpy. "
                    "Use Tensor.cpu() to copy the tensor to host memory first."
                )
            real = values.host_array(self)
        with _disable_current_modes():  # else its detach() would make it a fake again
            return original(real, force=force)

    return numpy_


def _is_real(a: Any) -> bool:
    return type(a) is torch.Tensor or type(a) is torch.nn.Parameter


def _real_or_list(a: Any) -> bool:
    if isinstance(a, (list, tuple)):
        return any(_is_real(b) for b in a)
    return _is_real(a)


def _too_large(out: Any) -> bool:
    # an output past the size values are kept for is not computed on the host at all
    return any(isinstance(t, torch.Tensor) and t.numel() > _MAX_NUMEL for t in tree_flatten(out)[0])


def _routing_note(routing: Routing) -> str:
    return (
        f"expert routing: the router's top-k choices assume --routing {routing.describe()}; "
        "every rank routes its tokens by the same rule"
    )


class Values:
    """The values known for fake tensors of one simulation (see the module's text)."""

    def __init__(self, sim: SimulationHost, routing: Routing):
        self.sim = sim
        self.routing = routing
        self._real: WeakIdKeyDictionary = WeakIdKeyDictionary()  # fake -> host tensor
        self._fill: WeakIdKeyDictionary = WeakIdKeyDictionary()  # fake -> its constant
        self._writes: dict[Any, list[int]] = {}

    def lift(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], fake_mode: Any
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The arguments with each real host tensor (one level into lists) replaced by
        the fake the fake mode would make of it (memoized per real tensor), holding the
        real one's values; the same objects when there is none (the common case)."""
        if not any(_real_or_list(a) for a in args) and not any(
            _real_or_list(a) for a in kwargs.values()
        ):
            return args, kwargs
        if torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is not fake_mode:
            return args, kwargs  # compiling: Dynamo's or AOTAutograd's fake mode makes its own
        return (
            tuple(self._lifted(a, fake_mode) for a in args),
            {k: self._lifted(a, fake_mode) for k, a in kwargs.items()},
        )

    def _lifted(self, a: Any, fake_mode: Any) -> Any:
        if isinstance(a, (list, tuple)):
            if not _real_or_list(a):
                return a  # sizes, options: as given
            return type(a)(self._lifted(b, fake_mode) for b in a)
        if not _is_real(a) or a.device.type != "cpu" or a.numel() > _MAX_NUMEL:
            return a
        fake = fake_mode.from_tensor(a)
        if fake not in self._real:
            self._keep(fake, a)
        return fake

    def read_file(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """`torch.from_file`: read for real (the host reads it on a GPU run too); a host
        fake of its size, holding what was read."""
        with unset_fake_temporarily():
            real = func(*args, **{**kwargs, "device": _CPU})
        out = torch.empty_strided(real.shape, real.stride(), dtype=real.dtype, device="cpu")
        self._keep(out, real)
        return out

    def host_array(self, fake: Any) -> Any:
        """The real host tensor behind `.numpy()` of a fake: its values when known, else
        zeros, which are then its values (a data loader's `f.readinto(t.numpy())` fills
        them) unless it is too large to keep."""
        with _disable_current_modes():  # called from the script: both modes are on
            real = self._host(fake)
            if real is fake:
                real = torch.zeros(tuple(fake.shape), dtype=fake.dtype)
                self._keep(fake, real)
                self.sim.note("tensor values are fake: .numpy() answered zeros")
            return real

    def scalar(self, t: Any) -> Any:
        """The value of a one-element tensor, or None when it has none."""
        real = self._real.get(t)
        if real is None:
            return None
        with unset_fake_temporarily():
            return real.item()

    def after(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        """Give `out` the values `func` computes from its arguments', when they have some.
        Host work runs with the fake mode off (its tensors are real ones)."""
        if func is not _aten.topk.default and func not in _HOST_DRAWS and not self._real:
            return  # no values yet: nothing to follow (the common case, at no cost)
        with unset_fake_temporarily():
            self._after(func, args, kwargs, out)

    def _after(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        if func is _aten.topk.default:
            self._route(args, kwargs, out)
            return
        if func in _HOST_DRAWS:
            self._draw(func, args, kwargs, out)
            return
        if func in _FILLS:
            self._constant(func, args, kwargs, out)
            return
        fakes = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, FakeTensor)]
        known = [a in self._real or a in self._fill for a in fakes]
        if func is _ALL_TO_ALL and args[0] in self._real:
            self._exchange(args[0], out, list(args[1]), list(args[2]), args[3])
            return
        if func is _WAIT and args[0] in self._real:
            self._keep(out, self._real[args[0]])
            return
        if known and all(known) and not _too_large(out):
            try:
                self._run(func, args, kwargs, out)
                return
            except Exception:  # noqa: BLE001 - an op the host cannot run: no values
                pass
        for index in self._written(func):
            if index < len(args) and isinstance(args[index], torch.Tensor):
                self._forget(args[index])
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._forget(t)

    def sized_by_values(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """An op whose output size depends on values (bincount, nonzero, masked_select),
        whose fake arguments all have values: a fake output of the size they give, with
        those values; None otherwise."""
        fakes = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, FakeTensor)]
        if not fakes or not all(a in self._real or a in self._fill for a in fakes):
            return None
        with unset_fake_temporarily():
            try:
                real = func(*tree_map(self._host, args), **tree_map(self._host, kwargs))
            except Exception:  # noqa: BLE001 - the host cannot run it: as without values
                return None
        device = fakes[0].device

        def fake_of(value: Any) -> Any:
            if not isinstance(value, torch.Tensor):
                return value
            return torch.empty_strided(
                value.shape, value.stride(), dtype=value.dtype, device=device
            )

        out = tree_map(fake_of, real)  # made in the fake mode, outside this block
        with unset_fake_temporarily():
            for fake, value in zip(tree_flatten(out)[0], tree_flatten(real)[0], strict=False):
                self._keep(fake, value)
        return out

    def c10d_all_to_all(self, args: tuple[Any, ...]) -> None:
        """c10d's alltoall_base_(output, input, group, output_splits, input_splits)."""
        import torch.distributed as dist

        output, source = args[0], args[1]
        if source not in self._real:
            self._forget(output)
            return
        group = dist.ProcessGroup.unbox(args[2])  # the dispatcher's boxed ScriptObject
        size = group.size()
        out_splits = list(args[3]) or [output.shape[0] // size] * size
        in_splits = list(args[4]) or [source.shape[0] // size] * size
        with unset_fake_temporarily():
            self._exchange(source, output, out_splits, in_splits, None, group=group)

    def forget_written(self, tensors: list[Any]) -> None:
        """A collective wrote these: their values are no longer known."""
        for t in tensors:
            self._forget(t)

    # ------------------------------------------------------------------ internals
    def _forget(self, t: Any) -> None:
        self._real.pop(t, None)
        self._fill.pop(t, None)

    def _keep(self, fake: Any, real: Any) -> None:
        if (
            isinstance(fake, torch.Tensor)
            and isinstance(real, torch.Tensor)
            and real.numel() <= _MAX_NUMEL
            and tuple(real.shape) == tuple(fake.shape)
        ):
            self._real[fake] = real
            self._fill.pop(fake, None)
        elif isinstance(fake, torch.Tensor):
            self._forget(fake)

    def _host(self, x: Any) -> Any:
        """A fake tensor's values on the host (a constant fill made now); a device
        argument (`prims.device_put(x, cuda)`, `_to_copy(device=cuda)`) the host's: a
        real CUDA tensor made here would mark CUDA initialised in C++ for the rest of the
        process, after which `torch.tensor(data, device="cuda")` no longer builds on the
        host first and fails (a compiled block mask did, for every later simulation);
        others as given."""
        if isinstance(x, torch.device):
            return _CPU
        if not isinstance(x, torch.Tensor):
            return x
        real = self._real.get(x)
        if real is not None:
            return real
        if x in self._fill:
            real = torch.full(tuple(x.shape), self._fill[x], dtype=x.dtype)
            self._real[x] = real
            del self._fill[x]
            return real
        return x  # a real host tensor (a constant the script made)

    def _run(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        real = func(*tree_map(self._host, args), **tree_map(self._host, kwargs))
        fakes, reals = tree_flatten(out)[0], tree_flatten(real)[0]
        for fake, value in zip(fakes, reals, strict=False):
            self._keep(fake, value)

    def _draw(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        """An integer random draw on the host: drawn for real, from the generator the
        script's own run would use (a CUDA draw has no generator here: it stays without
        values)."""
        if not isinstance(out, FakeTensor) or out.device.type != "cpu":
            return
        if out.numel() > _MAX_NUMEL:
            return
        if func._schema.arguments[0].alias_info is not None:  # random_: into its argument
            real = self._host(args[0])
            if real is args[0]:  # no values yet: what it held does not matter
                real = torch.zeros(tuple(out.shape), dtype=out.dtype)
            func(real, *args[1:], **kwargs)
            self._keep(out, real)
            return
        self._keep(out, func(*args, **{**kwargs, "device": _CPU}))

    def _constant(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        value = _FILLS[func]
        if value is None:  # full(size, fill), full_like(t, fill), new_full(t, size, fill)
            value = args[2] if func is _aten.new_full.default else args[1]
        # integer and bool only: the counts' bookkeeping, never activations
        if (
            isinstance(out, torch.Tensor)
            and not out.dtype.is_floating_point
            and not out.dtype.is_complex
            and out.numel() <= _MAX_NUMEL
        ):
            self._fill[out] = value
            self._real.pop(out, None)

    def _written(self, func: Any) -> list[int]:
        """The positions of the arguments `func` writes into."""
        cached = self._writes.get(func)
        if cached is None:
            cached = [
                i
                for i, a in enumerate(func._schema.arguments)
                if a.alias_info is not None and a.alias_info.is_write
            ]
            self._writes[func] = cached
        return cached

    def _route(self, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        """topk(scores, k, dim=-1): its indices get the routing assumption's choices."""
        scores, k = args[0], int(args[1])
        dim = int(args[2]) if len(args) > 2 else int(kwargs.get("dim", -1))
        indices = out[1]
        if scores.dim() == 0 or indices.numel() > _MAX_NUMEL or k < 1:
            return
        experts = scores.shape[dim]
        tokens = indices.numel() // k
        counts = self.routing.counts(tokens, experts, k)
        order = torch.repeat_interleave(torch.arange(experts), torch.tensor(counts))
        # choice k of token t is entry k x T + t: an expert's run covers distinct tokens
        choices = order.reshape(k, tokens).t()  # (T, K)
        dim = dim % indices.dim()
        last = [*indices.shape[:dim], *indices.shape[dim + 1 :], k]
        self._keep(indices, choices.reshape(last).movedim(-1, dim).contiguous())
        if self.routing.kind == "histogram" and len(self.routing.weights) != experts:
            self.sim.note(
                f"expert routing: a top-k over {experts} candidates was routed uniformly "
                f"(the histogram has {len(self.routing.weights)} experts)"
            )
        else:
            self.sim.note(_routing_note(self.routing))
            self.sim.assumptions["routing"] = self.routing.describe()

    def _exchange(
        self,
        source: Any,
        output: Any,
        out_splits: list[int],
        in_splits: list[int],
        group_name: Any,
        group: Any = None,
    ) -> None:
        """An all-to-all of a tensor with values, every peer holding what this rank holds."""
        if group is None:
            from torch.distributed.distributed_c10d import _resolve_process_group

            group = _resolve_process_group(group_name)
        rank = group.rank()
        real = self._real[source]
        start = sum(in_splits[:rank])
        mine = real[start : start + in_splits[rank]]
        if any(s != in_splits[rank] for s in out_splits):
            self._forget(output)  # peers' chunks of other sizes: not this rank's own
            return
        self._keep(output, torch.cat([mine] * len(out_splits)) if out_splits else mine)
