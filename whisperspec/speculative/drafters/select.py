"""Choose, round by round, the drafter that is fastest on the text at hand — or none.

Which drafter pays depends on the input: a distilled draft is cheap and right on the speech it was
trained for, and wrong on another language; a self-draft (the target in int8) is right almost
everywhere but costs a third of a target pass per token; prompt lookup costs nothing and pays only
where the text repeats. `SelectingDrafter` measures, for each candidate, how many tokens a round
it drafts emits and what the round costs (drafting + verifying, wall time), and each round drafts
with the candidate of the highest emitted-tokens-per-second, or with none when a plain step (one
target pass for one token) is expected to be faster than all of them. So it is never slower than
plain decoding by more than its probes: a candidate not chosen is tried again now and then (after
`probe_every` rounds, doubling each time it loses, up to `max_probe_gap`), since the text may have
changed in its favour.

Candidates are built on first use, once the plain steps they would have saved pay for building
them (a model draft costs its load only where it can repay it), and may decline a sequence
(`applies`: a draft trained on some languages only). A candidate that learns from what the target
verifies (`watches`) is told of every round once built, whoever drafts. Output is the verifier's
decision whatever drafts, so switching changes speed only.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import torch

from whisperspec.speculative.protocols import DraftContext, Drafter, Proposal, Verdict

# What a verify pass over k drafted tokens costs on top of a plain step, per token, as a share of
# that step, until the candidates' own rounds have been timed (then only used to tell a plain step's
# cost from theirs while no plain round has been measured).
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


class _Measured:
    """Moving averages of one candidate's rounds: tokens emitted, seconds spent. They age by rounds,
    not by samples: a probe after a long gap weighs as much as the rounds that passed meanwhile
    would have, so one probe is enough to notice that the text changed."""

    def __init__(self, smoothing: float):
        self.smoothing = smoothing
        self.emitted = self.seconds = None
        self.last_round = 0

    def add(self, emitted: int, seconds: float, round_index: int) -> None:
        weight = 1 - (1 - self.smoothing) ** max(round_index - self.last_round, 1)
        self.last_round = round_index
        self.emitted = emitted if self.emitted is None else (1 - weight) * self.emitted + weight * emitted
        self.seconds = seconds if self.seconds is None else (1 - weight) * self.seconds + weight * seconds

    @property
    def rate(self) -> float | None:
        return None if self.emitted is None else self.emitted / max(self.seconds, 1e-9)


class SelectingDrafter(Drafter):
    """Drafts each round with the candidate expected to be fastest (see the module docstring)."""

    def __init__(self, candidates: list[Candidate], smoothing: float = 0.15, probe_every: int = 12,
                 max_probe_gap: int = 64):
        self.candidates = {c.name: c for c in candidates}
        self.built: dict[str, Drafter] = {}
        self.measured = {name: _Measured(smoothing) for name in self.candidates}
        self.plain = _Measured(smoothing)  # rounds that drafted nothing
        self.estimated_plain_rate = None  # from the candidates' verify passes, until a plain round is timed
        self.probe_every, self.max_probe_gap = probe_every, max_probe_gap
        self.gaps = {name: probe_every for name in self.candidates}  # rounds between probes of a loser
        self.forgone = {name: 0.0 for name in self.candidates}  # plain steps an unbuilt one would have saved
        self.last_tried = {name: 0 for name in self.candidates}
        self.rounds = 0
        self.chosen: str | None = None  # this round's candidate (None: a plain step)
        self.probing = False  # this round tries a candidate that is not the expected fastest
        self.setup_seconds = 0.0  # of this round's drafting: building or starting a candidate
        self.chosen_rounds: Counter = Counter()  # candidate name (or "none") -> rounds
        # What every candidate must have been told of the current generation before it drafts:
        # a late starter gets the same calls, replayed (the rows may have been reordered since).
        self.sequences = self.window = None
        self.reorders: list[torch.Tensor] = []
        self.current: set[str] = set()  # candidates that have had them

    # ---------------------------------------------------------------- choosing
    def propose_batch(self, rows: list[list[int]], k: int, contexts: list[DraftContext]) -> list[Proposal]:
        self.rounds += 1
        name = self._choose([c for c in self.candidates.values() if all(c.applies(row) for row in rows)], k)
        self.chosen, self.setup_seconds = name, 0.0
        self.chosen_rounds[name or "none"] += 1
        if name is None:
            return [Proposal([]) for _ in rows]
        self.last_tried[name] = self.rounds
        return self._ready(name).propose_batch(rows, k, contexts)

    def _choose(self, eligible: list[Candidate], k: int) -> str | None:
        plain = self.plain.rate or self.estimated_plain_rate
        rates = {c.name: self._rate(c, k, plain) for c in eligible}
        choice = self._fastest(rates, plain)
        if choice is not None and choice not in self.built:
            # Rent or buy: a candidate that costs something to build is built once the plain steps it
            # would have saved so far pay for that (a short file never pays a load it cannot repay;
            # a long one loses at most the build cost again, as in ski rental).
            fallback = self._fastest({n: r for n, r in rates.items() if n in self.built}, plain)
            used = rates[fallback] if fallback is not None else plain or 1.0
            self.forgone[choice] += 1 - used / rates[choice]
            if self.forgone[choice] < self.candidates[choice].build_cost:
                choice = fallback
        # a measured candidate not chosen for a while is tried again: the text may have changed in
        # its favour (one never measured is tried when its prior promises most)
        overdue = [c.name for c in eligible if c.name != choice and self.measured[c.name].rate is not None
                   and self.rounds - self.last_tried[c.name] >= self.gaps[c.name]]
        self.probing = bool(overdue)
        if overdue:
            return max(overdue, key=lambda n: self.rounds - self.last_tried[n])
        return choice

    @staticmethod
    def _fastest(rates: dict[str, float], plain: float | None) -> str | None:
        """The candidate of the highest rate if it beats a plain step, else None."""
        best = max(rates, key=rates.get, default=None)
        return best if best is not None and (plain is None or rates[best] > plain) else None

    def _rate(self, candidate: Candidate, k: int, plain: float | None) -> float:
        measured = self.measured[candidate.name].rate
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
        if name is not None:
            self.built[name].learn(tokens, verdict, logits, draft_seconds, verify_seconds)
        for watcher in self._watching():
            if watcher != name:
                scores = logits if self.candidates[watcher].applies(tokens) else None
                self.built[watcher].learn(tokens, verdict, scores, draft_seconds, verify_seconds)
        if verify_seconds is None:  # a pass that also read a prompt: not a round's cost
            return
        if name is None:
            self.plain.add(1, verify_seconds, self.rounds)
            return
        measured = self.measured[name]
        measured.add(verdict.accepted + 1, max(draft_seconds - self.setup_seconds, 0.0) + verify_seconds, self.rounds)
        if self.plain.rate is None:
            self.estimated_plain_rate = (1 + VERIFY_SLOPE * verdict.proposed) / verify_seconds
        others = [m.rate for n, m in self.measured.items() if n != name and m.rate is not None]
        best_other = max([self.plain.rate or self.estimated_plain_rate or 0.0, *others])
        if measured.rate > best_other:
            self.gaps[name] = self.probe_every
        elif self.probing:  # a probe that lost: the next one comes twice as late
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
