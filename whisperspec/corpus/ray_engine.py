"""`whisperspec transcribe ... --engine ray`: the corpus spread over a Ray cluster's CPUs.

Ray Core actors, one `Transcriber` each (the model loaded once per actor, its torch threads the
CPUs the actor reserves), each running the same batched path as a local run
(`Transcriber.transcribe_many`) over chunks of files that this process, the driver, hands out as
actors become free. Results come back to the driver, which alone writes result files and manifest
rows (`whisperspec.corpus.run`): outputs land wherever the driver writes, and a file is recorded
once however many workers tried it.

Exactly once when workers die: a chunk's results exist only if its call returned, so a chunk
whose actor died (a killed process, a lost node) is handed out again whole (Ray restarts the
actor, or another one takes it). A chunk that fails again is split into single files, and a
file that keeps killing its worker (audio that exhausts memory, say) becomes an error row instead
of stopping the run.

Inputs must be readable at the same path on every node (a shared filesystem or a mounted bucket):
the workers read the audio themselves. docs/CORPUS.md: running it on a multi-machine cluster.

Joining a cluster started by hand (`ray start --head`): a HOST:PORT address is tried first (a
closed port is one line, at once, instead of Ray's retries), and the cluster's token is sent where
one exists (`ray start` turns token authentication on when it finds one; Ray's driver sends it only
when told to). A cluster that cannot be joined, or that goes away mid-run, is a `ClusterError`: one
line naming the address and what to do. (Ray itself turns 127.0.0.1 into the machine's outward
address, for the nodes and the driver alike: docs/CORPUS.md says how to keep a cluster on loopback.)
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import time
import warnings
from collections import deque
from dataclasses import replace
from typing import Callable, Iterator

from whisperspec import defaults
from whisperspec.corpus.inputs import Source
from whisperspec.corpus.results import EngineError, FileResult
from whisperspec.options import TranscriptionOptions

ATTEMPTS = 3  # a file is tried by this many workers before it is recorded as an error
PROBE_SECONDS = 0.5  # between calls asking whether a restarting actor is back
CONNECT_TIMEOUT_S = 5.0  # to open the cluster's port: a cluster that takes longer is not there
# a cluster whose port stays closed this long has gone (Ray's own driver gives it 60 s, then ends
# the process with a log line instead of an error we could report)
GONE_AFTER_S = 10.0


class ClusterError(EngineError):
    """The Ray cluster cannot be joined, or went away mid-run: the message names the address."""


class TranscriberWorker:
    """A Ray actor's state: one Transcriber, its torch threads the CPUs Ray gave the actor."""

    def __init__(self, options: TranscriptionOptions, threads: int):
        from whisperspec.cpu import fix_threads

        fix_threads(threads)
        from whisperspec.transcribe import Transcriber

        self.transcriber = Transcriber(options=options)

    def pid(self) -> int:
        return os.getpid()

    def transcribe(self, sources: list[Source], batch_size: int | None) -> list[FileResult]:
        return list(self.transcriber.transcribe_many(sources, batch_size=batch_size))


