"""`memlens plan --what-if` code knobs: runtime patches of torch around a script (code),
and the parallel knobs that wrap its model as rank 0 of N (parallel)."""
