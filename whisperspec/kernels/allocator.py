"""The process's memory allocator, tuned for the int8 products (an application's choice, not a library's)."""

from __future__ import annotations

import ctypes
import functools


@functools.cache
def keep_freed_memory() -> None:
    """Let glibc keep freed memory for reuse instead of handing it back to the system.

    The int8 products cannot write into a given buffer: each returns a new tensor (up to 12 MB per
    encoder product). glibc serves blocks that large with fresh mmap pages and unmaps them when
    freed, so every product pays its page faults again; with the thresholds raised the process keeps
    its peak heap instead (docs/BENCHMARKS-HISTORY.md, "Allocator thresholds"). This tunes the
    allocator of the whole process, so a library must not do it on its own: the command line calls
    it at start, and an application using compute type int8 may call it too.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc: nothing to tune
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    libc.mallopt(m_mmap_threshold, 32 << 20)  # glibc's largest
    libc.mallopt(m_trim_threshold, 1 << 30)
