"""`whisperspec bench-online`: what online learning does over long recordings, side by side.

The same files are transcribed, in order, by the same drafter with online learning off and on
(each system keeps its drafter from file to file, as a `Transcriber` does over a corpus), the two
interleaved file by file, the order rotating so drift on a shared machine hits both alike; with
`--greedy`, plain greedy decoding too. Printed: acceptance by window for each (what learning
changes, and what no machine load can blur), and the decode time of each file with the training
time included, the training time on its own, and whether every transcript is the same.

    whisperspec bench-online --dataset asterisk-en-long --files 2
    whisperspec bench-online --dataset asterisk-es-long --files 2 --draft trained --language es
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from whisperspec import defaults
from whisperspec.spec import SpecError
from whisperspec.whisper.drafters.online import learner_in


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="whisperspec bench-online", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("audio", nargs="*", type=Path, help="audio files, in the order a user would give them")
    parser.add_argument("--dataset", default="asterisk-en-long",
                        help="when no files are given: a data set name or manifest (whisperspec evaluate's)")
    parser.add_argument("--files", type=int, default=2, help="the first N files of the data set")
    parser.add_argument("--model", default=defaults.MODEL)
    parser.add_argument("--draft", default="auto", help="DRAFT[@LOOKAHEAD]: auto, trained or a draft file")
    parser.add_argument("--language", default=None, help="default: the data set's, else detected")
    parser.add_argument("--greedy", action="store_true", help="also decode without a draft (slow; the reference)")
    args = parser.parse_args(argv)
    from whisperspec.options import parse_draft_spec

    try:
        parse_draft_spec(args.draft)
    except SpecError as error:
        print(f"whisperspec bench-online: --draft: {error}", file=sys.stderr)
        return 2
    files, language = _inputs(args)
    if not files:
        print("whisperspec bench-online: no audio files", file=sys.stderr)
        return 2

    from whisperspec.options import TranscriptionOptions
    from whisperspec.transcribe import Transcriber

    options = TranscriptionOptions.build(args.model, draft=args.draft, language=language, timestamps=True)
    systems = {"off": Transcriber(options=options), "on": Transcriber(options=replace(options, online_learning=True))}
    if args.greedy:
        systems["greedy"] = Transcriber(options=replace(options, draft=parse_draft_spec("none")))
    names = list(systems)
    print(f"# whisperspec bench-online: model {args.model}, draft {args.draft}, {len(files)} files\n")
    rows = {name: [] for name in names}  # per file: (decode s, window acceptances, text)
    trained = []  # per file: training s within the "on" system's decode
    for index, path in enumerate(files):
        for name in names[index % len(names):] + names[:index % len(names)]:
            before = train_seconds(systems[name].drafter)
            result = systems[name].transcribe(path)
            rows[name].append((result.stats.decoder_ms / 1e3, result.stats.window_acceptance, result.text))
            if name == "on":
                trained.append(train_seconds(systems[name].drafter) - before)
        print(f"{path}: {len(rows['off'][-1][1])} windows", flush=True)
    learner = learner_in(systems["on"].drafter)
    if learner is None:
        print(f"whisperspec bench-online: --draft {args.draft} had no trained draft to learn for model "
              f"{args.model} on this audio", file=sys.stderr)
        return 2
    _print_windows(rows)
    _print_times(files, rows, trained, learner)
    return 0


def train_seconds(drafter) -> float:
    learner = learner_in(drafter)
    return learner.train_seconds if learner else 0.0


def _inputs(args) -> tuple[list[str], str | None]:
    if args.audio:
        return [str(path) for path in args.audio], args.language
    from whisperspec.evaluation.datasets import load_dataset

    utterances = load_dataset(args.dataset)[:args.files]
    return [u.audio for u in utterances], args.language or (utterances[0].language if utterances else None)


def _print_windows(rows: dict) -> None:
    names = list(rows)
    print("\n## Acceptance by window (drafted tokens the main model kept)\n")
    print("| file | window | " + " | ".join(f"acceptance {n}" for n in names if n != "greedy") + " |")
    print("|---|---|" + "---|" * sum(n != "greedy" for n in names))
    count = 0
    for file, per_name in enumerate(zip(*(rows[n] for n in names if n != "greedy"))):
        for window, values in enumerate(zip(*(r[1] for r in per_name))):
            count += 1
            print(f"| {file} | {count} | " + " | ".join(f"{v:.0%}" for v in values) + " |")


def _print_times(files, rows: dict, trained: list[float], learner) -> None:
    print("\n## Decode time (encoder excluded; training included), one run, interleaved\n")
    names = list(rows)
    print("| file | " + " | ".join(f"{n} s" for n in names) + " | training s | on / off | same text |")
    print("|---|" + "---|" * len(names) + "---|---|---|")
    for i, _ in enumerate(files):
        times = [rows[n][i][0] for n in names]
        same = len({rows[n][i][2] for n in names}) == 1
        print(f"| {i} | " + " | ".join(f"{t:.1f}" for t in times)
              + f" | {trained[i]:.1f} | {rows['on'][i][0] / rows['off'][i][0]:.2f} | {'yes' if same else 'NO'} |")
    total = {n: sum(r[0] for r in rows[n]) for n in names}
    print(f"| all | " + " | ".join(f"{total[n]:.1f}" for n in names)
          + f" | {sum(trained):.1f} | {total['on'] / total['off']:.2f} | |")
    accepted = {n: _mean([a for r in rows[n] for a in r[1]]) for n in names if n != "greedy"}
    print(f"\nmean window acceptance: off {accepted['off']:.1%}, on {accepted['on']:.1%}; "
          f"{learner.updates} updates, training {sum(trained):.1f} s "
          f"({sum(trained) / max(total['on'], 1e-9):.1%} of the decode time with learning)")
    if "greedy" in total:
        print(f"speed-up over greedy: off {total['greedy'] / total['off']:.2f}x, on {total['greedy'] / total['on']:.2f}x")


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0
