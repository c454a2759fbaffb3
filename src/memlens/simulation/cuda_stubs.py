"""Stand-ins for torch.cuda objects a CPU-only build cannot create (device properties,
events, streams). The simulated device has one stream and nothing ever runs on it."""

from __future__ import annotations

import torch


class DeviceProperties:
    """What torch.cuda.get_device_properties answers (an H100-like card)."""

    def __init__(self, total_memory: int):
        self.name = "memlens simulated GPU"
        self.total_memory = total_memory
        self.major, self.minor = 9, 0
        self.multi_processor_count = 132
        self.is_integrated = False


class Event:
    """torch.cuda.Event for timing code: nothing runs, so every interval is 0 ms."""

    def __init__(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ):
        pass

    def record(self, stream=None) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def wait(self, stream=None) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, end_event) -> float:
        return 0.0


class Stream:
    """torch.cuda.Stream: the model has one stream (0), so side streams are the same one."""

    cuda_stream = 0
    device = torch.device("cuda", 0)

    def __init__(self, device=None, priority: int = 0, **kwargs):
        pass

    def synchronize(self) -> None:
        pass

    def wait_stream(self, stream) -> None:
        pass

    def wait_event(self, event) -> None:
        pass

    def record_event(self, event=None):
        return event or Event()

    def query(self) -> bool:
        return True

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        return None  # exceptions propagate