def ray_engine(options: TranscriptionOptions, *, address: str | None = None, workers: int | None = None,
               cpus_per_worker: int | None = None, batch_size: int | None = None,
               ray_init: dict | None = None):
    """An engine for `run_corpus` on the cluster at `address` (None: a local one started here and
    stopped at the end), each actor loading the model with `options` (checked when they were built).
    `ray_init`: more `ray.init` arguments (a test's `num_cpus`)."""
    if "ray" not in sys.modules:  # read when Ray is imported
        if address and "RAY_AUTH_MODE" not in os.environ and _token_available():
            # `ray start` turns token authentication on where it finds a token, and Ray's driver
            # sends it only when told to; a cluster without tokens ignores it
            os.environ["RAY_AUTH_MODE"] = "token"
    try:
        import ray
    except ImportError as error:
        raise ValueError("--engine ray needs Ray: pip install 'whisperspec[ray]'") from error
    cpus = cpus_per_worker or defaults.RAY_CPUS_PER_WORKER
    if cpus < 1 or (workers is not None and workers < 1):
        raise ValueError("--ray-workers and --ray-cpus-per-worker: at least 1")
    batch = batch_size or defaults.BATCH_SIZE
    chunk = 2 * batch  # files per call: enough to fill the batch, few to redo if the actor dies

    def run(sources: list[Source], on_progress: Callable[[float], None]) -> Iterator[FileResult]:
        started_here = not ray.is_initialized()
        if started_here:
            _connect(ray, address, ray_init)
        actors, watchdog = [], _Watchdog(address)
        try:
            count = workers or max(1, int(ray.cluster_resources().get("CPU", cpus)) // cpus)
            remote = ray.remote(TranscriberWorker).options(num_cpus=cpus, max_restarts=-1, max_task_retries=0)
            actors = [remote.remote(options, cpus) for _ in range(min(count, max(1, len(sources))))]
            with watchdog.armed():  # while the driver works with the cluster
                for result in _hand_out(ray, actors, sources, chunk, batch, on_progress):
                    with watchdog.paused():  # while the result is written
                        yield result
        except Exception as error:  # noqa: BLE001 -- what Ray's calls turn ClusterGone into varies
            if not (watchdog.gone or isinstance(error, ray.exceptions.RaySystemError)):
                raise
            actors = []  # nobody left to stop them
            raise ClusterError(f"--ray-address {address}: the Ray cluster went away mid-run "
                               f"({watchdog.gone or _first_line(error)}): start it again and rerun the same command "
                               "(files already written are skipped)") from None
        finally:
            watchdog.stop()
            for actor in actors:
                ray.kill(actor)
            if started_here:
                ray.shutdown()

    return run


def _connect(ray, address: str | None, ray_init: dict | None) -> None:
    """Join the cluster at `address` (None: start one here), with Ray's start-up notices kept off
    the user's terminal; a failure is a `ClusterError` naming the address and the fix."""
    quiet = dict(log_to_driver=False, logging_level=logging.ERROR)
    if address is None:
        ray.init(**quiet, **(ray_init or {}))
        return
    host, _, port = address.rpartition(":")
    if host and not address.startswith("ray://"):  # not `auto`, nor Ray Client's own protocol
        if not port.isdigit():
            raise ClusterError(f"--ray-address {address}: give HOST:PORT, as `ray start --head` printed it")
        try:
            speaks_grpc = _speaks_http2(host, int(port))
        except OSError as error:
            raise ClusterError(f"--ray-address {address}: no Ray cluster answers there "
                               f"({error.strerror or error}): start one with `ray start --head --port {port}`, "
                               "or give the address `ray start` printed") from None
        if not speaks_grpc and not os.environ.get("RAY_USE_TLS"):
            raise ClusterError(f"--ray-address {address}: something answers there, but not a Ray cluster (no gRPC): "
                               "give the address `ray start --head` printed")
    try:
        ray.init(address=address, **quiet)
    except Exception as error:  # noqa: BLE001 -- Ray's connection errors share no base class
        raise ClusterError(f"--ray-address {address}: cannot join the Ray cluster there ({_first_line(error)})"
                           + ("" if "RAY_AUTH" not in str(error) and "uthentication" not in str(error) else
                              ": give it the cluster's token (RAY_AUTH_TOKEN, or `ray get-auth-token` on its head "
                              "into ~/.ray/auth_token)")) from None


def _speaks_http2(host: str, port: int) -> bool:
    """Whether the server at host:port answers an HTTP/2 greeting with its settings, as a Ray
    cluster's gRPC port does (Ray's driver would wait minutes on any other listener). OSError: no
    server there."""
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])  # + empty SETTINGS
    with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S) as connection:
        try:
            connection.sendall(preface)
            frame = connection.recv(9)
        except (TimeoutError, ConnectionResetError):
            return False
    return len(frame) >= 4 and frame[3] == 4  # a SETTINGS frame


class ClusterGone(Exception):
    """Raised in the driver's wait once the cluster's port has stayed closed (`_Watchdog`)."""


