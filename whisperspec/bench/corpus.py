"""`whisperspec bench-corpus`: corpus throughput, whole processes, side by side.

Each system transcribes the same folder of files in a process of its own, timed from start to
exit (model load included, as a user meets it); systems are interleaved within each repeat, so
ratios come from one run:

    whisperspec       `whisperspec transcribe DIR --output-dir OUT` (corpus mode: batched, --draft)
    chunked           the same with --chunked (a long file's speech in chunks decoded together)
    greedy            the same command one file at a time without a draft (--batch-size 1 --draft none)
    faster-whisper    faster-whisper int8, file by file (greedy, no VAD)
    fw-batched        faster-whisper int8 `BatchedInferencePipeline`, batch 8 (VAD chunks)

It prints wall time, audio-s per second, the ratio to each baseline, WER against the data set's
references, and how many transcripts are identical between `whisperspec` and `greedy` (the lossless
check, end to end).

`--load` also times every system on a shared machine: `busy`, beside a neighbour spinning on one
core (a bounded busy loop, as a shell loop or another user's job would), and `twin`, two copies of
the same command at once (each timed; the slower counts). It prints each system's slowdown against
its own quiet run.

    whisperspec bench-corpus --data asterisk-en --limit 64
    whisperspec bench-corpus --data asterisk-en-long --limit 4 --systems whisperspec,chunked,greedy,faster-whisper,fw-batched
    whisperspec bench-corpus --data codec2-en --limit 11 --systems whisperspec,faster-whisper --load quiet,busy,twin
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from whisperspec import defaults

SYSTEMS = ("whisperspec", "chunked", "greedy", "faster-whisper", "fw-batched")
LOADS = ("quiet", "busy", "twin")
NEIGHBOUR_LIMIT_S = 3600  # the busy loop ends by itself even if this process is killed
DEFAULT_SYSTEMS = ("whisperspec", "greedy", "faster-whisper", "fw-batched")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="whisperspec bench-corpus", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="asterisk-en",
                        help="a data set `whisperspec evaluate` knows (asterisk-en, asterisk-en-long, a manifest, ...)")
    parser.add_argument("--limit", type=int, default=64, help="files of the data set (default 64)")
    parser.add_argument("--model", default=defaults.MODEL)
    parser.add_argument("--draft", default="auto", help="whisperspec's DRAFT[@LOOKAHEAD] (default auto)")
    parser.add_argument("--batch-size", type=int, default=None, help=f"whisperspec's (default {defaults.BATCH_SIZE})")
    parser.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS), help=f"comma-separated, of {', '.join(SYSTEMS)}")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--workdir", type=Path, default=None, help="where the outputs go (default: a temporary folder)")
    parser.add_argument("--load", default="quiet", help=f"comma-separated, of {', '.join(LOADS)} (default quiet)")
    args = parser.parse_args(argv)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        parser.error(f"--systems: unknown {', '.join(sorted(unknown))}; use {', '.join(SYSTEMS)}")
    loads = [s.strip() for s in args.load.split(",") if s.strip()]
    if set(loads) - set(LOADS) or "quiet" not in loads:
        parser.error(f"--load: of {', '.join(LOADS)}, quiet included")

    from whisperspec.bench import checked_data

    utterances = checked_data(parser, args.data, args.limit, [args.draft], "--draft")
    with tempfile.TemporaryDirectory(prefix="whisperspec-bench-corpus-") as scratch:
        work = args.workdir or Path(scratch)
        corpus = work / "corpus"
        corpus.mkdir(parents=True, exist_ok=True)
        for utterance in utterances:  # one folder of the files, as a user would point the command at
            link = corpus / Path(utterance.audio).name
            if not link.exists():
                link.symlink_to(Path(utterance.audio).resolve())
        language = utterances[0].language or "en"
        seconds = {(name, load): [] for name in systems for load in loads}
        for repeat in range(args.repeats):
            for load in loads:
                for name in systems:
                    outs = [work / (f"{name}-{repeat}" + ("" if load == "quiet" else f"-{load}{copy}"))
                            for copy in range(2 if load == "twin" else 1)]
                    took = _timed([_command(name, args, corpus, out, language) for out in outs], busy=load == "busy")
                    if isinstance(took, str):
                        print(f"whisperspec: bench-corpus: {name} ({load}) failed:\n{took}", file=sys.stderr)
                        return 1
                    seconds[name, load].append(took)
        _report(utterances, systems, {name: seconds[name, "quiet"] for name in systems}, work, language, args)
        if len(loads) > 1:
            _report_loads(systems, loads, seconds)
    return 0


def _timed(commands: list[list[str]], busy: bool) -> float | str:
    """Seconds until the last of `commands` (run at once) exits, beside a neighbour spinning on one
    core if `busy`; a failure's error output instead."""
    neighbour = subprocess.Popen([sys.executable, "-c", "import time\nend = time.monotonic() + "
                                  f"{NEIGHBOUR_LIMIT_S}\nwhile time.monotonic() < end: pass"]) if busy else None
    try:
        started = time.perf_counter()
        running = [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for c in commands]
        errors = [p.communicate()[1] for p in running]
        took = time.perf_counter() - started
    finally:
        if neighbour:
            neighbour.kill()
            neighbour.wait()
    failed = [e for p, e in zip(running, errors) if p.returncode]
    return failed[0] if failed else took


