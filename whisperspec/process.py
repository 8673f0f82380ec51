"""The life of a `whisperspec` command's process: when start-up is over (the collector resumes)
and how it leaves (without the interpreter's teardown). `whisperspec.cli.command` and the
benchmarks that time whole processes (`whisperspec.bench.startup`) share them."""

from __future__ import annotations

import atexit
import gc
import os
import sys
import threading


def exit_without_teardown(code: int) -> None:
    """Exit with `code` after what an exit must do (the exit handlers, the standard streams
    flushed), skipping the interpreter's teardown: freeing every object of torch and of the model
    one by one, and torch's own destructors, cost a tenth of a second on a short file and do nothing
    the operating system does not do at exit anyway. Files we write are closed by then (atomic
    writes). A thread still running (none in our commands by now) gets the usual exit, which waits
    for it."""
    if any(thread.is_alive() and not thread.daemon for thread in threading.enumerate()
           if thread is not threading.main_thread()):
        sys.exit(code)
    atexit._run_exitfuncs()  # logging's flush, temporary directories, multiprocessing's children
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`| head`) or stream: nothing left to say
            pass
    os._exit(code or 0)


def started_up() -> None:
    """Start-up is over (the model loaded): the collector resumes, for objects made from now on
    (a no-op unless `command` turned it off: `main` called from Python leaves the collector alone)."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()
