"""The patches of torch a simulation installs: fake CUDA tensors and the CUDA surface, the
tracker that charges each op's outputs to the allocator model, autocast, SDPA, in-place
backward, torch.compile (Dynamo + a static Inductor plan), frames and written snapshots;
and Dynamo itself imported at the script's first use of it (deferred_dynamo)."""
