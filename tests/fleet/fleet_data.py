"""The test fleet's shape: 64 small ranks, three of them skewed (the ground truth)."""

RANKS = 64
PLANTED = {5: "leak", 23: "activations", 42: "pipeline"}
EVENTS = 1_500
