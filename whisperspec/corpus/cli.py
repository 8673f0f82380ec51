"""`whisperspec transcribe`'s corpus options and its run (the command itself is in whisperspec.cli)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from whisperspec import defaults
from whisperspec.corpus.inputs import Source
from whisperspec.corpus.run import Engine, local_engine, run_corpus
from whisperspec.options import TranscriptionOptions

ENGINES = ("local", "ray")


def add_corpus_arguments(parser) -> None:
    parser.add_argument("--batch-size", type=int, default=None,
                        help=f"files whose windows are decoded together (default {defaults.BATCH_SIZE}; "
                             "1: one file at a time)")
    parser.add_argument("--overwrite", action="store_true",
                        help="transcribe files again whose results are all in --output-dir (default: skip them)")
    parser.add_argument("--results", type=Path, default=None,
                        help="results manifest (.jsonl, a row per file as it finishes; default "
                             "OUTPUT_DIR/results.jsonl)")
    parser.add_argument("--engine", choices=ENGINES, default="local",
                        help="local: this process; ray: a Ray cluster's workers (pip install 'whisperspec[ray]')")
    parser.add_argument("--ray-address", default=None,
                        help="the cluster to join (e.g. 10.0.0.1:6379, or 'auto'); default: start one on this machine")
    parser.add_argument("--ray-workers", type=int, default=None,
                        help="transcriber actors on the cluster (default: one per --ray-cpus-per-worker CPUs)")
    parser.add_argument("--ray-cpus-per-worker", type=int, default=None,
                        help=f"CPUs (torch threads) each transcriber actor takes (default {defaults.RAY_CPUS_PER_WORKER})")


def corpus_engine(options: TranscriptionOptions, args) -> Engine:
    """The engine the options ask for. Raises SpecError, ValueError or OSError (bad options, a
    model that does not load) before anything is transcribed."""
    if args.batch_size is not None and args.batch_size < 1:
        raise ValueError(f"--batch-size {args.batch_size}: at least 1")
    if args.engine == "ray":
        from whisperspec.corpus.ray_engine import ray_engine

        return ray_engine(options, address=args.ray_address, workers=args.ray_workers,
                          cpus_per_worker=args.ray_cpus_per_worker, batch_size=args.batch_size)
    for option in ("ray_address", "ray_workers", "ray_cpus_per_worker"):
        if getattr(args, option) is not None:
            raise ValueError(f"--{option.replace('_', '-')}: only with --engine ray")
    from whisperspec.transcribe import Transcriber

    return local_engine(Transcriber(options=options), args.batch_size)


def transcribe_corpus(sources: list[Source], engine: Engine, args, formats: list[str],
                      print_result: Callable, subtitles=None) -> int:
    return run_corpus(sources, engine, output_dir=args.output_dir, formats=formats, overwrite=args.overwrite,
                      results_path=args.results, progress=not args.quiet,
                      on_result=lambda result: print_result(result.transcription), subtitles=subtitles)