def _report_loads(systems: list[str], loads: list[str], seconds: dict) -> None:
    print("\n## On a shared machine (busy: one core spun by another process; twin: two copies at once, "
          "the slower)\n")
    print("| system | " + " | ".join(f"{load} s" for load in loads) + " | "
          + " | ".join(f"{load} slowdown" for load in loads if load != "quiet") + " |")
    print("|---|" + "---|" * (2 * len(loads) - 1))
    for name in systems:
        wall = {load: statistics.median(seconds[name, load]) for load in loads}
        print(f"| {name} | " + " | ".join(f"{wall[load]:.1f}" for load in loads) + " | "
              + " | ".join(f"{wall[load] / wall['quiet']:.2f}x" for load in loads if load != "quiet") + " |")


def _command(name: str, args, corpus: Path, out: Path, language: str) -> list[str]:
    ours = [sys.executable, "-m", "whisperspec.cli", "transcribe", str(corpus), "--model", args.model,
            "--language", language, "--output-dir", str(out), "--quiet", "--overwrite"]
    if name in ("whisperspec", "chunked"):
        return ours + ["--draft", args.draft] + (["--batch-size", str(args.batch_size)] if args.batch_size else []) \
            + (["--chunked"] if name == "chunked" else [])
    if name == "greedy":
        return ours + ["--draft", "none", "--batch-size", "1"]
    from whisperspec.models import EMBEDDED_MODELS, ct2_model_dir

    model_dir = ct2_model_dir(args.model) if args.model in EMBEDDED_MODELS else args.model
    batch = "8" if name == "fw-batched" else "0"
    return [sys.executable, "-m", "whisperspec.bench.fw_corpus", str(model_dir), "int8", batch, language,
            str(out), *sorted(str(p) for p in corpus.iterdir())]


def _texts(folder: Path, names: list[str]) -> list[str]:
    return [" ".join((folder / f"{name}.txt").read_text().split()) if (folder / f"{name}.txt").is_file() else ""
            for name in names]


def _report(utterances, systems, seconds, work: Path, language: str, args) -> None:
    from whisperspec.evaluation.scoring import score

    names = [Path(u.audio).stem for u in utterances]
    audio = sum(u.duration or 0 for u in utterances)
    wall = {name: statistics.median(values) for name, values in seconds.items()}
    print(f"## Corpus throughput: {len(utterances)} files, {audio / 60:.1f} min of audio ({args.data}), "
          f"model {args.model}, whole processes, median of {args.repeats}\n")
    print("| system | wall s | audio-s/s | vs greedy | vs faster-whisper | WER |")
    print("|---|---|---|---|---|---|")
    references = [u.text for u in utterances]
    for name in systems:
        texts = _texts(work / f"{name}-0", names)
        wer = f"{score(references, texts, language).wer:.2%}" if all(references) else "- (no references)"
        ratio = {base: f"{wall[base] / wall[name]:.2f}x" if base in wall else "-" for base in ("greedy", "faster-whisper")}
        print(f"| {name} | {wall[name]:.1f} | {audio / wall[name]:.1f} | {ratio['greedy']} | "
              f"{ratio['faster-whisper']} | {wer} |")
    if {"whisperspec", "greedy"} <= set(systems):
        same = sum(a == b for a, b in zip(_texts(work / "whisperspec-0", names), _texts(work / "greedy-0", names)))
        print(f"\nwhisperspec and greedy transcripts identical: {same}/{len(names)}")
