"""`whisperspec bench-startup`: one short file from the command line, whole processes, side by side.

The most common use is `whisperspec transcribe one-file.wav`: interpreter start, imports, model
load and one transcription, all paid once. This runs, interleaved and repeated, as new processes:

    ours            whisperspec transcribe FILE  (default options, plus any --option given)
    faster-whisper  load WhisperModel (the same checkpoint), transcribe with beam 1, print

and prints the median wall time of each, their ratio, and where our process spends its time (a
run of the same work with a clock between the steps). `--cold` empties our model cache first, so
the first run converts the model (the first run after installing).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from whisperspec import defaults

FASTER_WHISPER = """
import sys
from faster_whisper import WhisperModel
model = WhisperModel(sys.argv[1], device="cpu", compute_type=sys.argv[2])
segments, _ = model.transcribe(sys.argv[3], beam_size=1)
print("".join(s.text for s in segments).strip())
"""

# Our CLI's work, step by step, with a clock between the steps (the split of a whole process),
# the garbage collector handled as the command handles it (`whisperspec.cli.command`).
SPLIT = """
import gc, json, sys, time
gc.disable()
marks = [("start", time.perf_counter())]
def mark(name):
    marks.append((name, time.perf_counter()))
import torch
mark("import torch")
from whisperspec.process import started_up
from whisperspec.transcribe import Transcriber
mark("import whisperspec")
transcriber = Transcriber(draft=sys.argv[2] if len(sys.argv) > 2 else None)
started_up()
mark("load model and drafter")
result = transcriber.transcribe(sys.argv[1])
mark("first transcription")
print(json.dumps({"steps": [[name, t - marks[i][1]] for i, (name, t) in enumerate(marks[1:])],
                  "stats": {k: v for k, v in result.stats.to_dict().items() if k.endswith("_ms")}}))
"""


def main(argv: list[str] | None = None) -> int:
    from whisperspec.resources import sample_audio

    parser = argparse.ArgumentParser(prog="whisperspec bench-startup", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("audio", nargs="?", type=Path, default=sample_audio(), help="default: the bundled sample")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--compute-type", default="int8", help="faster-whisper's compute type")
    parser.add_argument("--draft", default=None, help=f"our --draft (default: the CLI's, {defaults.DRAFT})")
    parser.add_argument("--cold", action="store_true", help="start from an empty model cache (a new install)")
    args = parser.parse_args(argv)
    from whisperspec.models.registry import ct2_model_dir

    model_dir = str(ct2_model_dir(defaults.MODEL))  # outside the timing: the joined checkpoint is cached
    draft = ["--draft", args.draft] if args.draft else []
    commands = {
        "whisperspec": [sys.executable, "-m", "whisperspec.cli", "transcribe", str(args.audio), "--quiet", *draft],
        "faster-whisper": [sys.executable, "-c", FASTER_WHISPER, model_dir, args.compute_type, str(args.audio)],
    }
    with tempfile.TemporaryDirectory(prefix="whisperspec-startup-") as scratch:
        env = dict(os.environ)
        if args.cold:
            env["WHISPERSPEC_CACHE"] = scratch
            cold = _timed(commands["whisperspec"], env)
            print(f"cold cache (first run, converts the model): whisperspec {cold[0]:.2f} s")
        times: dict[str, list[float]] = {name: [] for name in commands}
        texts = {}
        for _ in range(args.repeats):
            for name, command in commands.items():
                seconds, texts[name] = _timed(command, env)
                times[name].append(seconds)
        split = json.loads(subprocess.run([sys.executable, "-c", SPLIT, str(args.audio), *([args.draft] if args.draft else [])],
                                          env=env, capture_output=True, text=True, check=True).stdout)
        if args.cold:
            shutil.rmtree(scratch, ignore_errors=True)
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"{args.audio.name}, {args.repeats} runs each, interleaved, whole processes (warm cache):")
    for name, values in times.items():
        print(f"  {name:15s} median {medians[name]:.2f} s  (runs: {', '.join(f'{v:.2f}' for v in values)})")
        print(f"  {'':15s} {texts[name]!r}")
    print(f"  whisperspec / faster-whisper {args.compute_type}: {medians['whisperspec'] / medians['faster-whisper']:.2f}x "
          "the time")
    print("where our process spends it (one run, a clock between the steps):")
    for name, seconds in split["steps"]:
        print(f"  {name:25s} {seconds:.2f} s")
    print("  inside the first transcription: " + ", ".join(f"{k[:-3]} {v:.0f} ms" for k, v in split["stats"].items()
                                                         if k != "load_ms"))
    return 0


def _timed(command: list[str], env: dict) -> tuple[float, str]:
    start = time.perf_counter()
    out = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if out.returncode:
        raise SystemExit(f"{' '.join(command[:4])} ... failed:\n{out.stderr}")
    return seconds, out.stdout.strip()


if __name__ == "__main__":
    sys.exit(main())
