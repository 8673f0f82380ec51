"""`whisperspec bench-vad`: what VAD does to speed and WER on long recordings with pauses.

    whisperspec bench-vad --files 4 --minutes 3 --pauses 2,8 --noise 0.003 --out eval-vad/

The recordings are Asterisk prompts joined into multi-minute files with pauses of room noise
(`asterisk.long_form_with_pauses`). The same model transcribes each file without and with
`--vad`, interleaved as `whisperspec evaluate` does (the order alternates, a first file warms both
up); the report is evaluate's (WER, latency, RTF, speed-up), followed by how much audio VAD kept
and what finding it cost.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from whisperspec import defaults


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="whisperspec bench-vad", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=4, help="long recordings to build (default %(default)s)")
    parser.add_argument("--minutes", type=float, default=3.0, help="of prompts per recording (default %(default)s)")
    parser.add_argument("--pauses", default="2,8", help="MIN,MAX seconds of each pause (default %(default)s)")
    parser.add_argument("--noise", type=float, default=0.003, help="RMS of the pauses' noise (default %(default)s)")
    parser.add_argument("--model", default=defaults.MODEL)
    parser.add_argument("--draft", default=defaults.DRAFT, help="DRAFT[@LOOKAHEAD] for both runs (default %(default)s)")
    parser.add_argument("--beam-size", type=int, default=defaults.BEAM_SIZE)
    parser.add_argument("--repeats", type=int, default=1, help="times each file is transcribed (median kept)")
    parser.add_argument("--out", type=Path, default=Path("eval-vad"))
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    try:
        low, high = (float(x) for x in args.pauses.split(","))
        if not 0 <= low <= high or args.files < 1 or args.minutes <= 0 or args.noise < 0:
            raise ValueError
    except ValueError:
        print("whisperspec bench-vad: --pauses MIN,MAX (0 <= MIN <= MAX), --files >= 1, --minutes > 0, --noise >= 0",
              file=sys.stderr)
        return 2

    from whisperspec.evaluation.asterisk import long_form_with_pauses
    from whisperspec.evaluation.report import speedups, summarize, write_report
    from whisperspec.evaluation.runner import evaluate
    from whisperspec.evaluation.systems import WhisperspecSystem
    from whisperspec.spec import SpecError
    from whisperspec.options import parse_draft_spec

    try:
        draft = parse_draft_spec(args.draft)
    except SpecError as error:
        print(f"whisperspec bench-vad: --draft: {error}", file=sys.stderr)
        return 2
    utterances = long_form_with_pauses("en", args.minutes, args.files, (low, high), args.noise)
    plain, with_vad = f"whisperspec:{draft}", f"whisperspec:{draft}+vad"
    systems = {name: WhisperspecSystem(name, args.model, draft, vad=vad, beam_size=args.beam_size)
               for name, vad in ((plain, False), (with_vad, True))}
    outputs = evaluate(utterances, systems, args.repeats, progress=not args.quiet)
    summary = summarize(utterances, outputs, {})
    audio = sum(u.duration for u in utterances)
    header = (f"# whisperspec bench-vad: {len(utterances)} files ({audio:.0f} s), pauses {low:g}-{high:g} s of "
              f"noise at RMS {args.noise:g}, model {args.model}, draft {draft}, beam {args.beam_size}, "
              f"repeats {args.repeats}")
    paths = write_report(args.out, utterances, outputs, summary, header)
    print(paths["md"].read_text())
    ratio = speedups(outputs[plain], outputs[with_vad])
    print(f"with VAD: {ratio['total']:.2f}x as fast in all (median per file {ratio['median']:.2f}x); "
          f"WER {summary[plain]['wer']:.2%} without, {summary[with_vad]['wer']:.2%} with")
    print(_what_vad_kept(systems[with_vad].transcriber.speech_detector, utterances))
    print("written:", ", ".join(str(p) for p in paths.values()))
    return 0


def _what_vad_kept(detector, utterances) -> str:
    """Speech VAD keeps of the audio, and the time finding it takes (measured here, on its own)."""
    from whisperspec.audio import load_audio
    from whisperspec.vad import SpeechMap

    kept = seconds = audio = 0.0
    for utterance in utterances:
        samples = load_audio(utterance.audio)
        started = time.perf_counter()
        kept += SpeechMap(detector.regions(samples)).speech_seconds
        seconds += time.perf_counter() - started
        audio += len(samples) / 16000
    return (f"VAD kept {kept:.0f} s of {audio:.0f} s ({kept / audio:.0%}); finding the speech took {seconds:.2f} s "
            f"(RTF {seconds / audio:.4f})")


if __name__ == "__main__":
    raise SystemExit(main())
