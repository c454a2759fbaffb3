"""Read step: bytes, paths or objects into the raw snapshot structure, safely (the scan
before unpickling, the restricted unpickler, and the compiled reader's glue)."""
