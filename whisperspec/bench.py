"""`whisperspec bench`: where decoding time goes, measured side by side in one process.

1. verify cost: one decoder pass over n = 1..9 new tokens (the price of checking a draft);
2. decode phase, per drafter: the same encoded windows decoded by plain greedy and by each drafter,
   interleaved, repeated, medians; tokens compared with plain greedy (lossless check);
3. batched: B windows decoded together, plain vs speculative.
End-to-end comparisons with transformers and faster-whisper live in `whisperspec evaluate`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from whisperspec.audio import N_FRAMES, N_SAMPLES, load_audio, log_mel_spectrogram
from whisperspec.drafting import make_drafter
from whisperspec.speculative.lookahead import make_lookahead
from whisperspec.transcribe import Transcriber
from whisperspec.whisper.decode import DecodeOptions, WindowDecoder

DEFAULT_CLIPS = Path(__file__).resolve().parents[1] / "tests" / "data"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="whisperspec bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="base")
    parser.add_argument("--audio", nargs="*", type=Path, help="audio files (default: tests/data/*.flac)")
    parser.add_argument("--drafts", default="int8,early-exit,ngram", help="comma-separated drafter specs")
    parser.add_argument("--lookahead", default="4")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=0, help="also time batched decoding of this many windows")
    parser.add_argument("--language", default="en")
    args = parser.parse_args(argv)

    transcriber = Transcriber(args.model)
    runtime = transcriber.runtime
    paths = args.audio or sorted(DEFAULT_CLIPS.glob("*.flac"))
    mels = [log_mel_spectrogram(load_audio(p), runtime.n_mels, padding=N_SAMPLES)[None, :, :N_FRAMES] for p in paths]
    windows = [runtime.encode(m) for m in mels]
    options = DecodeOptions(language=args.language, temperatures=(0.0,))
    print(f"# whisperspec bench: model {args.model}, {len(paths)} clips, {torch.get_num_threads()} threads\n")
    print_verify_cost(runtime, windows[0])
    drafters = {"none": None, **{spec: make_drafter(spec, runtime) for spec in args.drafts.split(",") if spec}}
    print_decode_phase(runtime, windows, options, drafters, args.lookahead, args.repeats)
    if args.batch:
        print_batched(runtime, mels, options, drafters, args.lookahead, args.batch)
    return 0


def median_ms(run, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def print_verify_cost(runtime, window) -> None:
    decoder = runtime.decoder
    decoder.start(window.hidden)
    decoder.forward(torch.full((1, 20), runtime.special.sot))
    tokens = torch.full((1, 9), 440)

    def run(n):
        decoder.forward(tokens[:, :n])
        decoder.rollback(20)

    costs = {n: median_ms(lambda: run(n), 15) for n in range(1, 10)}
    print("## Verify cost: one decoder pass over n new tokens\n")
    print("| n | " + " | ".join(str(n) for n in costs) + " |")
    print("|---|" + "---|" * len(costs))
    print("| ms | " + " | ".join(f"{ms:.1f}" for ms in costs.values()) + " |\n")


def print_decode_phase(runtime, windows, options, drafters: dict, lookahead: str, repeats: int) -> None:
    times = {name: [] for name in drafters}
    tokens, stats = {}, {name: [] for name in drafters}
    for repeat in range(repeats + 1):  # the first round warms up and is not counted
        for index, window in enumerate(windows):
            names = list(drafters)
            names = names[repeat % len(names):] + names[:repeat % len(names)]  # rotate: drift hits all alike
            for name in names:
                decoder = WindowDecoder(runtime, drafters[name], make_lookahead(lookahead) if drafters[name] else None)
                start = time.perf_counter()
                result = decoder.decode(window, options)
                elapsed = time.perf_counter() - start
                if repeat:
                    times[name].append((index, elapsed))
                    stats[name].append(result.stats)
                tokens[name, index] = result.tokens
    plain = _per_window_median(times["none"])
    n_tokens = sum(len(tokens["none", i]) for i in range(len(windows)))
    print(f"## Decode phase (encoder excluded), lookahead {lookahead}, median of {repeats}\n")
    print("| drafter | decode s | tokens/s | speed-up | acceptance | tokens/pass | identical |")
    print("|---|---|---|---|---|---|---|")
    for name in drafters:
        per_window = _per_window_median(times[name])
        total = sum(per_window.values())
        accepted = sum(s.accepted for s in stats[name]) / max(1, sum(s.proposed for s in stats[name]))
        per_pass = sum(s.emitted for s in stats[name]) / max(1, sum(s.rounds for s in stats[name]))
        same = sum(tokens[name, i] == tokens["none", i] for i in range(len(windows)))
        print(f"| {name} | {total:.2f} | {n_tokens / total:.1f} | {sum(plain.values()) / total:.2f}x | "
              f"{accepted:.1%} | {per_pass:.2f} | {same}/{len(windows)} |")
    print()


def _per_window_median(samples) -> dict:
    by_window = {}
    for index, seconds in samples:
        by_window.setdefault(index, []).append(seconds)
    return {index: statistics.median(values) for index, values in by_window.items()}


def print_batched(runtime, mels, options, drafters: dict, lookahead: str, batch: int) -> None:
    mel = torch.cat([mels[i % len(mels)] for i in range(batch)])
    print(f"## Batched decoding: {batch} windows together (encoder excluded)\n")
    print("| drafter | batch decode s | speed-up vs batched plain | identical to batch-1 |")
    print("|---|---|---|---|")
    window = runtime.encode(mel)
    singles = [WindowDecoder(runtime).decode(runtime.encode(m), options).tokens for m in mels]
    plain_seconds = None
    for name, drafter in drafters.items():
        decoder = WindowDecoder(runtime, drafter, make_lookahead(lookahead) if drafter else None)
        decoder.decode_batch(window, options)  # warm-up
        start = time.perf_counter()
        rows = decoder.decode_batch(window, options)
        seconds = time.perf_counter() - start
        plain_seconds = plain_seconds or seconds
        same = sum(r.tokens == singles[i % len(mels)] for i, r in enumerate(rows))
        print(f"| {name} | {seconds:.2f} | {plain_seconds / seconds:.2f}x | {same}/{batch} |")
    print()


if __name__ == "__main__":
    raise SystemExit(main())
