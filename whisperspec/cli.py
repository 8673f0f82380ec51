"""`whisperspec` command line.

    transcribe   audio files -> text (+ srt/vtt/json), optionally with a drafter
    import-ct2   a faster-whisper (CTranslate2) checkpoint -> transformers
    bench        decoder costs and decode-phase speed of each drafter, side by side
    bench-corpus   corpus throughput, whole processes, vs greedy and faster-whisper
    bench-online   acceptance by window and decode time with and without online learning
    bench-startup  one short file from the command line, whole processes, vs faster-whisper
    evaluate     WER and latency against transformers and faster-whisper
    bench-vad    what VAD does to speed and WER on long recordings with pauses
    bench-longform  decode phase of whole files per drafter against greedy, one process
    generate     speculative generation with a causal text LM
    demo         the Gradio demo
    distill      train a draft decoder for a main model (synthetic speech, offline)
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

from whisperspec import defaults, options, process
from whisperspec.cli_parity import add_parity_options, hyphenated, transcription_options
from whisperspec.spec import SpecError


# Subcommands that parse their own arguments: `whisperspec NAME ...` calls MODULE.FUNCTION(argv).
DELEGATED = {
    "bench": ("whisperspec.bench.decoder:main", "decoder costs and decode-phase speed per drafter"),
    "bench-corpus": ("whisperspec.bench.corpus:main", "corpus throughput vs greedy and faster-whisper, whole processes"),
    "bench-online": ("whisperspec.bench.online:main", "acceptance by window with and without online learning"),
    "bench-startup": ("whisperspec.bench.startup:main", "one short file, whole processes, vs faster-whisper"),
    "evaluate": ("whisperspec.evaluation.runner:main", "WER/latency vs transformers and faster-whisper"),
    "bench-longform": ("whisperspec.bench.longform:main", "decode phase of whole files per drafter, vs greedy"),
    "bench-vad": ("whisperspec.bench.vad:main", "what --vad does to speed and WER on audio with pauses"),
    "generate": ("whisperspec.textlm.cli:main", "speculative generation with a causal text LM"),
    "demo": ("whisperspec.demo.app:cli", "start the Gradio demo"),
    "distill": ("whisperspec.distill.cli:main", "train a cheap draft decoder for a main model"),
}


def main(argv: list[str] | None = None) -> int:
    from whisperspec.kernels.allocator import keep_freed_memory

    keep_freed_memory()  # the command owns its process: int8 products reuse their memory
    with warnings.catch_warnings():  # restores the default display when main() returns
        warnings.showwarning = _show_warning
        try:
            return _run(sys.argv[1:] if argv is None else list(argv))
        except KeyboardInterrupt:  # files are written atomically: nothing half-written is left
            print("whisperspec: interrupted", file=sys.stderr)
            return 130
        except BrokenPipeError:  # the reader of our output has gone (`| head`): stop as Unix tools do
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so no flush fails again at exit
            return 1


def command() -> None:
    """The `whisperspec` executable: `main` on the process's arguments, then exit with its code.

    Python's collector walks every live object now and then, and importing torch and loading a
    model make hundreds of thousands, all of which live as long as the process: on a short file
    those walks, and the last ones at exit, cost a large share of the whole run. So the collector
    is off while the command starts up (`process.started_up` turns it back on, past everything made so
    far). The process then leaves without the interpreter's teardown (`process.exit_without_teardown`)."""
    gc.disable()
    code = main()
    gc.freeze()
    process.exit_without_teardown(code)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning as a user of the command reads it: what happened, not the line of ours it came from."""
    print(f"whisperspec: warning: {message}", file=file or sys.stderr)


def _run(argv: list[str]) -> int:
    if argv and argv[0] == "transcribe":
        try:
            argv = [argv[0], *hyphenated(argv[1:])]
        except ValueError as error:  # an openai-whisper boolean that is neither True nor False
            print(f"whisperspec: {error}", file=sys.stderr)
            return 2
    if not argv or argv[0] != "transcribe":  # only transcribe starts up with the collector off
        process.started_up()
    if argv and argv[0] in DELEGATED:
        module, _, function = DELEGATED[argv[0]][0].partition(":")
        return getattr(importlib.import_module(module), function)(argv[1:]) or 0
    parser = argparse.ArgumentParser(prog="whisperspec", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    _add_transcribe(commands)
    _add_import_ct2(commands)
    for name, (_, help_text) in DELEGATED.items():
        commands.add_parser(name, help=help_text)  # listed in --help; run above
    args = parser.parse_args(argv)
    return args.run(args)


# ------------------------------------------------------------------ transcribe
def _add_transcribe(commands) -> None:
    p = commands.add_parser("transcribe", help="transcribe audio files",
                            description="Transcribe audio files. Every option may also be spelled with underscores "
                                        "(--output_dir), so an openai-whisper command line runs as it is: "
                                        "docs/CLI-PARITY.md maps each of its options.")
    p.add_argument("audio", nargs="+", help="audio files (wav, flac, ogg, mp3, ...), folders (searched recursively), "
                                            "globs, or manifests (.jsonl/.csv with audio[,language,id]; .txt)")
    p.add_argument("--model", default=defaults.MODEL, help="base, tiny.en, a faster-whisper/transformers dir or hub id")
    p.add_argument("--compute-type", choices=options.COMPUTE_TYPES, default=defaults.COMPUTE_TYPE,
                   help="how the encoder runs, as faster-whisper's: auto (default) is bfloat16 on processors "
                        "with AMX or AMD's AVX-512 BF16 (the decoder too with AMX), float32 elsewhere; "
                        "speculation and batching stay exact for any")
    p.add_argument("--language", default=None, help="language code or name (default: detect)")
    p.add_argument("--task", choices=options.TASKS, default=options.TASKS[0])
    p.add_argument("--timestamps", action="store_true", help="decode timestamps (segments with times)")
    p.add_argument("--output-dir", "-o", type=Path, default=None,
                   help="write result files here (default: none, unless --format is given: then here)")
    p.add_argument("--format", "--output-format", "-f", default=None,
                   help="comma-separated, of txt,srt,vtt,tsv,json or 'all' (default txt)")
    p.add_argument("--draft", default=defaults.DRAFT,
                   help="DRAFT[@LOOKAHEAD]: none, auto, trained, int8[:V], early-exit[:E], ngram[:N], FILE.safetensors "
                        "or a draft model; e.g. auto@5, auto@confidence:0.4. Drafting speeds up greedy decoding and "
                        "sampling; windows decoded by beam search (--beam-size > 1) are not drafted")
    p.add_argument("--lookahead", default=None,
                   help=f"the same as DRAFT@LOOKAHEAD: K (default {defaults.LOOKAHEAD}), heuristic[:K], "
                        "confidence[:T] or cost")
    p.add_argument("--online-learning", choices=options.ONLINE_LEARNING, default=defaults.ONLINE_LEARNING,
                   help="on: a trained draft keeps learning from the main model while it transcribes, across "
                        "windows and files (same transcript; default off: docs/ONLINE.md says when it pays)")
    p.add_argument("--temperature", default=None,
                   help="openai-whisper's: the temperature to start from (default 0: greedy), raised by "
                        "--temperature-increment-on-fallback while a window's text fails the fallback thresholds")
    p.add_argument("--sampling", choices=options.SAMPLING, default=options.SAMPLING[0],
                   help="at temperature > 0: coupled (the same text with or without a draft) or residual")
    p.add_argument("--initial-prompt", "--prompt", default=None, help="text the first window continues")
    p.add_argument("--stats", action="store_true", help="print acceptance, passes, tokens/s and the time split")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    from whisperspec.corpus.cli import add_corpus_arguments

    add_corpus_arguments(p)
    _add_word_options(p)
    add_parity_options(p)
    p.set_defaults(run=_run_transcribe)


def _add_word_options(p) -> None:
    words = p.add_argument_group("word timestamps (openai-whisper's options)")
    words.add_argument("--word-timestamps", action="store_true",
                       help="time every word (json: segments[].words with start, end, probability)")
    words.add_argument("--prepend-punctuations", default=defaults.PREPEND_PUNCTUATIONS,
                       help="punctuation joined to the word after it")
    words.add_argument("--append-punctuations", default=defaults.APPEND_PUNCTUATIONS,
                       help="punctuation joined to the word before it")
    words.add_argument("--highlight-words", action="store_true", help="srt/vtt: underline each word as it is spoken")
    words.add_argument("--max-line-width", type=int, default=None, help="srt/vtt: characters per line")
    words.add_argument("--max-line-count", type=int, default=None, help="srt/vtt: lines per cue")
    words.add_argument("--max-words-per-line", type=int, default=None,
                       help="srt/vtt: words per cue (no effect with --max-line-width)")


def _subtitle_options(args):
    """srt/vtt cue options from the command line, checked: each needs --word-timestamps."""
    from whisperspec.subtitles import SubtitleOptions

    options = SubtitleOptions(args.highlight_words, args.max_line_width, args.max_line_count, args.max_words_per_line)
    if options.by_word and not args.word_timestamps:
        used = [name for name in ("highlight_words", "max_line_width", "max_line_count", "max_words_per_line")
                if getattr(args, name) not in (None, False)]
        raise ValueError(f"--{used[0].replace('_', '-')} requires --word-timestamps")
    return options


def _run_transcribe(args) -> int:
    from whisperspec.corpus.cli import corpus_engine, transcribe_corpus
    from whisperspec.corpus.inputs import InputError, expand_inputs
    from whisperspec.output import WRITERS

    formats = [f.strip() for f in ("txt" if args.format is None else args.format).split(",") if f.strip()]
    unknown = set(formats) - set(WRITERS) - {"all"}
    if unknown or not formats:
        print(f"whisperspec: --format {args.format!r}: use one or more of {', '.join(WRITERS)}, comma-separated, "
              "or all", file=sys.stderr)
        return 2
    try:  # every option is checked before anything is made or loaded: the output's first
        subtitles = _subtitle_options(args)
        built = transcription_options(args)
    except SpecError as error:
        print(f"whisperspec: --draft: {error}", file=sys.stderr)
        return 2
    except ValueError as error:  # each names the option
        print(f"whisperspec: {error}", file=sys.stderr)
        return 2
    if args.format is not None and not args.output_dir:  # openai-whisper writes the files asked for here
        args.output_dir = Path(".")
    if args.output_dir and not _writable_folder(args.output_dir):
        return 2
    try:
        sources = expand_inputs(args.audio)
    except (InputError, ValueError) as error:
        print(f"whisperspec: {error}", file=sys.stderr)
        return 2
    # transformers' per-tensor "Loading weights" bar, where a model loads through it (a hub id);
    # set in the environment: importing transformers to switch it off would cost the start-up
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        engine = corpus_engine(built, args)
    except SpecError as error:
        print(f"whisperspec: --draft: {error}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as error:  # each names the option, the model or the drafter
        print(f"whisperspec: {error}", file=sys.stderr)
        return 2
    process.started_up()
    return transcribe_corpus(sources, engine, args, formats,
                             print_result=lambda result: _print_result(result, args, len(sources) > 1),
                             subtitles=subtitles)


def output_names(inputs: list[str]) -> dict[str, Path]:
    """Each input's results name, relative to the output folder (`whisperspec.corpus.inputs`)."""
    from whisperspec.corpus.inputs import output_names as names

    return names(inputs)


