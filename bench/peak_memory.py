"""Peak memory of a measured section: the GPU's peak allocation, or on a CPU the resident set."""

from __future__ import annotations

import threading
from typing import Any


class PeakMemory:
    """Peak GPU allocation, or on a CPU the peak resident set above its level at `__enter__`."""

    def __init__(self, cuda: bool) -> None:
        self.cuda, self.peak, self._stop = cuda, 0, threading.Event()

    @staticmethod
    def rss() -> int:
        with open("/proc/self/statm") as f:
            import os

            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self.rss() - self.start)

    def __enter__(self) -> PeakMemory:
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.start = torch.cuda.memory_allocated()
        else:
            self.start = self.rss()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated()
        else:
            self._stop.set()
            self._thread.join()
