"""Run a script unedited as __main__ with PyTorch's allocator capped at CAP bytes (0: no
cap) and print one line: RESULT {status, peak_allocated, peak_reserved}.

    python3 cap_run.py CAP SCRIPT [ARGS...]

set_per_process_memory_fraction caps what the caching allocator may reserve, as a card
with that much usable memory would; past it the script gets torch.OutOfMemoryError.
"""

import json
import runpy
import sys

import torch

cap, script = int(sys.argv[1]), sys.argv[2]
sys.argv = [script, *sys.argv[3:]]
if cap:
    total = torch.cuda.get_device_properties(0).total_memory
    # + 0.5: the fraction times the total is truncated to bytes
    torch.cuda.set_per_process_memory_fraction((cap + 0.5) / total)
status = "ok"
try:
    runpy.run_path(script, run_name="__main__")
except torch.OutOfMemoryError:
    status = "oom"
result = {
    "argv": sys.argv[1:],
    "cap": cap,
    "status": status,
    "peak_allocated": torch.cuda.max_memory_allocated(),
    "peak_reserved": torch.cuda.max_memory_reserved(),
}
print("RESULT " + json.dumps(result), flush=True)
