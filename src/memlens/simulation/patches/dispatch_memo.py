"""A cheaper key in front of FakeTensorMode's dispatch cache, for the tracker's plain ops.

On a cache hit FakeTensorMode spends most of its time on the key (`_prep_args_for_hash`,
`extract_tensor_metadata`: a dataclass per tensor, flattened field by field) and the rest
building the output from the entry. For an op whose arguments are only this mode's fake
tensors and plain Python values, the key here is a flat tuple of the same facts read in
C (dtype, shape, strides, offset, storage size, device, autograd and view bits), and a
hit answers with FakeTensorMode's own entry through FakeTensorMode's own output builder
(`_output_from_cache_entry`: in-place and view outputs alias the same arguments, fresh
ones get the entry's metadata), called as FakeTensorMode's dispatch would call it, with
the fake mode off the stack. Exact by construction: this key determines FakeTensorMode's
key (the same op, global state and arguments give the same key there), and an entry is
taken only after FakeTensorMode itself stored it under that key; anything it would not
cache, or that this key does not cover (symbolic sizes, other tensor kinds, constants,
callables, another fake mode), goes the normal way.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch._subclasses import fake_tensor as ft
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

_FAKE = torch._C._TorchDispatchModeKey.FAKE
_PROXY = torch._C._TorchDispatchModeKey.PROXY
_get_mode = torch._C._get_dispatch_mode
_pre_dispatch_mode = torch._ops._get_dispatch_mode_pre_dispatch
_set_mode = torch._C._set_dispatch_mode
_unset_mode = torch._C._unset_dispatch_mode
_default_dtype = torch.get_default_dtype
_default_device = torch._C._get_default_device
_inference_mode = torch.is_inference_mode_enabled
_STRIDED = torch.strided
_DisableTorchDispatch = torch._C._DisableTorchDispatch
_PreserveDispatchKeyGuard = torch._C._PreserveDispatchKeyGuard
_set_meta_in_tls_dispatch_include = torch._C._set_meta_in_tls_dispatch_include
# values FakeTensorMode's key takes as (type, value): the ones an aten op's plain
# arguments are; anything else (SymInt, callables, GraphModules) goes the normal way
_PLAIN = frozenset(
    {
        int,
        float,
        bool,
        str,
        type(None),
        torch.dtype,
        torch.device,
        torch.layout,
        torch.memory_format,
    }
)
# no fast path: not cached by FakeTensorMode's dispatch, or answered before its cache
_NEVER = frozenset([*ft._DISPATCH_META_HANDLERS, *ft._DISPATCH_HANDLE_DIRECTLY])
# FakeTensorMode stored no usable entry under this key: always the normal way
_NO_ENTRY = object()


class DispatchMemo:
    """Per-operator memo of FakeTensorMode's cache entries, for one fake mode."""

    def __init__(self, mode: FakeTensorMode) -> None:
        self.mode = mode
        # the shape environment FakeTensorMode's key and outputs consult: none here (no
        # symbolic sizes), so entries hold plain integers
        self._state = ft._CacheKeyState(None)
        self.usable = mode.shape_env is None and mode.cache_enabled
        self._new = _FakeTensors(mode)

    def applies_to(self, func: Any) -> bool:
        """Whether `func` may take the fast path at all (asked once per operator)."""
        return (
            self.usable
            and isinstance(func, torch._ops.OpOverload)
            and func not in _NEVER
            and FakeTensorMode not in func.python_key_table
        )

    def key(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...] | None:
        """The key of one call, or None where the call must go the normal way. Every
        item is tagged with its kind (tensor, list, value), so two calls share a key only
        where FakeTensorMode's keys are equal too."""
        mode = self.mode
        if (
            _get_mode(_FAKE) is not mode
            or _get_mode(_PROXY) is not None
            or _pre_dispatch_mode(_PROXY) is not None  # type: ignore[no-untyped-call]
        ):
            return None  # another fake mode (Dynamo's tracing), or a proxy tracer
        if mode.in_kernel_invocation:
            return None
        out: list[Any] = [_default_dtype(), _default_device(), _inference_mode()]
        if not self._flatten(out, args):
            return None
        if kwargs:
            out.append(dict)
            out.append(len(kwargs))
            for name, value in kwargs.items():
                out.append(name)
                if not self._flatten(out, (value,)):
                    return None
        return tuple(out)

    def _flatten(self, out: list[Any], args: tuple[Any, ...] | list[Any]) -> bool:
        mode = self.mode
        for a in args:
            kind = type(a)
            if kind is FakeTensor:
                if a.fake_mode is not mode or a.constant is not None or a.layout is not _STRIDED:
                    return False
                out.append(FakeTensor)
                out.append(
                    (
                        a.dtype,
                        a.shape,
                        a.stride(),
                        a.storage_offset(),
                        a.untyped_storage().nbytes(),
                        a.fake_device,
                        a.requires_grad,
                        a.is_conj(),
                        a.is_neg(),
                        a.is_inference(),
                        a.is_quantized,
                    )
                )
            elif kind in _PLAIN:
                out.append(kind)
                out.append(a)
            elif kind is list or kind is tuple:
                out.append(kind)
                out.append(len(a))
                if not self._flatten(out, a):
                    return False
            else:
                return False
        return True

    def entry(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """FakeTensorMode's key for a call about to run the normal way (worked out before
        it runs: an in-place op may change its arguments), or None where it has none."""
        try:
            return self.mode._cache_key(ft._CacheKeyState(None), func, args, kwargs)
        except ft._BypassDispatchCache:
            return None

    @staticmethod
    def stored(func: Any, cache_key: Any) -> Any:
        """What answers a call FakeTensorMode stored under `cache_key`: its entry as a
        recipe (`_recipe`), or _NO_ENTRY where it holds none or a bypass."""
        entry = None if cache_key is None else FakeTensorMode.cache.get(cache_key)
        if not isinstance(entry, ft._DispatchCacheValidEntry):
            return _NO_ENTRY
        return _recipe(func, entry)

    def output(self, func: Any, recipe: Any, args: tuple[Any, ...]) -> Any:
        """FakeTensorMode's answer from a cache entry, as its `_output_from_cache_entry`
        makes it, with the fake mode off the stack as the dispatcher leaves it."""
        mode = self.mode
        _unset_mode(_FAKE)
        try:
            if type(recipe) is ft._DispatchCacheValidEntry:  # not a plain one: torch's way
                out = mode._output_from_cache_entry(self._state, recipe, None, func, args)  # type: ignore[arg-type]
            elif recipe[0]:
                out = tuple(_build(self._new, r, args) for r in recipe[1])
            else:
                out = _build(self._new, recipe[1][0], args)
        finally:
            _set_mode(mode)
        FakeTensorMode.cache_hits += 1
        return out


_INPLACE, _CONSTANT, _TENSOR = 0, 1, 2


def _recipe(func: Any, entry: Any) -> Any:
    """(is a tuple, one recipe per output) for `_build`, read once from FakeTensorMode's
    entry; the entry itself where an output has sizes that are not plain integers."""
    outputs: list[tuple[Any, ...]] = []
    for info in entry.output_infos:
        if info.inplace_idx is not None:
            outputs.append((_INPLACE, info.inplace_idx))
            continue
        md = info.metadata
        if md is None:
            if info.view_idx is not None or info.constant_value is ft.SingletonConstant:
                return entry
            outputs.append((_CONSTANT, info.constant_value))
            continue
        sizes = (*md.shape, *md.stride, md.storage_offset)
        if md.layout is not _STRIDED or any(type(x) is not int for x in sizes):
            return entry
        view = info.view_idx if func.is_view else None
        if view is None and func.is_view:
            return entry
        outputs.append(
            (
                _TENSOR,
                (tuple(md.shape), tuple(md.stride), md.storage_offset),
                (md.dtype, md.layout, md.requires_grad, md.device, md.is_conj, md.is_neg),
                view,
            )
        )
    return (entry.is_output_tuple, tuple(outputs))


def _build(new: _FakeTensors, recipe: Any, args: tuple[Any, ...]) -> Any:
    """One output, as FakeTensorMode's `_get_output_tensor_from_cache_entry` makes it: the
    argument itself (in place), the constant, or a new FakeTensor over a meta tensor of
    the entry's metadata, set onto the viewed argument's storage for a view."""
    kind = recipe[0]
    if kind == _INPLACE:
        return args[recipe[1]]
    if kind == _CONSTANT:
        return recipe[1]
    (shape, stride, offset), (dtype, layout, requires_grad, device, conj, neg), view = recipe[1:]
    # in_kernel_invocation_manager's guards, without its generator
    with _DisableTorchDispatch(), _PreserveDispatchKeyGuard():
        _set_meta_in_tls_dispatch_include(True)
        empty = torch.empty_strided(
            shape, stride, dtype=dtype, layout=layout, device="meta", requires_grad=requires_grad
        )
        if conj:
            torch._C._set_conj(empty, True)
        if neg:
            torch._C._set_neg(empty, True)
        if view is not None:
            empty.set_(args[view].untyped_storage(), offset, shape, stride)
    return new(empty, device)


class _FakeTensors:
    """`FakeTensor(mode, elem, device)` for a device FakeTensorMode already made one on,
    in a third of the time: `FakeTensor.__new__` resolves and normalises the device twice
    and sets its attributes one by one (five of them descriptors setting three each);
    here the C part is the same call (`Tensor._make_subclass` with the device's backend
    keys, then the data-pointer guard) and the attributes are a copy of those of one
    FakeTensor made by torch on that device, each None, a flag, the device or the mode.
    Checked against torch's own on the first use for each device (type, attributes,
    dispatch keys, autograd bit); anything unlike it, torch's debug tracing or an export
    in progress keeps torch's constructor."""

    def __init__(self, mode: FakeTensorMode) -> None:
        self.mode = mode
        self._attrs: dict[torch.device, dict[str, Any] | None] = {}

    def __call__(self, elem: torch.Tensor, device: torch.device) -> FakeTensor:
        attrs = self._attrs.get(device, _NO_ENTRY)
        if attrs is None or ft.FakeTensorConfig.debug or torch.compiler.is_exporting():
            return FakeTensor(self.mode, elem, device)
        if attrs is _NO_ENTRY:
            return self._first(elem, device)
        return self._make(elem, device, cast(dict[str, Any], attrs))

    def _make(self, elem: torch.Tensor, device: torch.device, attrs: dict[str, Any]) -> FakeTensor:
        # memlens's CPU-keys patch of _make_subclass, where installed, as torch's call
        made = torch.Tensor._make_subclass(
            FakeTensor,
            elem,
            elem.requires_grad,
            dispatch_device=True,
            device_for_backend_keys=device,
        )
        if self.mode._allow_unsafe_data_ptr_access:
            torch._C._set_warn_deprecated_on_mutable_data_ptr(made)
        else:
            torch._C._set_throw_on_mutable_data_ptr(made)
        made.__dict__.update(attrs)
        return made

    def _first(self, elem: torch.Tensor, device: torch.device) -> FakeTensor:
        """torch's FakeTensor, and whether this device may take the short way."""
        out = FakeTensor(self.mode, elem, device)
        attrs = dict(vars(out))
        plain = device.index is not None or device.type == "cpu"
        if plain and all(_plain_attr(v, self.mode) for v in attrs.values()):
            with _DisableTorchDispatch():
                twin_elem = torch.empty_strided(
                    elem.shape, elem.stride(), dtype=elem.dtype, device="meta"
                ).requires_grad_(elem.requires_grad)
            twin = self._make(twin_elem, device, attrs)
            plain = (
                type(twin) is type(out)
                and vars(twin) == vars(out)
                and torch._C._dispatch_keys(twin) == torch._C._dispatch_keys(out)
                and twin.requires_grad == out.requires_grad
            )
        self._attrs[device] = attrs if plain else None
        return out


def _plain_attr(value: Any, mode: FakeTensorMode) -> bool:
    return value is None or value is mode or type(value) in (bool, torch.device)


def run(memo: dict[Any, Any], dispatch: DispatchMemo, func: Any, args: Any, kwargs: Any) -> Any:
    """`func(*args, **kwargs)` under the fake mode, through `memo` (one operator's)."""
    key = dispatch.key(args, kwargs)
    if key is None:
        return func(*args, **kwargs)
    entry = memo.get(key)
    if entry is None:
        cache_key = dispatch.entry(func, args, kwargs)
        out = func(*args, **kwargs)
        memo[key] = DispatchMemo.stored(func, cache_key)
        return out
    if entry is _NO_ENTRY:
        return func(*args, **kwargs)
    return dispatch.output(func, entry, args)
