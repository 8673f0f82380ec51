"""How many tokens to draft next round.

Each policy answers `k()` before a round and `update(verdict, draft_s, verify_s)` after it.
`min_confidence` is passed to the drafter, which stops early when its own top probability drops
below it (the confidence policy; 0 for the others).
"""

from __future__ import annotations

from dataclasses import dataclass

from whisperspec import defaults
from whisperspec.speculative.protocols import Verdict
from whisperspec.spec import LookaheadSpec, parse_lookahead


@dataclass
class Fixed:
    lookahead: int
    min_confidence: float = 0.0

    def k(self) -> int:
        return self.lookahead

    def update(self, verdict: Verdict, draft_seconds: float, verify_seconds: float) -> None:
        pass


@dataclass
class Heuristic:
    """transformers' "heuristic" schedule: +2 after a fully accepted draft, -1 otherwise."""

    lookahead: int = defaults.HEURISTIC_START
    max_lookahead: int = defaults.HEURISTIC_MAX
    min_confidence: float = 0.0

    def k(self) -> int:
        return self.lookahead

    def update(self, verdict: Verdict, draft_seconds: float, verify_seconds: float) -> None:
        if verdict.proposed and verdict.accepted == verdict.proposed:
            self.lookahead = min(self.lookahead + 2, self.max_lookahead)
        else:
            self.lookahead = max(self.lookahead - 1, 1)


@dataclass
class Confidence(Fixed):
    """Draft up to `lookahead` tokens but stop as soon as the draft is unsure of its next token."""

    lookahead: int = defaults.CONFIDENCE_MAX_LOOKAHEAD
    min_confidence: float = defaults.CONFIDENCE_THRESHOLD


class CostModel:
    """Pick k to maximise expected tokens per second from measured acceptance and costs.

    With per-token acceptance rate a, a round drafting k tokens emits (1 - a^(k+1)) / (1 - a)
    tokens on average and costs k * draft_step + verify(k); verify(k) is fitted as a line. k = 0
    (a plain step) wins when the draft is too often wrong for its cost; then a round drafts again
    every `probe_every` rounds so that acceptance keeps being measured and speculation resumes
    when the audio gets easier. Estimates are exponential moving averages: the choice follows the
    audio.
    """

    min_confidence = 0.0
    # Prior slope of the verify line, per drafted token, as a share of a one-token pass (the order
    # of what a verify pass costs on base: docs/BENCHMARKS.md). Before any plain step has been
    # timed, the intercept comes from passes over several tokens; without a slope they would make
    # a plain step look as dear as a verify pass and k = 0 could never win.
    VERIFY_SLOPE = 0.12

    def __init__(self, max_lookahead: int = defaults.COST_MAX_LOOKAHEAD, initial: int = defaults.COST_INITIAL,
                 smoothing: float = 0.2, probe_every: int = 8):
        self.max_lookahead, self.current, self.smoothing = max_lookahead, initial, smoothing
        self.probe_every, self.plain_rounds = probe_every, 0
        # per-token acceptance = accepted / (accepted + rejections), both averaged over recent rounds
        self.accepted_avg, self.trials_avg = 0.7, 1.0
        self.draft_step = None  # seconds per drafted token
        self.verify_base = None  # seconds per verify pass at k=0 ...
        self.verify_per_token = 0.0  # ... plus this per drafted token

    def k(self) -> int:
        return self.current

    def update(self, verdict: Verdict, draft_seconds: float, verify_seconds: float) -> None:
        s, k = self.smoothing, verdict.proposed
        if k:
            self.accepted_avg = (1 - s) * self.accepted_avg + s * verdict.accepted
            self.trials_avg = (1 - s) * self.trials_avg + s * (verdict.accepted + (verdict.accepted < k))
            per_token = draft_seconds / k
            self.draft_step = per_token if self.draft_step is None else (1 - s) * self.draft_step + s * per_token
        if self.verify_base is None:
            self.verify_base = verify_seconds / (1 + self.VERIFY_SLOPE * k)
            self.verify_per_token = self.VERIFY_SLOPE * self.verify_base
        else:  # split the error between the intercept and the slope of the verify-cost line
            error = verify_seconds - (self.verify_base + self.verify_per_token * k)
            self.verify_base += s * error / (1 + k)
            self.verify_per_token = max(0.0, self.verify_per_token + s * error * k / (1 + k * k))
        if self.draft_step is not None:
            self.current = max(range(self.max_lookahead + 1), key=self.tokens_per_second)
            if self.current:
                self.plain_rounds = 0
            else:  # probe now and then; after a fully accepted draft at once (the averages lag)
                fully_accepted = k and verdict.accepted == k
                self.plain_rounds = self.probe_every if fully_accepted else self.plain_rounds + 1
                if self.plain_rounds >= self.probe_every:
                    self.current = max(range(1, self.max_lookahead + 1), key=self.tokens_per_second)
                    self.plain_rounds = 0

    @property
    def acceptance(self) -> float:
        return self.accepted_avg / self.trials_avg

    def tokens_per_second(self, k: int) -> float:
        a = min(self.acceptance, 0.999)
        expected_tokens = (1 - a ** (k + 1)) / (1 - a)
        cost = k * self.draft_step + self.verify_base + self.verify_per_token * k
        return expected_tokens / cost


def make_lookahead(spec: LookaheadSpec | str | int | None, default: str = defaults.LOOKAHEAD):
    """The policy a LOOKAHEAD names (`whisperspec.spec.LookaheadSpec`, or its text: 'K',
    'heuristic[:K]', 'confidence[:T]' or 'cost'); None takes `default`; a policy object passes
    through."""
    if spec is not None and not isinstance(spec, (LookaheadSpec, str, int)):
        return spec
    spec = parse_lookahead(default if spec is None else spec)
    if spec.policy == "fixed":
        return Fixed(spec.value)
    if spec.policy == "heuristic":
        return Heuristic() if spec.value is None else Heuristic(spec.value)
    if spec.policy == "confidence":
        return Confidence() if spec.value is None else Confidence(min_confidence=spec.value)
    return CostModel()
