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

import logging
import os
import socket
import sys
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
        actors = []
        try:
            count = workers or max(1, int(ray.cluster_resources().get("CPU", cpus)) // cpus)
            remote = ray.remote(TranscriberWorker).options(num_cpus=cpus, max_restarts=-1, max_task_retries=0)
            actors = [remote.remote(options, cpus) for _ in range(min(count, max(1, len(sources))))]
            yield from _hand_out(ray, actors, sources, chunk, batch, on_progress)
        except ray.exceptions.RaySystemError as error:  # the cluster itself is gone
            raise ClusterError(f"the Ray cluster at {address or 'this machine'} went away mid-run "
                               f"({_first_line(error)}): start it again and rerun (files already "
                               "written are skipped)") from None
        finally:
            for actor in actors:
                try:
                    ray.kill(actor)
                except Exception:  # noqa: BLE001 -- a cluster already gone has nothing left to stop
                    pass
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
            socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
        except OSError as error:
            raise ClusterError(f"--ray-address {address}: no Ray cluster answers there "
                               f"({error.strerror or error}): start one with `ray start --head --port {port}`, "
                               "or give the address `ray start` printed") from None
    try:
        ray.init(address=address, **quiet)
    except Exception as error:  # noqa: BLE001 -- Ray's connection errors share no base class
        raise ClusterError(f"--ray-address {address}: cannot join the Ray cluster there ({_first_line(error)})"
                           + ("" if "RAY_AUTH" not in str(error) and "uthentication" not in str(error) else
                              ": give it the cluster's token (RAY_AUTH_TOKEN, or `ray get-auth-token` on its head "
                              "into ~/.ray/auth_token)")) from None


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
