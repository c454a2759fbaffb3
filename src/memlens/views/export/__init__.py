"""Snapshots in other tools' formats: Chrome Trace Event Format (Perfetto, chrome://tracing,
merged into a torch.profiler trace) and Parquet (`memlens export`)."""
