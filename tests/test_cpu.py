"""Threads follow the cores other processes leave free (`whisperspec.cpu`), and a count a user set
stands. The speed it buys is measured by `whisperspec bench-corpus --load quiet,busy,twin`."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import torch

from whisperspec.cpu import ThreadGovernor, choices, threads_for, usable_cpus


TORCH_THREADS = torch.get_num_threads()  # torch's own count, before any governor in this process set one


@pytest.fixture
def torch_threads_kept():
    """Torch's own thread count for the test, the count before put back after it: the process's
    governor may have lowered it for what it saw earlier (another test worker busy beside it)."""
    before = torch.get_num_threads()
    torch.set_num_threads(TORCH_THREADS)
    yield
    torch.set_num_threads(before)


def test_the_free_share_of_the_threads_is_taken_rounded_down_to_a_choice():
    assert choices(2) == (1, 2) and choices(6) == (1, 2, 4, 6) and choices(1) == (1,)
    assert threads_for(2, 2, 0.0) == 2
    assert threads_for(2, 2, 0.4) == 2  # a little background work takes no core
    assert threads_for(2, 2, 0.6) == 1
    assert threads_for(2, 2, 1.0) == 1
    assert threads_for(2, 2, 3.0) == 1  # never none
    assert threads_for(8, 8, 1.0) == 4  # seven free: the largest choice that fits
    assert threads_for(4, 8, 2.0) == 2  # torch counts physical cores: 4 threads over 8 CPUs


def test_the_cpus_it_may_use_are_its_affinity_mask_within_a_cgroup_quota(monkeypatch):
    from whisperspec import cpu

    allowed = sorted(os.sched_getaffinity(0))
    monkeypatch.setattr(cpu, "_cgroup_quota", lambda: None)
    assert usable_cpus() == allowed
    monkeypatch.setattr(cpu, "_cgroup_quota", lambda: 0.5)  # `docker --cpus 0.5`
    assert usable_cpus() == allowed[:1]


def test_a_busy_neighbour_takes_a_thread(torch_threads_kept):
    """A bounded busy loop in another process: the governor's next sample sees it (other
    processes keep about a core busy) and runs fewer threads."""
    governor = ThreadGovernor()
    if governor.most < 2:
        pytest.skip("one thread to run: nothing to give up")
    neighbour = subprocess.Popen([sys.executable, "-c", "import time\nend = time.monotonic() + 20\n"
                                  "while time.monotonic() < end: pass"])
    try:
        time.sleep(0.3)
        governor._last = governor._sample()
        time.sleep(1.0)
        busy = governor.adjust()
        others = governor.others
    finally:
        neighbour.kill()
        neighbour.wait()
    assert others > 0.6 and busy == threads_for(governor.most, len(governor.cpus), others) < governor.most
    assert torch.get_num_threads() == busy


def test_cores_freed_again_are_taken_again(torch_threads_kept, monkeypatch):
    """Once nobody else keeps the CPUs busy (their busy time grows by this process's own CPU time
    only), the next sample runs every thread again."""
    from whisperspec import cpu

    governor = ThreadGovernor()
    if governor.most < 2:
        pytest.skip("one thread to run: nothing to give back")
    governor.threads = 1
    torch.set_num_threads(1)
    start = time.monotonic()
    governor._last = (start - 1.0, 1000, 5.0)  # a second ago
    monkeypatch.setattr(time, "process_time", lambda: 5.5)  # half a CPU-second of our own since
    monkeypatch.setattr(cpu, "_busy_ticks", lambda cpus: 1000 + governor._tick // 2)  # and nothing else
    assert governor.adjust() == governor.most and governor.others < 0.1
    assert torch.get_num_threads() == governor.most


def test_a_count_the_user_set_stands(torch_threads_kept, monkeypatch):
    governor = ThreadGovernor()
    if governor.most < 2:
        pytest.skip("one thread to run: nothing to choose")
    governor.threads = torch.get_num_threads()  # as if it had set the count
    torch.set_num_threads(1 if governor.threads > 1 else 2)  # the user's own, afterwards
    assert governor.adjust() is None and governor.fixed
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert ThreadGovernor().fixed and ThreadGovernor().adjust() is None
