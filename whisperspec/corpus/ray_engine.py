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
"""

from __future__ import annotations

import os
import time
import warnings
from collections import deque
from dataclasses import replace
from typing import Callable, Iterator

from whisperspec import defaults
from whisperspec.corpus.inputs import Source
from whisperspec.corpus.results import FileResult
from whisperspec.options import TranscriptionOptions

ATTEMPTS = 3  # a file is tried by this many workers before it is recorded as an error
PROBE_SECONDS = 0.5  # between calls asking whether a restarting actor is back


class TranscriberWorker:
    """A Ray actor's state: one Transcriber, its torch threads the CPUs Ray gave the actor."""

    def __init__(self, options: TranscriptionOptions, threads: int):
        import torch

        torch.set_num_threads(threads)
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
            ray.init(address=address, log_to_driver=False, **(ray_init or {}))
        actors = []
        try:
            count = workers or max(1, int(ray.cluster_resources().get("CPU", cpus)) // cpus)
            remote = ray.remote(TranscriberWorker).options(num_cpus=cpus, max_restarts=-1, max_task_retries=0)
            actors = [remote.remote(options, cpus) for _ in range(min(count, max(1, len(sources))))]
            yield from _hand_out(ray, actors, sources, chunk, batch, on_progress)
        finally:
            for actor in actors:
                ray.kill(actor)
            if started_here:
                ray.shutdown()

    return run


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
