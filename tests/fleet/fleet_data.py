"""The test fleet's shape: 64 small ranks, three of them skewed (the ground truth)."""

RANKS = 64
PLANTED = {5: "leak", 23: "activations", 42: "pipeline"}
EVENTS = 1_500


def die_on_poison(item: str) -> str:
    """A task for the local pool that kills its own worker process on "poison"."""
    import os

    if item == "poison":
        os._exit(1)
    return item.upper()
