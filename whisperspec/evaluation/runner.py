"""`whisperspec evaluate`: WER and latency of several systems on the same audio, in one run.

    whisperspec evaluate --dataset asterisk-en --limit 50 --out eval/ \\
        --systems whisperspec:none whisperspec transformers faster-whisper:int8 faster-whisper:float32

Every system transcribes every utterance; the order of systems rotates from one utterance to the
next so that drift on a shared machine hits all alike; a first utterance warms each system up and
is not counted; with --repeats R each utterance is timed R times and the median kept.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
from pathlib import Path

from tqdm import tqdm

from whisperspec.evaluation.datasets import load_dataset
from whisperspec.evaluation.report import summarize, write_report
from whisperspec.evaluation.systems import FasterWhisperSystem, Output, build_system, parse_system_spec
from whisperspec.spec import SpecError

DEFAULT_SYSTEMS = ["whisperspec:none", "whisperspec", "transformers", "faster-whisper:int8",
                   "faster-whisper:float32"]


def rotation(names: list[str], index: int) -> list[str]:
    """The order systems run in for utterance `index`: each system leads in turn."""
    shift = index % len(names)
    return names[shift:] + names[:shift]


def evaluate(utterances, systems: dict, repeats: int = 1, progress: bool = True) -> dict[str, list[Output]]:
    for system in systems.values():  # warm-up: first-call costs (allocations, kernels) not counted
        system.transcribe(utterances[0])
    outputs = {name: [] for name in systems}
    for index, utterance in enumerate(tqdm(utterances, desc="evaluating", disable=not progress)):
        runs = {name: [] for name in systems}
        for _ in range(repeats):
            for name in rotation(list(systems), index):
                runs[name].append(systems[name].transcribe(utterance))
        for name, outs in runs.items():
            median = statistics.median(o.seconds for o in outs)
            outputs[name].append(Output(outs[0].text, median, outs[0].tokens, outs[0].stats))
    return outputs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="whisperspec evaluate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="asterisk-en", help="a built-in set (asterisk-en, tuxpaint-fr, codec2-en, "
                                                                  "...: docs/DATASETS.md), a .jsonl manifest or a "
                                                                  "folder with .txt sidecars")
    parser.add_argument("--systems", nargs="+", default=DEFAULT_SYSTEMS)
    parser.add_argument("--model", default="base")
    parser.add_argument("--out", type=Path, default=Path("eval"))
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)

    try:  # every spec checked before anything loads
        for spec in args.systems:
            parse_system_spec(spec)
    except SpecError as error:
        print(f"whisperspec evaluate: --systems: {error}", file=sys.stderr)
        return 2
    try:
        utterances = load_dataset(args.dataset, limit=args.limit)
    except (ValueError, FileNotFoundError) as error:  # an unknown name, a package not installed
        print(f"whisperspec evaluate: --dataset: {error}", file=sys.stderr)
        return 2
    systems = {}
    try:
        for spec in args.systems:
            systems[spec] = build_system(spec, args.model)
        outputs = evaluate(utterances, systems, args.repeats, progress=not args.quiet)
    except ValueError as error:  # a combination that loads but cannot run (an assistant's tokenizer)
        if len(systems) == len(args.systems):
            raise
        print(f"whisperspec evaluate: --systems: {error}", file=sys.stderr)
        return 2
    finally:
        for system in systems.values():
            if isinstance(system, FasterWhisperSystem):
                system.close()
    own_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    peaks = {name: system.peak_rss_mb if isinstance(system, FasterWhisperSystem) else own_peak
             for name, system in systems.items()}
    summary = summarize(utterances, outputs, peaks)
    header = (f"# whisperspec evaluate: {args.dataset}, {len(utterances)} utterances "
              f"({sum(u.duration or 0 for u in utterances):.0f} s), model {args.model}, repeats {args.repeats}")
    paths = write_report(args.out, utterances, outputs, summary, header)
    print(paths["md"].read_text())
    print("written:", ", ".join(str(p) for p in paths.values()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
