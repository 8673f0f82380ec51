"""`whisperspec bench-longform`: the decode phase of whole files, per drafter, against greedy.

    whisperspec bench-longform --data codec2-en --drafts none,auto,trained,my-draft.safetensors --repeats 3

Each drafter gets a transcriber of its own in this one process (same model, same compute type);
every file is transcribed by each in turn, the order rotating between repeats, after one untimed
warm-up file each. Long-form as users run it: timestamps, previous-text prompts, temperature
fallback. Printed per drafter: the decoder's time (`--stats`' decoder ms: the encoder and the
audio are excluded) and the whole transcription's, medians over the repeats summed over the files;
their ratios to the first drafter given (`none`: greedy); acceptance, tokens per verify pass and
the draft's cost per drafted token as a share of a plain step; and whether every file's tokens
were those of the first drafter (speculation must change none). Last, the decoder's share of the
first drafter's whole transcription, and the end-to-end speed-up it leaves any draft at most.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from whisperspec import defaults


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="whisperspec bench-longform", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="a data set name (docs/DATASETS.md), a folder or a .jsonl manifest")
    parser.add_argument("--limit", type=int, default=None, help="its first N files")
    parser.add_argument("--drafts", default="none,auto", help="comma-separated DRAFT[@LOOKAHEAD] (first: the reference)")
    parser.add_argument("--model", default=defaults.MODEL)
    parser.add_argument("--compute-type", default=defaults.COMPUTE_TYPE)
    parser.add_argument("--language", default=None, help="default: detected per file")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    from whisperspec.bench import checked_data
    from whisperspec.bench.decoder import host_description
    from whisperspec.transcribe import Transcriber

    drafts = args.drafts.split(",")
    files = [u.audio for u in checked_data(parser, args.data, args.limit, drafts, "--drafts")]
    transcribers = {d: Transcriber(model=args.model, draft=d, compute_type=args.compute_type, language=args.language)
                    for d in drafts}
    for transcriber in transcribers.values():
        transcriber.transcribe(files[0])  # untimed: compiling, building, first-touch memory
    decoder_ms = {d: [[] for _ in files] for d in drafts}
    total_ms = {d: [[] for _ in files] for d in drafts}
    tokens, stats = {}, {d: [] for d in drafts}
    for repeat in range(args.repeats):
        order = drafts[repeat % len(drafts):] + drafts[:repeat % len(drafts)]
        for i, path in enumerate(files):
            for d in order:
                started = time.perf_counter()
                result = transcribers[d].transcribe(path)
                total_ms[d][i].append(1000 * (time.perf_counter() - started))
                decoder_ms[d][i].append(result.stats.decoder_ms)
                tokens[d, i] = [t for s in result.segments for t in s.tokens]
                if repeat == 0:
                    stats[d].append(result.stats.speculation)
    runtime = transcribers[drafts[0]].runtime
    print(f"{args.data}: {len(files)} files, {args.repeats} repeats, compute type {runtime.compute_type} "
          f"(decoder {runtime.decoder_compute_type})\n{host_description(runtime)}")
    reference = drafts[0]
    base_decoder = sum(statistics.median(m) for m in decoder_ms[reference])
    base_total = sum(statistics.median(m) for m in total_ms[reference])
    print(f"{'draft':<24} {'decoder s':>9} {'ratio':>6} {'total s':>8} {'ratio':>6} {'accepted':>8} "
          f"{'tokens/pass':>11} {'draft/step':>10}  same tokens")
    plain_step = _plain_step_seconds(stats[reference])
    for d in drafts:
        decoder = sum(statistics.median(m) for m in decoder_ms[d])
        total = sum(statistics.median(m) for m in total_ms[d])
        proposed = sum(s.proposed for s in stats[d])
        accepted = sum(s.accepted for s in stats[d])
        passes = sum(s.target_passes for s in stats[d])
        emitted = sum(s.emitted for s in stats[d])
        draft_seconds = sum(s.draft_seconds for s in stats[d])
        per_token = draft_seconds / proposed / plain_step if proposed and plain_step else 0.0
        same = all(tokens[d, i] == tokens[reference, i] for i in range(len(files)))
        print(f"{d:<24} {decoder / 1000:9.2f} {base_decoder / decoder:6.2f} {total / 1000:8.2f} {base_total / total:6.2f} "
              f"{accepted / proposed if proposed else 0:8.1%} {emitted / passes if passes else 0:11.2f} "
              f"{per_token:10.3f}  {'yes' if same else 'NO'}")
    # What the decode phase is of the whole bounds what any draft can do end to end: were the
    # decoder free, the rest (audio, features, encoder, segmenting) would still take its time.
    if base_total > base_decoder:
        print(f"the decoder is {base_decoder / base_total:.0%} of {reference}'s whole transcription: a draft "
              f"that cost nothing and made the decoder free would make it {base_total / (base_total - base_decoder):.2f}x "
              f"faster at most")
    return 0


def _plain_step_seconds(stats: list) -> float:
    """A plain step's time from greedy's rounds (all of them plain steps)."""
    rounds = sum(s.rounds for s in stats)
    return sum(s.verify_seconds for s in stats) / rounds if rounds else 0.0


if __name__ == "__main__":
    sys.exit(main())
