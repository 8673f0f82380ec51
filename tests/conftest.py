"""Shared test setup."""

from __future__ import annotations

import os
from pathlib import Path

# Converted models are cached across test runs (a conversion takes seconds to a minute), but never
# in the user's own cache: the tests use one inside the repository unless the caller chose one.
os.environ.setdefault("WHISPERSPEC_CACHE", str(Path(__file__).resolve().parents[1] / ".pytest_cache" / "whisperspec-cache"))


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto`: one worker per CPU this process may use (its affinity mask, a cgroup quota), not
    os.cpu_count(); at most four, as each worker loads its own models."""
    from whisperspec.cpu import usable_cpus

    return min(len(usable_cpus()), 4)
