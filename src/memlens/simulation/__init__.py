"""Simulate CUDA memory without a GPU: fake CUDA tensors + a model of the caching allocator.

The public entry point is `memlens.simulate` (memlens.simulation.api.simulate). The package
is named `simulation`, not `simulate`, so importing a submodule never shadows that function.
Importing this package never imports torch.
"""
