"""When decoding pays its one-off costs: compiling a decoder's pass, screening the head, building a
drafter. `WarmUp` is the one place that decides; the decoders, the head and the drafter selector
ask it.

Each cost repays itself only over enough work, and the length of the work is seldom known. Not
knowing it, a cost is paid once the work done has cost about what paying it would (the ski-rental
rule: never more than about twice the best choice made knowing the length: a short file never pays
a cost it cannot win back, a long one loses at most that cost again). Told what is coming (`expect`:
the tokens an input of its size emits, about), a cost the work ahead repays is paid at once.
The thresholds are in units of the work they save; what each cost measured: docs/BENCHMARKS.md.
"""

from __future__ import annotations

from dataclasses import dataclass

# Compiling a pass costs what the compiled pass saves over several dozen eager ones: a decoder runs
# eager until the interpreter has cost about that (COMPILE_AFTER_PASSES), or compiles at once when
# the passes expected ahead repay it (COMPILE_REPAID_PASSES).
COMPILE_AFTER_PASSES = 90
COMPILE_REPAID_PASSES = 50
# Screening the head costs what its full reading costs in a few hundred plain steps.
SCREEN_AFTER_STEPS = 400
# A high estimate of the tokens a drafted round emits (so passes ahead are not overcounted); from
# long files with `auto` (docs/BENCHMARKS-HISTORY.md, session 33).
TOKENS_PER_DRAFTED_PASS = 3


@dataclass
class WarmUp:
    """What decoding has ahead and behind, for one model (and the decoders that share its work).

    compile_after: eager passes a decoder runs before it compiles (0: at its first pass; None:
    never, a benchmark's or a test's choice); set to 0 once the work ahead repays compiling."""

    compile_after: int | None = COMPILE_AFTER_PASSES
    passes_ahead: int = 0  # main decoder passes the work ahead is expected to run
    plain_steps_ahead: int = 0  # of those, plain steps (one token a pass), where known
    plain_steps: int = 0  # plain steps of greedy decoding run so far
    tokens_ahead: int = 0  # tokens the work ahead is expected to emit, less those emitted since

    def expect(self, tokens: int, drafted: bool) -> None:
        """An input expected to emit about `tokens` joins the work ahead, decoded with a drafter
        (`drafted`: at least a pass per TOKENS_PER_DRAFTED_PASS tokens; how many of them are plain
        steps is the drafter's choice, not known ahead) or without (a plain step a token)."""
        self.tokens_ahead += tokens
        self.passes_ahead += tokens // TOKENS_PER_DRAFTED_PASS if drafted else tokens
        self.plain_steps_ahead += 0 if drafted else tokens
        if self.passes_ahead >= COMPILE_REPAID_PASSES and self.compile_after is not None:
            self.compile_after = 0

    def decoded(self, passes: int, plain_steps: int) -> None:
        """Greedy decoding ran this many passes of the main decoder, this many of them plain steps."""
        self.passes_ahead = max(self.passes_ahead - passes, 0)
        self.plain_steps += plain_steps
        self.plain_steps_ahead = max(self.plain_steps_ahead - plain_steps, 0)

    def emitted(self, tokens: int) -> None:
        """A round emitted this many tokens: no longer ahead."""
        self.tokens_ahead = max(self.tokens_ahead - tokens, 0)

    def compiles(self, eager_passes: int) -> bool:
        """Whether a decoder that has run `eager_passes` passes eager compiles its pass now."""
        return self.compile_after is not None and eager_passes > self.compile_after

    def screens(self) -> bool:
        """Whether greedy decoding's plain steps, so far or expected ahead, repay screening the head."""
        return max(self.plain_steps, self.plain_steps_ahead) >= SCREEN_AFTER_STEPS

    def repays(self, cost: float, saved: float, saving_per_token: float) -> bool:
        """Whether a drafter that costs `cost` (in plain steps) to build is built now: it would have
        saved `saved` plain steps so far, and saves `saving_per_token` of a step on each token ahead."""
        return saved + saving_per_token * self.tokens_ahead >= cost
