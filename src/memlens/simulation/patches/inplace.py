"""The in-place paths a GPU's autograd takes and fake tensors do not.

C++ autograd asks `at::isTensorSubclassLike` before working in place, and that is true
for every fake tensor (Python dispatch key) and whenever a dispatch mode is active, so on
fakes it picks out-of-place variants that allocate where a GPU does not:
- the engine's gradient accumulation (torch/csrc/autograd/input_buffer.cpp `accumulate`):
  `old + new` instead of `old.add_(new)` when the buffer holds the only reference to a
  dense `old` and its storage;
- formulas that build a zero tensor and scatter into it (`gather_backward`,
  `index_backward`, `index_select_backward` in FunctionsManual.cpp): `zeros.scatter_add(...)`
  instead of `zeros.scatter_add_(...)`; and `value_selecting_reduction_backward` (the
  backward of `max`/`min`/`median`/`kthvalue`/`mode` along a dimension):
  `zeros.scatter(...)` instead of `zeros.scatter_(...)`.
The tracker asks this class, for each op inside a backward node, whether to run the
in-place variant instead and return its (mutated) first argument, as the GPU would. A
scatter is made in place only into zeros the same node's formula made; accumulation only
after the node's apply returned (a post hook says so), when the engine's buffer holds the
only reference.

"Only reference" is read from reference counts as they arrive at the dispatch mode:
the autograd buffer's, the dispatcher's argument stack's and the Python wrapper's for the
tensor, the TensorImpl's and the Python storage object's for the storage (measured on
torch 2.13; tests/simulate/test_simulate_backward.py pins the resulting traces).
"""

from __future__ import annotations

from typing import Any

import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false

_aten = torch.ops.aten
UNIQUE_TENSOR_REFS = 4
UNIQUE_STORAGE_REFS = 2
_ZEROS = {_aten.new_zeros.default, _aten.zeros_like.default, _aten.zeros.default}
# out-of-place op -> in-place variant, for formulas that scatter into fresh zeros
_SCATTER_INTO_ZEROS = {
    _aten.scatter_add.default: _aten.scatter_add_.default,
    _aten.scatter.src: _aten.scatter_.src,
    _aten.index_add.default: _aten.index_add_.default,
    _aten.index_put.default: _aten.index_put_.default,
}


def _unique(t: torch.Tensor) -> bool:
    storage = t.untyped_storage()
    return (
        # Tensor._use_count exists at run time (TensorImpl's reference count); torch's
        # stubs do not declare it
        t._use_count() <= UNIQUE_TENSOR_REFS  # type: ignore[attr-defined]
        and torch._C._storage_Use_Count(storage._cdata) <= UNIQUE_STORAGE_REFS
        # input_buffer.cpp's can_accumulate_inplace asks is_non_overlapping_and_dense,
        # not is_contiguous: a gradient in a permuted layout (a key's, after the bmm
        # backward of `q @ k.transpose`) is added into in place too
        and is_non_overlapping_and_dense_or_false(t)
        and t.storage_offset() == 0
        and storage.nbytes() == t.numel() * t.element_size()
    )


class BackwardInPlace:
    def __init__(self) -> None:
        self._node: Any = None
        self._applied = False  # the node's apply returned: the engine now accumulates
        self._zeros: set[int] = set()  # ids of the zero tensors this node's apply made

    def _finished(self, node_id: int) -> None:
        if self._node is not None and id(self._node) == node_id:
            self._applied = True

    def enter(self, node: Any) -> None:
        """An op is dispatched inside `node`'s backward: the first one starts its
        bookkeeping."""
        if node is not self._node:
            self._node, self._applied = node, False
            self._zeros.clear()
            node_id = id(node)
            # post hooks run after apply, before the outputs reach the input buffers
            node.register_hook(lambda grad_inputs, grad_outputs: self._finished(node_id))

    def replacement(
        self, node: Any, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """The in-place op to run instead of `func`, or None to run `func`."""
        self.enter(node)
        if torch.is_grad_enabled() or not args or not isinstance(args[0], torch.Tensor):
            return None
        if self._applied:
            if func is _aten.add.Tensor and not kwargs and self._accumulates(*args):
                return _aten.add_.Tensor
            return None
        inplace = _SCATTER_INTO_ZEROS.get(func)
        if inplace is not None and id(args[0]) in self._zeros:
            return inplace
        return None

    def made(self, func: Any, out: Any) -> None:
        """Called with every op's output inside a backward node."""
        if func in _ZEROS and isinstance(out, torch.Tensor):
            self._zeros.add(id(out))

    @staticmethod
    def _accumulates(old: Any, new: Any) -> bool:
        return (
            isinstance(new, torch.Tensor)
            and old.shape == new.shape
            and old.dtype == new.dtype
            and old.device == new.device
            and _unique(old)
        )
