"""`--engine ray` on a real local Ray cluster: a worker killed mid-run, every file transcribed
exactly once, and every transcript the local run's."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest

from whisperspec.corpus.inputs import expand_inputs
from whisperspec.corpus.run import local_engine, run_corpus

ray = pytest.importorskip("ray")
# One Ray on the machine at a time: `ray.init()` joins a cluster another test started by hand.
pytestmark = [pytest.mark.real, pytest.mark.xdist_group("ray")]

CLIPS = Path(__file__).parent / "data"
# the short clips first: the first chunk returns while the second (the long clips) is still decoding
ORDER = ["tt-weasels", "agent-newlocation", "privacy-prompt", "ss-noservice", "vm-options", "basic-pbx-ivr-main"]


def worker_processes() -> list[int]:
    """The processes of our Ray actors (Ray titles them after the actor's class)."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and b"ray::TranscriberWorker" in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def test_a_killed_worker_loses_nothing_and_duplicates_nothing(tmp_path, recwarn):
    from whisperspec.corpus.ray_engine import ray_engine
    from whisperspec.options import TranscriptionOptions
    from whisperspec.transcribe import Transcriber

    corpus = tmp_path / "corpus"
    for copy in ("a", "b"):
        (corpus / copy).mkdir(parents=True)
        for index, clip in enumerate(ORDER):
            shutil.copy(CLIPS / f"{clip}.flac", corpus / copy / f"{index}-{clip}.flac")
    sources = sorted(expand_inputs([str(corpus)]), key=lambda s: (s.name.name, s.name.parent))
    options = TranscriptionOptions.build("tiny.en", language="en")  # built once, shipped to every worker

    local_out = tmp_path / "local"
    assert run_corpus(sources, local_engine(Transcriber(options=options), 2), output_dir=local_out, formats=["txt"],
                      progress=False) == 0

    killed = []

    def kill_the_workers_once(result) -> None:
        if not killed:  # the first chunk is back; the other actor is in the middle of the long clips
            for pid in worker_processes():
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)

    ray_out = tmp_path / "ray"
    engine = ray_engine(options, workers=2, cpus_per_worker=1, batch_size=2,
                        ray_init=dict(num_cpus=2, include_dashboard=False))
    assert run_corpus(sources, engine, output_dir=ray_out, formats=["txt"], progress=False,
                      on_result=kill_the_workers_once) == 0
    assert len(killed) == 2
    assert any("handed out again" in str(w.message) for w in recwarn)  # a chunk in flight was lost, and redone

    rows = [json.loads(line) for line in (ray_out / "results.jsonl").read_text().splitlines()]
    assert sorted(r["output"] for r in rows) == sorted(s.name.as_posix() for s in sources)  # each once
    assert {r["status"] for r in rows} == {"ok"}
    for source in sources:
        name = f"{source.name.as_posix()}.txt"
        assert (ray_out / name).read_text() == (local_out / name).read_text(), name
    assert not list(ray_out.rglob("*.tmp"))