def _writable_folder(folder: Path) -> bool:
    """The output folder exists (made if need be) and takes files, checked before any work."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
        return True
    except OSError as error:
        print(f"whisperspec: --output-dir {folder}: cannot write there ({error.strerror or error})", file=sys.stderr)
        return False


def _print_result(result, args, many: bool) -> None:
    if args.verbose is False:  # openai-whisper's --verbose False: a progress bar, no text
        return
    if many:
        print(f"== {result.source}")
    if args.timestamps or args.verbose:
        from whisperspec.output import format_timestamp

        for s in result.segments:
            print(f"[{format_timestamp(s.start)} --> {format_timestamp(s.end)}] {s.text.strip()}")
    else:
        print(result.text)
    if args.stats:
        print(" | ".join(f"{name} {value}" for name, value in result.stats_rows()), file=sys.stderr)


# ------------------------------------------------------------------ import-ct2
def _add_import_ct2(commands) -> None:
    p = commands.add_parser("import-ct2", help="convert a faster-whisper (CTranslate2) checkpoint to transformers")
    p.add_argument("src", type=Path, help="dir with model.bin, config.json, tokenizer.json")
    p.add_argument("out", type=Path, help="output dir (safetensors + processor files)")
    p.set_defaults(run=_run_import_ct2)


def _run_import_ct2(args) -> int:
    from whisperspec.models import convert_ct2_to_transformers

    missing = [name for name in ("model.bin", "config.json", "tokenizer.json") if not (args.src / name).is_file()]
    if missing:
        print(f"whisperspec import-ct2: {args.src}: not a faster-whisper (CTranslate2) Whisper folder "
              f"(no {', '.join(missing)})", file=sys.stderr)
        return 2
    try:  # written to a temporary folder and renamed: a failure leaves no half-written output
        out = convert_ct2_to_transformers(args.src, args.out)
    except (OSError, ValueError, KeyError) as error:  # truncated or foreign files
        print(f"whisperspec import-ct2: {args.src}: cannot convert ({type(error).__name__}: {error})", file=sys.stderr)
        return 1
    print(json.dumps({"converted": str(args.src), "to": str(out)}))
    return 0


if __name__ == "__main__":
    command()
