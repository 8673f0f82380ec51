"""Choose, round by round, the drafter that is fastest on the text at hand — or none.

Which drafter pays depends on the input: a distilled draft is cheap and right on the speech it was
trained for, and wrong on another language; a self-draft (the target in int8) is right almost
everywhere but costs much of a target pass per token; prompt lookup costs nothing and pays only
where the text repeats. `SelectingDrafter` measures, for each candidate, how many tokens a round it
drafts emits and what drafting costs, and for the target what a pass checking n drafted tokens costs
(the same whoever drafted them); each round drafts with the candidate of the highest emitted-tokens-
per-second, or with none when a plain step (one target pass for one token) is expected to be faster
than all of them. A plain step is itself timed now and then (after `probe_every` rounds, then every
`max_probe_gap`): how much a pass over more tokens costs differs from one decoder to another, so
what drafting must beat is measured, not extrapolated. Costs are medians of recent rounds, since a
slow round (a first call, a collection pause) says nothing about the next one, and what a round
emits is an average over the candidate's rounds that forgets slowly (one round says little:
`_Rounds`). So it is never slower than plain decoding by more than its probes: a candidate not
chosen is tried again now and then (after `probe_every` rounds, doubling each time it loses, up to
`max_probe_gap`), since the text may have changed in its favour, as long as a round with every token
it drafts right would beat the leader (a probe is not free). Priors only rank candidates before they
are measured, and they are guesses (costs differ from machine to machine, acceptance from speech to
speech): every candidate that applies is measured once the input is long enough to repay building it
(`explore_after` times its build cost, in rounds), however poor its prior.

The first round of a candidate after another drafted pays for catching up where it keeps a cache of
its own (`Drafter.catches_up`: behind by whatever was decoded since it last drafted): that round
counts for what it emits but is not timed, or one dear catch-up would condemn a good candidate; a
probe of such a candidate therefore drafts two rounds, the second timed. One that never catches up
(prompt lookup, a draft in the target's own cache) is probed for one round, timed, as is its
first round after a switch; a candidate's very first drafting round (a compile) is never timed.

Candidates are built on first use, once the plain steps they would have saved pay for building
them (a model draft costs its load only where it can repay it: `WarmUp.repays`), and may decline a
sequence (`applies`: a draft trained on some languages only). Told how long the work ahead is
(`WarmUp.expect`: the tokens an input of that size emits, about), the selector counts the steps a candidate would
save over it too: a long input builds its candidates, and measures the ones never measured, at
once instead of after the rounds that would show it is long (the ski rental's price of not
knowing the length). A candidate that learns from what the target
verifies (`watches`) is told of every round once built, whoever drafts. Output is the verifier's
decision whatever drafts, so switching changes speed only.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Callable

import torch

from whisperspec.speculative.protocols import DraftContext, Drafter, Proposal, Verdict
from whisperspec.speculative.warmup import WarmUp

# What a verify pass over k drafted tokens costs on top of a plain step, per token, as a share of
# that step, for pass sizes not timed yet (and in the priors).
VERIFY_SLOPE = 0.12


@dataclass
class Candidate:
    name: str
    make: Callable[[], Drafter]  # built on first use
    # prior guesses, replaced by measurement after its first rounds: per-token acceptance, and the
    # cost of drafting one token as a share of a plain step
    acceptance: float = 0.5
    step_cost: float = 0.1
    build_cost: float = 0.0  # building it (loading, quantising), as a number of plain steps
    applies: Callable[[list[int]], bool] = field(default=lambda tokens: True)
    # once built, it is told of every round whoever drafts (a drafter that learns from what the
    # target verifies); on a sequence it does not apply to, without the target's scores
    watches: bool = False


class _Rounds:
    """What one candidate's rounds give and cost.

    Tokens emitted and drafted per round are ratios of sums that forget: by `memory` per round the
    candidate drafts, and by `gap_memory` per round it sat out (the text may have moved on since).
    What one round emits varies a lot (most rounds of a draft right on a third of its tokens emit
    one token, a few emit four), so an estimate needs many rounds; a probe after a long gap adds
    its two rounds to what is left of the old ones instead of replacing them (two unlucky rounds
    must not shut a good candidate out for the next hundred).
    Drafting seconds are the median of its recent timed rounds: a cost belongs to the machine, and the
    odd slow round (a first call, a collection pause) says nothing about the next one.
    """

    def __init__(self, memory: float, gap_memory: float, timings: int = 15):
        self.memory, self.gap_memory = memory, gap_memory
        self.weight = self.emitted_sum = self.proposed_sum = 0.0
        self.last_round = 0
        self.draft_seconds: deque[float] = deque(maxlen=timings)

    def add(self, emitted: int, proposed: int, round_index: int) -> None:
        kept = self.memory * self.gap_memory ** max(round_index - self.last_round - 1, 0)
        self.last_round = round_index
        self.weight = kept * self.weight + 1
        self.emitted_sum = kept * self.emitted_sum + emitted
        self.proposed_sum = kept * self.proposed_sum + proposed

    @property
    def emitted(self) -> float | None:
        return self.emitted_sum / self.weight if self.weight else None

    @property
    def proposed(self) -> float | None:
        return self.proposed_sum / self.weight if self.weight else None

    @property
    def draft_cost(self) -> float | None:
        return statistics.median(self.draft_seconds) if self.draft_seconds else None

    @property
    def measured(self) -> bool:
        """Both known: what a round emits, and (timed after its verify pass) what drafting costs."""
        return self.weight > 0 and bool(self.draft_seconds)


class _VerifyCost:
    """What a pass of the target costs by the number of drafted tokens it checks (0: a plain step):
    the median of recent passes of that size; a size never timed is extrapolated from the others at
    `VERIFY_SLOPE` of a plain step per token. The same for every candidate: who drafted does not
    change what checking n tokens costs."""

    def __init__(self, timings: int = 31):
        self.timings = timings
        self.seconds: dict[int, deque[float]] = {}

    def add(self, proposed: int, seconds: float) -> None:
        self.seconds.setdefault(proposed, deque(maxlen=self.timings)).append(seconds)

    def plain_steps_timed(self) -> int:
        return len(self.seconds.get(0, ()))

    def plain_step(self) -> float | None:
        if not self.seconds:
            return None
        n = 0 if 0 in self.seconds else max(self.seconds, key=lambda size: len(self.seconds[size]))
        return statistics.median(self.seconds[n]) / (1 + VERIFY_SLOPE * n)

    def __call__(self, proposed: float) -> float | None:
        if not self.seconds:
            return None

        def cost(n: int) -> float:
            if n in self.seconds:
                return statistics.median(self.seconds[n])
            return self.plain_step() * (1 + VERIFY_SLOPE * n)

        below = math.floor(proposed)
        share = proposed - below
        return (1 - share) * cost(below) + share * cost(below + 1) if share else cost(below)


class SelectingDrafter(Drafter):
    """Drafts each round with the candidate expected to be fastest (see the module docstring)."""

    def __init__(self, candidates: list[Candidate], memory: float = 0.97, gap_memory: float = 0.995,
                 probe_every: int = 12, max_probe_gap: int = 64, explore_after: float = 5.0,
                 warmup: WarmUp | None = None):
        self.candidates = {c.name: c for c in candidates}
        self.built: dict[str, Drafter] = {}
        self.measured = {name: _Rounds(memory, gap_memory) for name in self.candidates}
        self.verify_cost = _VerifyCost()
        self.timed_round = 0  # the rows of a batch share their round's seconds: timed once
        self.probe_every, self.max_probe_gap, self.explore_after = probe_every, max_probe_gap, explore_after
        self.gaps = {name: probe_every for name in self.candidates}  # rounds between probes of a loser
        self.forgone = {name: 0.0 for name in self.candidates}  # plain steps an unbuilt one would have saved
        self.last_tried = {name: 0 for name in self.candidates}
        self.last_plain = 0  # the last round that drafted nothing
        self.rounds = 0
        self.warmup = warmup or WarmUp()  # what the work ahead is expected to emit: when to build
        self.chosen: str | None = None  # this round's candidate (None: a plain step)
        self.probing = False  # this round tries a candidate that is not the expected fastest
        self.previous: str | None = None  # last round's candidate
        self.switched = False  # this round's candidate did not draft the last one
        self.catching_up = False  # ... and reads what was decoded since (or drafts for the first time)
        self.probe_next: str | None = None  # set in a probe's first round: the candidate it goes on with
        self.setup_seconds = 0.0  # of this round's drafting: building or starting a candidate
        self.chosen_rounds: Counter = Counter()  # candidate name (or "none") -> rounds
        # What every candidate must have been told of the current generation before it drafts:
        # a late starter gets the same calls, replayed (the rows may have been reordered since).
        self.sequences = self.window = None
        self.reorders: list[torch.Tensor] = []
        self.current: set[str] = set()  # candidates that have had them

    @property
    def reads_scores(self) -> bool:
        return any(c.watches for c in self.candidates.values())

    # ---------------------------------------------------------------- choosing
    def propose_batch(self, rows: list[list[int]], k: int, contexts: list[DraftContext]) -> list[Proposal]:
        self.rounds += 1
        eligible = [c for c in self.candidates.values() if all(c.applies(row) for row in rows)]
        if self.probe_next in {c.name for c in eligible}:
            name, self.probing = self.probe_next, True
        else:
            name = self._choose(eligible, k)
        self.switched = name is not None and name != self.previous
        self.chosen, self.previous, self.setup_seconds = name, name, 0.0
        self.chosen_rounds[name or "none"] += 1
        self.catching_up, self.probe_next = False, None
        if name is None:
            self.last_plain = self.rounds
            return [Proposal([]) for _ in rows]
        self.last_tried[name] = self.rounds
        drafter = self._ready(name)
        self.catching_up = self.switched and (drafter.catches_up or not self.measured[name].draft_seconds)
        self.probe_next = name if self.probing and self.catching_up else None
        if not drafter.can_draft(rows):  # not yet (a draft in the target's cache, before the target has
            # read the prompt): a plain step, which says nothing of its rate; its first drafting
            # round is still its first (a compile, a catch-up), not timed
            self.chosen = self.previous = None
            self.chosen_rounds[name] -= 1
            self.chosen_rounds["none"] += 1
            return [Proposal([]) for _ in rows]
        return drafter.propose_batch(rows, k, contexts)

    def _choose(self, eligible: list[Candidate], k: int) -> str | None:
        if self.rounds - self.last_plain >= self.max_probe_gap or (
                self.rounds >= self.probe_every and not self.verify_cost.plain_steps_timed()):
            return None  # a plain step now and then: what drafting must beat, measured, not extrapolated
        plain_step = self.verify_cost.plain_step()
        plain = 1 / plain_step if plain_step else None
        rates = {c.name: self._rate(c, k, plain) for c in eligible}
        choice = self._fastest(rates, plain)
        if choice is not None and choice not in self.built:
            # Rent or buy: a candidate that costs something to build is built once the plain steps it
            # would have saved so far, or is expected to save over the work ahead, pay for that (a
            # short file never pays a load it cannot repay; not knowing the length, a long one loses
            # at most the build cost again, as in ski rental).
            fallback = self._fastest({n: r for n, r in rates.items() if n in self.built}, plain)
            used = rates[fallback] if fallback is not None else plain or 1.0
            saving = 1 - used / rates[choice]  # of a plain step, per token
            self.forgone[choice] += saving
            if not self.warmup.repays(self.candidates[choice].build_cost, self.forgone[choice], saving):
                choice = fallback
        # a measured candidate not chosen for a while is tried again: the text may have changed in
        # its favour, unless even a round with every drafted token right would not beat the leader
        # (a probe is not free: it catches up on what it missed); one never measured, once the
        # rounds so far, or so far and ahead (at least the tokens ahead / (k + 1)), dwarf what
        # building it costs
        leader = max([plain or 0.0, *(rates[c.name] for c in eligible if self.measured[c.name].measured)])
        rounds_ahead = self.warmup.tokens_ahead / (k + 1)
        overdue = [c.name for c in eligible if c.name != choice and (
            self.rounds - self.last_tried[c.name] >= self.gaps[c.name] and self._best_case_rate(c.name, k) > leader
            if self.measured[c.name].measured
            else self.rounds >= self.probe_every
            and self.rounds + rounds_ahead >= self.probe_every + self.explore_after * c.build_cost)]
        self.probing = bool(overdue)
        if overdue:
            return max(overdue, key=lambda n: self.rounds - self.last_tried[n])
        return choice

    @staticmethod
    def _fastest(rates: dict[str, float], plain: float | None) -> str | None:
        """The candidate of the highest rate if it beats a plain step, else None."""
        best = max(rates, key=rates.get, default=None)
        return best if best is not None and (plain is None or rates[best] > plain) else None

    def _measured_rate(self, name: str) -> float | None:
        """Tokens a round of `name` emits per second of drafting and verifying, once both are known."""
        rounds = self.measured[name]
        if not rounds.measured:
            return None
        return rounds.emitted / (rounds.draft_cost + self.verify_cost(rounds.proposed))

    def _best_case_rate(self, name: str, k: int) -> float:
        """What a measured candidate's round of k drafted tokens would give per second if all were right."""
        rounds = self.measured[name]
        drafting = rounds.draft_cost * k / max(rounds.proposed, 1.0)
        return (k + 1) / (drafting + self.verify_cost(k))

    def _rate(self, candidate: Candidate, k: int, plain: float | None) -> float:
        measured = self._measured_rate(candidate.name)
        if measured is not None:
            return measured
        # not measured yet: its prior, in units of a plain step (of the plain rate once known)
        a = min(candidate.acceptance, 0.999)
        emitted = (1 - a ** (k + 1)) / (1 - a)
        steps = k * candidate.step_cost + 1 + VERIFY_SLOPE * k
        return emitted / steps * (plain or 1.0)

    # ---------------------------------------------------------------- learning
    def learn(self, tokens: list[int], verdict: Verdict, logits: torch.Tensor | None = None,
              draft_seconds: float = 0.0, verify_seconds: float | None = None) -> None:
        name = self.chosen
        self.warmup.emitted(verdict.accepted + 1)
        if name is not None:
            self.built[name].learn(tokens, verdict, logits, draft_seconds, verify_seconds)
        for watcher in self._watching():
            if watcher != name:
                scores = logits if self.candidates[watcher].applies(tokens) else None
                self.built[watcher].learn(tokens, verdict, scores, draft_seconds, verify_seconds)
        if name is not None:  # acceptance counts from the first round, catching up or not
            self.measured[name].add(verdict.accepted + 1, verdict.proposed, self.rounds)
        if verify_seconds is None or self.timed_round == self.rounds:  # a pass that also read a prompt,
            return  # or a batch's next row: the round is timed once
        self.timed_round = self.rounds
        self.verify_cost.add(verdict.proposed, verify_seconds)
        if name is None:
            return
        if not self.catching_up:  # what such a round cost to draft is mostly the catch-up's
            self.measured[name].draft_seconds.append(max(draft_seconds - self.setup_seconds, 0.0))
        rate = self._measured_rate(name)
        if rate is None:
            return
        others = [self._measured_rate(n) for n in self.measured if n != name]
        if rate >= max([1 / self.verify_cost.plain_step(), *(r for r in others if r is not None)]):
            self.gaps[name] = self.probe_every
        elif self.probing and not self.catching_up:  # a probe that lost: the next one comes twice as late
            self.gaps[name] = min(2 * self.gaps[name], self.max_probe_gap)

    # ---------------------------------------------------------------- the candidates' lives
    def _ready(self, name: str) -> Drafter:
        """The candidate, built on first use and told of the current generation (timed apart: a
        one-off cost, not what its rounds cost)."""
        if name in self.current:
            return self.built[name]
        started = time.perf_counter()
        drafter = self.built.get(name) or self.built.setdefault(name, self.candidates[name].make())
        if self.sequences is not None:
            drafter.start(self.sequences)
        if self.window is not None:
            drafter.start_window(self.window)
        for rows in self.reorders:
            drafter.reorder(rows)
        self.current.add(name)
        self.setup_seconds = time.perf_counter() - started
        return drafter

    def start(self, sequences: list[list[int]]) -> None:
        self.sequences, self.window, self.reorders, self.current = sequences, None, [], set()

    def start_window(self, window) -> None:
        self.window, self.reorders, self.current = window, [], set()
        for name in self._watching(current=False):
            self._ready(name)

    def _watching(self, current: bool = True) -> list[str]:
        """The built candidates that watch every round (and have been told of this window)."""
        return [name for name, c in self.candidates.items()
                if c.watches and name in self.built and (name in self.current or not current)]

    def reorder(self, rows: torch.Tensor) -> None:
        self.reorders.append(rows)
        for name in self.current:
            self.built[name].reorder(rows)

    def usage(self) -> dict[str, float]:
        """Share of rounds each candidate (or "none") drafted."""
        total = sum(self.chosen_rounds.values()) or 1
        return {name: count / total for name, count in self.chosen_rounds.most_common()}
