"""How many threads torch runs: the CPUs this process may use, less what other processes keep busy.

Torch's worker threads (OpenMP) meet at the end of every parallel loop, and the first to arrive
spins while it waits. On a core that another process also wants, a worker is descheduled mid-loop
and every loop then waits up to a scheduler slice for it: beside one busy neighbour on a 2-core
host, two threads decoded several times slower than one. So the count is chosen from what is free
and chosen again as that changes: `adjust` (called before every encoder pass, so every 30-s window
or batch of windows) reads the busy time of the CPUs this process may run on (/proc/stat, steal
included: a virtual CPU the host gave to someone else is as busy) less this process's own CPU time,
and runs torch on the free cores, rounded down to one of `thread_counts()`, at least one. The
exact-rows kernels are checked to give every row the same bits at each of those counts
(`whisperspec.kernels.exact_rows`), so a token does not depend on how busy the machine was while it
was decoded. How the workers wait is left as it is (spinning): passive waiting made every decoder step dearer on a quiet host, and with the count
following the free cores the spinning happens where nobody else wants the core.

The CPUs it may use are its affinity mask (`taskset`, a container's cpuset), capped by a cgroup
CPU quota (`docker --cpus`), not `os.cpu_count()`; the most threads it runs is torch's own count
when the governor starts (torch counts physical cores), within those. A count the user set
(`--threads`, `OMP_NUM_THREADS`, `fix_threads`, or `torch.set_num_threads` after the governor last
set one) is left alone.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from pathlib import Path

MIN_INTERVAL_S = 0.5  # shorter samples mistake a neighbour's burst for its load


def usable_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity mask), no more than a cgroup quota allows."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = list(range(os.cpu_count() or 1))
    quota = _cgroup_quota()
    return cpus[:max(1, math.ceil(quota))] if quota and quota < len(cpus) else cpus


def _cgroup_quota() -> float | None:
    """A cgroup v2 `cpu.max` quota in CPUs (None: no limit, or none readable)."""
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    return None if quota == "max" else int(quota) / int(period)


def _busy_ticks(cpus: list[int]) -> int | None:
    """Busy clock ticks of these CPUs so far (every /proc/stat column but idle and iowait)."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return None
    wanted = {f"cpu{cpu}" for cpu in cpus}
    busy = 0
    for line in lines:
        name, *ticks = line.split() or [""]
        if name in wanted:
            values = [int(t) for t in ticks[:8]]  # user nice system idle iowait irq softirq steal
            busy += sum(values) - values[3] - values[4]
    return busy


def choices(most: int) -> tuple[int, ...]:
    """The thread counts the governor picks from: powers of two below `most`, and `most`."""
    return tuple(sorted({1, most} | {1 << i for i in range(most.bit_length()) if 1 << i < most}))


def threads_for(most: int, cpus: int, others: float) -> int:
    """Threads for `cpus` CPUs of which other processes keep `others` busy: the free share of
    `most`, rounded (others keeping half a core or more busy take it), down to a choice."""
    free = most * max(0.0, cpus - others) / cpus
    return max(c for c in choices(most) if c <= max(1, math.floor(free + 0.5)))


class ThreadGovernor:
    """Sets torch's thread count to the cores other processes leave free (see the module)."""

    def __init__(self, cpus: list[int] | None = None):
        import torch

        self.cpus = cpus or usable_cpus()
        self.most = max(1, min(torch.get_num_threads(), len(self.cpus)))
        self.fixed = any(os.environ.get(name) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"))
        self.threads: int | None = None  # what it last set
        self.others = 0.0  # cores other processes kept busy over the last sample
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._last = self._sample()

    def _sample(self) -> tuple[float, int | None, float]:
        return time.monotonic(), _busy_ticks(self.cpus), time.process_time()

    def adjust(self) -> int | None:
        """The thread count for what is free now (None: left alone); at most one new sample per
        `MIN_INTERVAL_S`."""
        import torch

        if self.fixed or self.most < 2:
            return None
        if self.threads is not None and torch.get_num_threads() != self.threads:
            self.fixed = True  # someone set their own count since: theirs stands
            return None
        now = self._sample()
        wall = now[0] - self._last[0]
        if wall < MIN_INTERVAL_S or now[1] is None or self._last[1] is None:
            return self.threads
        busy = (now[1] - self._last[1]) / self._tick  # CPU-seconds, all processes
        self.others = max(0.0, (busy - (now[2] - self._last[2])) / wall)
        self._last = now
        threads = threads_for(self.most, len(self.cpus), self.others)
        if threads != self.threads:
            torch.set_num_threads(threads)
            self.threads = threads
        return threads


_governor: ThreadGovernor | None = None


def governor() -> ThreadGovernor:
    """The process's one governor (torch's thread count is the process's), made on first use."""
    global _governor
    if _governor is None:
        _governor = ThreadGovernor()
    return _governor


def adjust_threads() -> int | None:
    return governor().adjust()


def thread_counts() -> tuple[int, ...]:
    """Every thread count torch may run with in this process from now on."""
    import torch

    chosen = governor()
    return (torch.get_num_threads(),) if chosen.fixed or chosen.most < 2 else choices(chosen.most)


def fix_threads(threads: int) -> None:
    """Torch runs `threads` threads from now on, whatever the load (`--threads`, a Ray actor's CPUs)."""
    import torch

    torch.set_num_threads(threads)
    governor().fixed = True


@contextlib.contextmanager
def torch_threads(count: int):
    """Torch runs `count` threads inside the block; the count before is put back after it."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)
