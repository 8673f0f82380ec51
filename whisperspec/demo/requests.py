"""The demo's requests while they run: a time budget each, and a stop when the visitor leaves.

A request's decode checks its `RequestGuard` between decoder rounds (`DecodeOptions.interrupt`,
called by `whisperspec.speculative.generate` before every round), so it stops within one round of
the budget running out or of its visitor leaving, and the worker is free for the next request.
"""

import asyncio
import contextvars
import math
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

T = TypeVar("T")


class RequestStopped(Exception):
    """A request's decode stopped before its end: its visitor left, or it ran over its budget."""


class RequestGuard:
    """Called between decoder rounds (`DecodeOptions.interrupt`): stops one request's decode once
    it is cancelled or has computed for `seconds`. The clock starts at the first decoder round:
    loading a model the operator serves is not the visitor's doing."""

    def __init__(self, seconds: float | None = None):
        self.seconds, self.deadline, self.cancelled = seconds, None, False

    def cancel(self) -> None:
        self.cancelled = True

    def __call__(self) -> None:
        if self.cancelled:
            raise RequestStopped("the request was cancelled")
        now = time.monotonic()
        if self.deadline is None:
            self.deadline = now + self.seconds if self.seconds else math.inf
        elif now > self.deadline:
            raise RequestStopped(f"this request was stopped after {self.seconds:g} s of computing, the most this "
                                 "demo gives one request: send shorter audio")


class ActiveRequests:
    """The requests running now, by visitor session: when a visitor leaves, their decodes stop."""

    def __init__(self, seconds: float | None = None):
        self.seconds = seconds
        self._sessions: defaultdict[str | None, set[RequestGuard]] = defaultdict(set)
        self._lock = threading.Lock()
        # the file request and the live reading running now, and requests still stopping
        self._workers = ThreadPoolExecutor(4, thread_name_prefix="whisperspec-decode")

    async def run(self, session: str | None, work: Callable[[RequestGuard], T]) -> T:
        """`work(guard)` in a worker thread, with a fresh guard. When Gradio cancels the event (a
        client's cancel), the decode is told to stop and the event ends once it has: the queue
        gives the next request the CPU, not a CPU still busy with this one."""
        guard = RequestGuard(self.seconds)
        with self._lock:
            self._sessions[session].add(guard)
        future = asyncio.get_running_loop().run_in_executor(self._workers, contextvars.copy_context().run, work, guard)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            guard.cancel()
            await asyncio.wait([future])
            if not future.cancelled():
                future.exception()  # the RequestStopped it ended with: nobody is left to tell
            raise
        finally:
            with self._lock:
                self._sessions[session].discard(guard)
                if not self._sessions[session]:
                    del self._sessions[session]

    def leave(self, session: str | None) -> None:
        """The visitor of `session` has gone (Gradio's unload): stop what they started."""
        with self._lock:
            guards = list(self._sessions.get(session, ()))
        for guard in guards:
            guard.cancel()

    def running(self) -> int:
        """Requests started and not yet ended (loading their audio or model, or decoding)."""
        with self._lock:
            return sum(len(guards) for guards in self._sessions.values())

    def decoding(self) -> int:
        """Requests whose decoder rounds have begun."""
        with self._lock:
            return sum(guard.deadline is not None for guards in self._sessions.values() for guard in guards)
