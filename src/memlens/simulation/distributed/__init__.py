"""Simulated multi-GPU runs: torchrun's environment per rank (`launch_env`), and fake
process groups, collectives and DDP's reducer inside a simulation (`process_group`)."""
