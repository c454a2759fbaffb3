"""Which GEMMs take cuBLASLt's path on a GPU, and the workspace that path allocates.

`addmm` (and `_addmm_activation`, Inductor's fused linear + GELU/ReLU) runs through
cuBLASLt's `gemm_and_bias` when `isInputCompliesAddmmCudaLt` (aten/src/ATen/native/cuda/
Blas.cpp, read, not copied) says so: an out-of-place call with beta 1, a 1-D bias (or one
that squeezes to 1-D) as long as the output's columns, contiguous, in fp64/fp32/fp16/bf16,
with both matrices larger than 1 in both dimensions (the CUDA >= 12.1 rule: no stride
restriction). That is `nn.Linear` with a bias on any CUDA tensor.

`gemm_and_bias` takes `getCUDABlasLtWorkspace()`: a block of `CUBLASLT_WORKSPACE_SIZE` KiB
(default 1024) allocated on the first such GEMM of each cuBLAS handle and stream, after
the handle's cuBLAS workspace, and kept until `torch.cuda.empty_cache()` (the recording
of an H200 under torch 2.11 shows it: a 1 MiB block from `getCUDABlasLtWorkspace` under
`gemm_and_bias` right after the 32 MiB one from `setWorkspaceForHandle`). With
`TORCH_CUBLASLT_UNIFIED_WORKSPACE=1` cuBLASLt shares the cuBLAS workspace instead.
`DISABLE_ADDMM_CUDA_LT=1` switches the path off.

`torch._scaled_mm` (float8 training: torchao's Float8Linear) runs cuBLASLt's
`scaled_gemm` too (ScaledBlas.cpp `_scaled_mm_out_cuda` -> `_scaled_gemm`), which takes
`getCUDABlasLtWorkspace()`: on CUDA the cuBLASLt handle is the cuBLAS handle
(CublasHandlePool.cpp `getCurrentCUDABlasLtHandle`), whose first use sets the cuBLAS
workspace, so a first `_scaled_mm` allocates both, cuBLAS's first, as an `addmm` does.
Row-wise scaling runs CUTLASS's `f8f8bf16_rowwise` instead below compute capability 9.0
and from 10.0 on (RowwiseScaledMM.cu), which takes no cuBLAS handle; its own allocations
(CUTLASS's `get_workspace_size` bytes, and a copy of scale_a padded to 256 rows on 9.0+)
are not modelled. On 9.0 it runs cuBLASLt when torch was built with cuBLAS 12.9 or newer
(CUDA 12.9/13 wheels), which is what is modelled.
"""

from __future__ import annotations

import os
from typing import Any

import torch

_aten = torch.ops.aten
_LT_OPS = {_aten.addmm.default, _aten._addmm_activation.default}
_LT_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)
_SCALED_MM = _aten._scaled_mm.default
DEFAULT_KIB = 1024


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "on", "yes", "y")


def workspace_bytes() -> int:
    """The size of cuBLASLt's own workspace; 0 when it shares cuBLAS's."""
    if _truthy("TORCH_CUBLASLT_UNIFIED_WORKSPACE"):
        return 0
    value = os.environ.get("CUBLASLT_WORKSPACE_SIZE", "").strip()
    kib = int(value) if value.isdigit() else DEFAULT_KIB
    return kib * 1024


def uses_lt(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether this GEMM call runs cuBLASLt's `gemm_and_bias` (or `scaled_gemm`) on a GPU."""
    if func is _SCALED_MM:
        return True
    if func not in _LT_OPS or os.environ.get("DISABLE_ADDMM_CUDA_LT") == "1":
        return False
    bias, mat1, mat2 = args[0], args[1], args[2]
    if kwargs.get("beta", 1) != 1 or mat1.dtype not in _LT_DTYPES:
        return False
    if not (mat1.dim() == mat2.dim() == 2 and min(*mat1.shape, *mat2.shape) > 1):
        return False
    squeezed = [d for d in bias.shape if d != 1]
    fused_bias = (
        bias.is_contiguous()
        and (bias.dim() == 1 or len(squeezed) == 1)
        and bias.size(-1) == mat2.size(1)
    )
    if fused_bias:
        return True
    # a 2-D bias goes through cuBLASLt only when an activation is fused into the GEMM
    return func is _aten._addmm_activation.default and bias.dim() == 2


def _rowwise(matrix: Any, scale: Any, rows: int) -> bool:
    # is_rowwise_scaling: a float32 (rows, 1) scale, contiguous
    return bool(
        scale.dtype == torch.float32
        and scale.dim() == 2
        and tuple(scale.shape) == (rows, 1)
        and scale.is_contiguous()
        and matrix.dtype.is_floating_point
    )


def runs_cutlass(func: Any, args: tuple[Any, ...], capability: tuple[int, int]) -> bool:
    """Whether this `_scaled_mm` runs CUTLASS's row-wise kernel (no cuBLAS handle)."""
    if func is not _SCALED_MM or capability[0] == 9:
        return False
    mat1, mat2, scale_a, scale_b = args[0], args[1], args[2], args[3]
    # scale_b is checked against mat2.t(), as get_joint_scaling does
    return _rowwise(mat1, scale_a, mat1.size(0)) and _rowwise(mat2.t(), scale_b.t(), mat2.size(1))
