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

    whisperspec bench-corpus --data asterisk-en --limit 64
    whisperspec bench-corpus --data asterisk-en-long --limit 4 --systems whisperspec,chunked,greedy,faster-whisper,fw-batched
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
    args = parser.parse_args(argv)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        parser.error(f"--systems: unknown {', '.join(sorted(unknown))}; use {', '.join(SYSTEMS)}")

    from whisperspec.evaluation.datasets import load_dataset

    utterances = load_dataset(args.data, args.limit)
    with tempfile.TemporaryDirectory(prefix="whisperspec-bench-corpus-") as scratch:
        work = args.workdir or Path(scratch)
        corpus = work / "corpus"
        corpus.mkdir(parents=True, exist_ok=True)
        for utterance in utterances:  # one folder of the files, as a user would point the command at
            link = corpus / Path(utterance.audio).name
            if not link.exists():
                link.symlink_to(Path(utterance.audio).resolve())
        language = utterances[0].language or "en"
        seconds = {name: [] for name in systems}
        for repeat in range(args.repeats):
            for name in systems:
                out = work / f"{name}-{repeat}"
                command = _command(name, args, corpus, out, language)
                started = time.perf_counter()
                done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                seconds[name].append(time.perf_counter() - started)
                if done.returncode:
                    print(f"whisperspec: bench-corpus: {name} failed:\n{done.stderr}", file=sys.stderr)
                    return 1
        _report(utterances, systems, seconds, work, language, args)
    return 0


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
        wer = score(references, texts, language).wer if all(references) else float("nan")
        ratio = {base: f"{wall[base] / wall[name]:.2f}x" if base in wall else "-" for base in ("greedy", "faster-whisper")}
        print(f"| {name} | {wall[name]:.1f} | {audio / wall[name]:.1f} | {ratio['greedy']} | "
              f"{ratio['faster-whisper']} | {wer:.2%} |")
    if {"whisperspec", "greedy"} <= set(systems):
        same = sum(a == b for a, b in zip(_texts(work / "whisperspec-0", names), _texts(work / "greedy-0", names)))
        print(f"\nwhisperspec and greedy transcripts identical: {same}/{len(names)}")
