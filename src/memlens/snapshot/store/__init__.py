"""Store step: the on-disk cache of a built snapshot's columns (memory-mapped .npy)."""
