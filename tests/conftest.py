"""Shared test setup."""

from __future__ import annotations

import os
from pathlib import Path

# Converted models are cached across test runs (a conversion takes seconds to a minute), but never
# in the user's own cache: the tests use one inside the repository unless the caller chose one.
os.environ.setdefault("WHISPERSPEC_CACHE", str(Path(__file__).resolve().parents[1] / ".pytest_cache" / "whisperspec-cache"))

# Test workers (pytest-xdist) share the CPUs, each with torch's default count of threads, which
# spin while they wait for each other at the end of every parallel loop (libgomp's default): beside
# a worker that holds a core, a spinning thread waits a scheduler slice for it. Waiting passively,
# a worker gives the core back instead; the bits are the same either way. libgomp reads the policy
# once, as torch loads it; the processes the tests start (a CLI, a demo server, Ray) are left to
# spin, as users run them: their thread governor runs one thread beside a busy core.
if os.environ.get("PYTEST_XDIST_WORKER") and "OMP_WAIT_POLICY" not in os.environ:
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    import torch  # noqa: F401  (loads libgomp, which reads the policy now)

    del os.environ["OMP_WAIT_POLICY"]

# Gradio keeps uploads in one folder per machine by default, named by the bytes' hash, and a demo
# that closes deletes the files it stored: two workers' demos serving the same clip shared the file
# and the first to close deleted it under the other's requests. Each worker gets a folder of its own.
if os.environ.get("PYTEST_XDIST_WORKER") and "GRADIO_TEMP_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["GRADIO_TEMP_DIR"] = tempfile.mkdtemp(prefix=f"gradio-{os.environ['PYTEST_XDIST_WORKER']}-")
    atexit.register(shutil.rmtree, os.environ["GRADIO_TEMP_DIR"], ignore_errors=True)  # not left behind


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto`: one worker per CPU this process may use (its affinity mask, a cgroup quota), not
    os.cpu_count(); at most four, as each worker loads its own models."""
    from whisperspec.cpu import usable_cpus

    return min(len(usable_cpus()), 4)
