"""`whisperspec bench`: where decoding time goes, measured side by side in one process.

1. verify cost: one decoder pass over n = 1..9 new tokens (the price of checking a draft);
2. decode phase, per drafter: the same encoded windows decoded by plain greedy and by each drafter,
   interleaved, repeated, medians; tokens compared with plain greedy (lossless check); then where
   the time went (draft pass, verify pass, per-window fixed costs) and the speed-up those measured
   costs would allow with every drafted token accepted, or with drafting free;
3. draft trees, for each draft model at a fixed lookahead: the tokens a round would keep with
   trees of its candidates (counted from its ranks of the greedy tokens) and what they would give
   at the pass costs measured here (`whisperspec.bench.trees`);
4. batched: B windows decoded together, plain vs speculative;
5. argmax flips (`--flips`): the plain greedy tokens of each window re-scored by passes over k
   tokens at a time, as the verifier scores them, against one-token steps (near-tie numerics).
End-to-end comparisons with transformers and faster-whisper live in `whisperspec evaluate`.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from whisperspec.audio import N_FRAMES, N_SAMPLES, AudioError, load_audio, log_mel_spectrogram
from whisperspec.resources import bench_clips
from whisperspec import defaults
from whisperspec.spec import SpecError, parse_lookahead
from whisperspec.options import parse_draft_spec
from whisperspec.whisper.drafters import make_drafter
from whisperspec.speculative.lookahead import make_lookahead
from whisperspec.speculative.warmup import WarmUp
from whisperspec.transcribe import Transcriber
from whisperspec.bench.trees import draft_ranks, interleaved_costs, pass_costs, print_trees
from whisperspec.speculative.drafters.model import ModelDrafter
from whisperspec.whisper.decode import DecodeOptions, WindowDecoder, forced_prefix
from whisperspec.kernels.processor import (bfloat16_decoder_pays, bfloat16_is_fast, instruction_sets, onednn_isa_cap,
                                           processor_name)
from whisperspec.options import COMPUTE_TYPES
from whisperspec.whisper.model import WhisperRuntime
from whisperspec.whisper.rules import WhisperLogitFilter



def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="whisperspec bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=defaults.MODEL)
    parser.add_argument("--compute-type", choices=COMPUTE_TYPES, default=defaults.COMPUTE_TYPE,
                        help="as `whisperspec transcribe`'s (bfloat16 also runs the decoder on bfloat16 where "
                             "that is the faster)")
    parser.add_argument("--decoder-compute-type", choices=("float32", "bfloat16"), default=None,
                        help="the decoder's per-token work, whatever the processor would choose (default: as "
                             "--compute-type resolves here): to measure the choice")
    parser.add_argument("--audio", nargs="*", type=Path,
                        help="audio files (default: the six bundled clips, whisperspec/assets/clips)")
    parser.add_argument("--drafts", default="auto,trained,int8,early-exit,ngram",
                        help="comma-separated DRAFT[@LOOKAHEAD] specs (auto@2,trained@cost)")
    parser.add_argument("--lookahead", default=defaults.LOOKAHEAD, help="for drafts given without @LOOKAHEAD")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=0, help="also time batched decoding of this many windows")
    parser.add_argument("--batch-lookahead", default=None,
                        help="comma-separated lookaheads to try batched (default: --lookahead); the accepted "
                             "length per row falls with the batch while a verify pass grows with it")
    parser.add_argument("--language", default="en")
    parser.add_argument("--flips", action="store_true",
                        help="also count argmax flips between one-token steps and k-token passes (k = 2..8)")
    parser.add_argument("--target", type=float, default=2.5,
                        help="a decode-phase speed-up: the time split says what acceptance each drafter "
                             "would need for it at the costs measured (default 2.5)")
    args = parser.parse_args(argv)
    try:  # every spec checked before anything loads
        entries = [parse_draft_spec(entry) for entry in filter(None, args.drafts.split(","))]
        for lookahead in [args.lookahead, *(args.batch_lookahead or "").split(",")]:
            if lookahead:
                parse_lookahead(lookahead)
    except SpecError as error:
        print(f"whisperspec bench: {error}", file=sys.stderr)
        return 2

    transcriber = Transcriber(args.model, compute_type=args.compute_type, draft="none")  # drafters: below
    runtime = transcriber.runtime
    if args.decoder_compute_type and args.decoder_compute_type != runtime.decoder_compute_type:
        runtime = WhisperRuntime.from_bundle(transcriber.bundle, runtime.compute_type, args.decoder_compute_type)
    paths = args.audio or bench_clips()
    try:
        mels = [log_mel_spectrogram(load_audio(p), runtime.n_mels, padding=N_SAMPLES)[None, :, :N_FRAMES]
                for p in paths]
    except AudioError as error:  # it names the file
        print(f"whisperspec bench: --audio: {error}", file=sys.stderr)
        return 2
    windows = [runtime.encode(m) for m in mels]
    options = DecodeOptions(language=args.language, temperatures=(0.0,))
    print(f"# whisperspec bench: model {args.model}, compute type {runtime.compute_type} (decoder "
          f"{runtime.decoder_compute_type}), {len(paths)} clips, {torch.get_num_threads()} threads\n")
    print(host_description(runtime) + "\n")
    print_verify_cost(runtime, windows[0])
    if args.flips:
        print_flips(runtime, windows, options)
    drafters, lookaheads = {"none": None}, {"none": None}
    built = {}
    for entry in entries:
        spec = entry.drafter
        built[spec] = built.get(spec) or make_drafter(spec, runtime)  # one drafter, several lookaheads
        # as text, whether written after @ or given by --lookahead: the tables print it, the
        # tree count reads a fixed one as its depth
        drafters[str(entry)], lookaheads[str(entry)] = built[spec], str(entry.lookahead or args.lookahead)
    phase = print_decode_phase(runtime, windows, options, drafters, lookaheads, args.repeats, args.target)
    print_draft_trees(runtime, windows, options, drafters, lookaheads, phase)
    if args.batch:
        batch_lookaheads = (args.batch_lookahead or args.lookahead).split(",")
        print_batched(runtime, mels, options, {"none": None, **built}, batch_lookaheads, args.batch, args.repeats)
    return 0


def host_description(runtime) -> str:
    """The processor and the kernels the main decoder runs on it (`whisperspec.kernels.exact_rows`)."""
    decoder = runtime.decoder
    features = ", ".join(name for name, present in (("bfloat16 fast", bfloat16_is_fast()),
                                                   ("AMX tiles", bfloat16_decoder_pays())) if present) or "float32 only"
    cap = f", oneDNN capped at {onednn_isa_cap()}" if onednn_isa_cap() else ""
    return (f"processor: {processor_name()}, {instruction_sets()} ({features}{cap}); main decoder rows kept apart in blocks of "
            f"{decoder.products.smallest}-{decoder.products.largest} rows a product (oneDNN), "
            f"{decoder.attention.smallest}-{decoder.attention.largest} queries an attention call "
            f"(torch's fused kernel), over {decoder.max_length} cached positions")


def verify_costs(runtime, window, widths=range(1, 10), repeats: int = 15) -> dict[int, float]:
    """Median ms of one main decoder pass over n new tokens after 20 cached ones, for each n in
    `widths`, the one-row pass compiled as the loop runs it on any input of some length."""
    decoder = runtime.decoder
    warmup, decoder.warmup = decoder.warmup, WarmUp(compile_after=0)
    decoder.start(window.hidden)
    decoder.forward(torch.full((1, 20), runtime.special.sot))

    def run(tokens):
        decoder.forward(tokens)
        decoder.rollback(20)

    costs = interleaved_costs(run, widths, repeats)
    decoder.warmup = warmup
    return {n: 1e3 * seconds for n, seconds in costs.items()}


def print_verify_cost(runtime, window) -> None:
    costs = verify_costs(runtime, window)
    print("## Verify cost: one decoder pass over n new tokens (full head)\n")
    print("| n | " + " | ".join(str(n) for n in costs) + " |")
    print("|---|" + "---|" * len(costs))
    print("| ms | " + " | ".join(f"{ms:.1f}" for ms in costs.values()) + " |")
    print("| / step | " + " | ".join(f"{ms / costs[1]:.2f}" for ms in costs.values()) + " |\n")


def print_decode_phase(runtime, windows, options, drafters: dict, lookaheads: dict, repeats: int,
                       target: float = 2.5) -> "DecodePhase":
    times = {name: [] for name in drafters}
    tokens, stats = {}, {name: [] for name in drafters}
    for repeat in range(repeats + 1):  # the first round warms up and is not counted
        for index, window in enumerate(windows):
            names = list(drafters)
            names = names[repeat % len(names):] + names[:repeat % len(names)]  # rotate: drift hits all alike
            for name in names:
                decoder = WindowDecoder(runtime, drafters[name],
                                        make_lookahead(lookaheads[name]) if drafters[name] else None)
                start = time.perf_counter()
                result = decoder.decode(window, options)
                elapsed = time.perf_counter() - start
                if repeat:
                    times[name].append((index, elapsed))
                    stats[name].append(result.stats)
                tokens[name, index] = result.tokens
    plain = _per_window_median(times["none"])
    n_tokens = sum(len(tokens["none", i]) for i in range(len(windows)))
    print(f"## Decode phase (encoder excluded), median of {repeats}\n")
    print("| drafter | lookahead | decode s | tokens/s | speed-up | acceptance | tokens/pass | identical |")
    print("|---|---|---|---|---|---|---|---|")
    for name in drafters:
        per_window = _per_window_median(times[name])
        total = sum(per_window.values())
        accepted = sum(s.accepted for s in stats[name]) / max(1, sum(s.proposed for s in stats[name]))
        per_pass = sum(s.emitted for s in stats[name]) / max(1, sum(s.rounds for s in stats[name]))
        same = sum(tokens[name, i] == tokens["none", i] for i in range(len(windows)))
        print(f"| {name.partition('@')[0]} | {lookaheads[name] or '-'} | {total:.2f} | {n_tokens / total:.1f} | "
              f"{sum(plain.values()) / total:.2f}x | {accepted:.1%} | {per_pass:.2f} | {same}/{len(windows)} |")
    print()
    fixed = print_time_split(drafters, lookaheads, times, stats, n_tokens, sum(plain.values()), target)
    tokens = {name: [tokens[name, i] for i in range(len(windows))] for name in drafters}
    return DecodePhase(tokens, stats, sum(plain.values()), fixed)


@dataclass
class DecodePhase:
    """What the decode phase measured, for the arithmetic after it (seconds over all the windows)."""

    tokens: dict[str, list[list[int]]]  # drafter -> each window's tokens
    stats: dict[str, list]  # drafter -> each timed decode's SpeculationStats
    plain: float  # plain greedy's decode time
    fixed: dict[str, float]  # drafter -> its time outside draft and verify passes


def tokens_per_round(acceptance: float, k: float) -> float:
    """Tokens a round emits on average when k tokens are drafted and each is accepted with
    probability `acceptance`, independently: the accepted prefix and the target's own token after
    it (Leviathan et al., 2023, eq. 1)."""
    if acceptance >= 1:
        return k + 1
    return (1 - acceptance ** (k + 1)) / (1 - acceptance)


def acceptance_needed(speedup: float, plain: float, fixed: float, n_tokens: int, round_seconds: float,
                      k: float) -> float | None:
    """The per-token acceptance at which `n_tokens` decoded in rounds of `round_seconds` each (k
    draft passes and a verify pass), plus `fixed` seconds, take `plain / speedup`; None where even
    every drafted token accepted would not get there."""
    budget = plain / speedup - fixed  # what the rounds may take
    needed = n_tokens * round_seconds / budget if budget > 0 else math.inf  # tokens a round
    if needed > k + 1:
        return None
    low, high = 0.0, 1.0
    for _ in range(50):  # tokens_per_round grows with the acceptance
        middle = (low + high) / 2
        low, high = (middle, high) if tokens_per_round(middle, k) < needed else (low, middle)
    return high


def print_time_split(drafters: dict, lookaheads: dict, times: dict, stats: dict, n_tokens: int, plain: float,
                     target: float = 2.5) -> dict[str, float]:
    """Where each drafter's decode time went, and the speed-ups its measured costs allow: with every
    drafted token accepted (the same draft and verify costs per pass), and with drafting free (the
    same passes). They bound what a better-trained or a cheaper draft of this kind could reach; the
    last column says what acceptance `target` would take at these costs. Returns each drafter's
    time outside its draft and verify passes."""
    print("## Time split (per-pass costs measured in the loop) and what they allow\n")
    print("| drafter | lookahead | draft ms/pass | verify ms/pass | verify / plain step | fixed ms/window | "
          f"if all accepted | if drafting were free | acceptance for {target:g}x |")
    print("|---|---|---|---|---|---|---|---|---|")
    plain_step, fixed_seconds = None, {}
    for name in drafters:
        s = stats[name]
        repeats = len(s) / max(1, len({i for i, _ in times[name]}))
        total = sum(seconds for _, seconds in times[name]) / repeats
        draft, verify = sum(x.draft_seconds for x in s) / repeats, sum(x.verify_seconds for x in s) / repeats
        rounds, passes = sum(x.rounds for x in s) / repeats, sum(x.draft_passes for x in s) / repeats
        fixed = total - draft - verify  # per window: cross-attention keys/values, prefix, text checks
        fixed_seconds[name] = fixed
        step, check = draft / max(passes, 1), verify / max(rounds, 1)
        k = sum(x.proposed for x in s) / max(1, sum(x.rounds for x in s))  # tokens drafted per round
        round_seconds = check + k * step  # k draft passes and a verify pass
        ideal = fixed + n_tokens / tokens_per_round(1.0, k) * round_seconds
        free = fixed + verify
        step_ms = f"{step * 1e3:.2f}" if passes else "-"
        needed = acceptance_needed(target, plain, fixed, n_tokens, round_seconds, k) if k else None
        needed_text = "-" if not k else "out of reach" if needed is None else f"{needed:.0%}"
        plain_step = plain_step or check  # "none" comes first: its passes are the plain steps
        print(f"| {name.partition('@')[0]} | {lookaheads[name] or '-'} | {step_ms} | {check * 1e3:.2f} | "
              f"{check / plain_step:.2f} | {fixed * 1e3 / (len(times[name]) / repeats):.1f} | {plain / ideal:.2f}x | "
              f"{plain / free:.2f}x | {needed_text} |")
    print()
    return fixed_seconds


def print_draft_trees(runtime, windows, options, drafters: dict, lookaheads: dict, phase: DecodePhase) -> None:
    """For each draft model run at a fixed lookahead: what trees of its candidates would give
    (`whisperspec.bench.trees`), from its ranks of plain greedy's tokens on these windows and the
    pass costs measured here."""
    chains = {name: int(lookaheads[name]) for name, drafter in drafters.items()
              if isinstance(drafter, ModelDrafter) and str(lookaheads[name]).isdigit()}
    if not chains:
        return
    special = runtime.special
    verify_pass = {n: ms / 1e3 for n, ms in verify_costs(runtime, windows[0], widths=range(1, 17), repeats=31).items()}
    print("## Draft trees: tokens a round keeps, counted from each draft's ranks of the greedy tokens\n")
    print("Verify passes over n tokens: " + ", ".join(f"{n}: {1e3 * s:.1f} ms" for n, s in verify_pass.items())
          + ". A tree's verify pass is costed as a pass over as many tokens (its mask aside), a depth's draft "
          "pass as a draft pass over that depth's nodes.\n")
    prefix = forced_prefix(special, [], options.language, options)
    rules = WhisperLogitFilter(special, len(prefix), options.timestamps, runtime.vocab_size)
    for name, k in chains.items():
        drafter = drafters[name]
        rank_lists = []
        for window, tokens in zip(windows, phase.tokens["none"]):
            runtime.decoder.start(window.hidden)  # a draft reads its cross-attention keys/values
            rank_lists.append(draft_ranks(drafter, window, prefix + tokens + [special.eot], len(prefix), rules))
        runtime.decoder.start(windows[0].hidden)
        draft_pass = pass_costs(drafter.model, windows[0], range(1, 9))
        s = phase.stats[name]
        rounds = max(1, sum(x.rounds for x in s))
        loop = {"tokens": sum(x.emitted for x in s) / rounds,
                "round": sum(x.draft_seconds + x.verify_seconds for x in s) / rounds}
        print_trees(name, rank_lists, loop, k, draft_pass, verify_pass, phase.plain, phase.fixed[name])


def _per_window_median(samples) -> dict:
    by_window = {}
    for index, seconds in samples:
        by_window.setdefault(index, []).append(seconds)
    return {index: statistics.median(values) for index, values in by_window.items()}


def print_batched(runtime, mels, options, drafters: dict, lookaheads: list[str], batch: int, repeats: int) -> None:
    mel = torch.cat([mels[i % len(mels)] for i in range(batch)])
    print(f"## Batched decoding: {batch} windows together (encoder excluded), median of {repeats}\n")
    print("| drafter | lookahead | batch decode s | speed-up vs batched plain | acceptance | tokens/pass | "
          "identical to batch-1 |")
    print("|---|---|---|---|---|---|---|")
    window = runtime.encode(mel)
    singles = [WindowDecoder(runtime).decode(runtime.encode(m), options).tokens for m in mels]
    runs = [(name, lookahead) for name, drafter in drafters.items() for lookahead in (lookaheads if drafter else ["-"])]
    times, results = {run: [] for run in runs}, {}
    for repeat in range(repeats + 1):  # the first round warms up and is not counted
        for name, lookahead in runs[repeat % len(runs):] + runs[:repeat % len(runs)]:  # rotate, as above
            drafter = drafters[name]
            decoder = WindowDecoder(runtime, drafter, make_lookahead(lookahead) if drafter else None)
            start = time.perf_counter()
            results[name, lookahead] = decoder.decode_batch(window, options)
            if repeat:
                times[name, lookahead].append(time.perf_counter() - start)
    plain_seconds = statistics.median(times[runs[0]])
    for run in runs:
        rows, seconds = results[run], statistics.median(times[run])
        same = sum(r.tokens == singles[i % len(mels)] for i, r in enumerate(rows))
        accepted = sum(r.stats.accepted for r in rows) / max(1, sum(r.stats.proposed for r in rows))
        per_pass = sum(r.stats.emitted for r in rows) / max(1, sum(r.stats.rounds for r in rows))
        print(f"| {run[0]} | {run[1]} | {seconds:.2f} | {plain_seconds / seconds:.2f}x | {accepted:.1%} | "
              f"{per_pass:.2f} | {same}/{batch} |")
    print()


@dataclass
class FlipCount:
    """One-token steps vs k-token passes over the same tokens, position by position."""

    positions: int = 0
    flips: int = 0  # positions whose filtered argmax differs
    max_difference: float = 0.0  # largest |logit difference| (finite logits)
    min_margin: float = float("inf")  # smallest top1 - top2 of the one-token scores
    at_risk: int = 0  # positions whose margin is within twice the largest difference seen

    def add(self, other: "FlipCount") -> None:
        self.positions += other.positions
        self.flips += other.flips
        self.max_difference = max(self.max_difference, other.max_difference)
        self.min_margin = min(self.min_margin, other.min_margin)
        self.at_risk += other.at_risk


@torch.inference_mode()
def count_flips(runtime, window, options, widths) -> dict[int, FlipCount]:
    """Decode `window` plainly, then score its tokens again with passes over `width` tokens.

    A verify pass computes the same logits as one-token steps in another summation order (other
    matrix shapes, the attention over several queries), so they can differ in the last bits; a
    near-tie argmax could then flip. Passes here take `width` tokens at a time from the plain
    tokens, as the verifier does when every draft token is accepted; each position is scored
    through the Whisper logit filter with the same preceding tokens, in both runs.
    """
    plain = WindowDecoder(runtime).decode(window, options)
    special, decoder = runtime.special, runtime.decoder
    prefix = special.prefix(plain.language, options.task, options.timestamps)
    fed = prefix[-1:] + plain.tokens  # row j predicts plain.tokens[j] (the last row: end-of-text)
    logit_filter = WhisperLogitFilter(special, len(prefix), options.timestamps, runtime.vocab_size)

    def scored(width: int) -> tuple[torch.Tensor, torch.Tensor]:
        decoder.start(window.hidden)
        if len(prefix) > 1:  # an English-only model with timestamps has <|sot|> alone
            decoder.forward(torch.tensor([prefix[:-1]]))
        logits = torch.cat([decoder.forward(torch.tensor([fed[i:i + width]]))[0]
                            for i in range(0, len(fed), width)])
        scores = torch.stack([logit_filter(prefix + plain.tokens[:j], row.to(torch.float32, copy=True))
                              for j, row in enumerate(logits)])
        return logits, scores

    step_logits, step_scores = scored(1)
    assert step_scores[:-1].argmax(dim=-1).tolist() == plain.tokens  # the re-scoring is plain decoding
    top2 = step_scores.topk(2, dim=-1).values
    margins = top2[:, 0] - top2[:, 1]
    counts = {}
    for width in widths:
        logits, scores = scored(width)
        difference = (logits - step_logits).abs().max().item()
        counts[width] = FlipCount(
            positions=len(fed), flips=int((scores.argmax(-1) != step_scores.argmax(-1)).sum()),
            max_difference=difference, min_margin=float(margins.min()),
            at_risk=int((margins <= 2 * difference).sum()))
    return counts


def print_flips(runtime, windows, options, widths=range(2, 9)) -> None:
    print("## Argmax flips: one-token steps vs k-token passes over the plain greedy tokens\n")
    print("| timestamps | pass width k | positions | argmax flips | max abs logit diff | "
          "smallest top1-top2 margin | positions with margin <= 2 x diff |")
    print("|---|---|---|---|---|---|---|")
    for timestamps in (False, True):
        totals = {width: FlipCount() for width in widths}
        for window in windows:
            for width, count in count_flips(runtime, window, replace(options, timestamps=timestamps), widths).items():
                totals[width].add(count)
        for width, t in totals.items():
            print(f"| {'on' if timestamps else 'off'} | {width} | {t.positions} | {t.flips} | "
                  f"{t.max_difference:.2e} | {t.min_margin:.4f} | {t.at_risk} |")
    print()


if __name__ == "__main__":
    raise SystemExit(main())
