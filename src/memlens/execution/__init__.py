"""Where work runs: a local process pool or a Dask cluster (executors), a fresh interpreter
with JSON in and out (isolated), and the progress line both print. Used by fleet (ranks),
planning (sweep points) and the distributed simulation's launcher."""