class _Watchdog:
    """Watches a HOST:PORT cluster's port while the driver works with the cluster. Ray's driver does
    not return from a call on a cluster that has gone (it ends the process 60 s later with a log
    line), so once the port has stayed closed for GONE_AFTER_S, this interrupts the call with a
    signal of its own (Ray's waits run Python's signal handlers, as they do for Ctrl-C; SIGINT
    itself may be ignored, in a background job) whose handler raises `ClusterGone`. While a result
    is being written (`paused`) it interrupts nothing."""

    def __init__(self, address: str | None):
        host, _, port = (address or "").rpartition(":")
        self.target = (host, int(port)) if host and port.isdigit() and not address.startswith("ray://") else None
        self.gone: str | None = None
        self._armed = threading.Event()
        self._stopped = threading.Event()
        if self.target and threading.current_thread() is threading.main_thread():  # where handlers run
            self._before = signal.signal(signal.SIGUSR2, self._interrupted)
            threading.Thread(target=self._watch, name="whisperspec-ray-watchdog", daemon=True).start()
        else:
            self.target = None

    def _interrupted(self, signum, frame):
        raise ClusterGone(self.gone)

    @contextlib.contextmanager
    def armed(self):
        self._armed.set()
        try:
            yield
        finally:
            self._armed.clear()

    @contextlib.contextmanager
    def paused(self):
        self._armed.clear()
        try:
            yield
        finally:
            self._armed.set()

    def stop(self) -> None:
        self._stopped.set()
        if self.target:
            signal.signal(signal.SIGUSR2, self._before)

    def _watch(self) -> None:
        closed_since = None
        while not self._stopped.wait(1.0):
            try:
                socket.create_connection(self.target, timeout=CONNECT_TIMEOUT_S).close()
                closed_since = None
            except OSError as error:
                closed_since = closed_since or time.monotonic()
                if time.monotonic() - closed_since > GONE_AFTER_S and self._armed.is_set():
                    self.gone = f"its port has been closed for {GONE_AFTER_S:g} s: {error.strerror or error}"
                    os.kill(os.getpid(), signal.SIGUSR2)
                    return


def _token_available() -> bool:
    """Where Ray's driver looks for a token: the environment, then ~/.ray/auth_token."""
    return bool(os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")
                or os.path.isfile(os.path.expanduser("~/.ray/auth_token")))


def _first_line(error: Exception) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def _hand_out(ray, actors: list, sources: list[Source], chunk: int, batch: int,
              on_progress: Callable[[float], None]) -> Iterator[FileResult]:
    """Give each ready actor the next chunk; yield results as chunks return. A chunk whose actor
    died goes back to the front of the queue, and the actor is probed (a cheap call) until Ray has
    restarted it: only a ready actor gets a chunk, so a failed chunk means a worker died holding it."""
    from ray.exceptions import ActorDiedError, RayActorError, WorkerCrashedError

    waiting = deque((sources[i:i + chunk], 0) for i in range(0, len(sources), chunk))
    running: dict = {}  # call -> (actor, its chunk or None for a probe, failures so far)
    ready, cannot_start = list(actors), None
    while waiting or any(files for _, files, _ in running.values()):
        while ready and waiting:
            actor, (files, failures) = ready.pop(), waiting.popleft()
            # workers start elsewhere: they get absolute paths, the results go back to the sources as given
            absolute = [replace(f, audio=os.path.abspath(f.audio)) for f in files]
            running[actor.transcribe.remote(absolute, batch)] = (actor, files, failures)
        if not running:
            raise RuntimeError(f"no Ray worker could start a transcriber: {cannot_start}")
        done, _ = ray.wait(list(running), num_returns=1)
        actor, files, failures = running.pop(done[0])
        try:
            value = ray.get(done[0])
        except (RayActorError, WorkerCrashedError) as error:
            if isinstance(error, ActorDiedError) and error.actor_init_failed:  # it never started: not the files' fault
                cannot_start = error
                if files is not None:
                    waiting.appendleft((files, failures))
                continue  # that actor is gone; the others go on
            if files is not None:
                yield from _lost(files, failures + 1, waiting, error)
            else:
                time.sleep(PROBE_SECONDS)  # still restarting: ask again shortly
            running[actor.pid.remote()] = (actor, None, 0)
            continue
        ready.append(actor)
        given = {f.name: f for f in files or ()}  # results names are unique in a run
        for result in value if files is not None else ():
            result.source = given[result.source.name]
            if result.ok:
                on_progress(result.transcription.duration)
            yield result


def _lost(files: list[Source], failures: int, waiting: deque, error: Exception) -> Iterator[FileResult]:
    """A chunk whose worker died: handed out again; after a second loss file by file (one file may
    be what kills its worker); a file lost ATTEMPTS times is an error row."""
    if len(files) == 1 and failures >= ATTEMPTS:
        yield FileResult(files[0], error=f"{files[0].audio}: its worker died {failures} times")
        return
    warnings.warn(f"a Ray worker died holding {len(files)} file(s) ({type(error).__name__}): handed out again")
    if len(files) > 1 and failures >= 2:
        waiting.extendleft(([f], failures) for f in reversed(files))
    else:
        waiting.appendleft((files, failures))
