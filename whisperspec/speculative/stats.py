"""Counters of a speculative generation: what was proposed, what was kept, where time went."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class SpeculationStats:
    rounds: int = 0
    plain_rounds: int = 0  # rounds nothing was drafted in: a plain step of the target
    proposed: int = 0
    accepted: int = 0
    emitted: int = 0  # tokens produced (accepted + one target token per round)
    target_passes: int = 0
    draft_passes: int = 0
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    accept_counts: Counter = field(default_factory=Counter)  # accepted-prefix length -> rounds (gpt-fast)

    def record(self, proposed: int, accepted: int, draft_passes: int, draft_s: float, verify_s: float) -> None:
        self.rounds += 1
        self.plain_rounds += proposed == 0
        self.proposed += proposed
        self.accepted += accepted
        self.emitted += accepted + 1
        self.target_passes += 1
        self.draft_passes += draft_passes
        self.draft_seconds += draft_s
        self.verify_seconds += verify_s
        self.accept_counts[accepted] += 1

    def merge(self, other: "SpeculationStats") -> None:
        for name in ("rounds", "plain_rounds", "proposed", "accepted", "emitted", "target_passes",
                     "draft_passes", "draft_seconds", "verify_seconds"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.accept_counts.update(other.accept_counts)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Tokens emitted per target pass (1.0 = no gain over plain decoding)."""
        return self.emitted / self.rounds if self.rounds else 0.0

    def rows(self) -> list[tuple[str, str]]:
        """These counters as (measure, value) rows for people to read."""
        return [("acceptance", f"{self.acceptance_rate:.1%}"), ("tokens per target pass", f"{self.mean_accepted_length:.2f}"),
                ("target passes", str(self.target_passes)), ("draft passes", str(self.draft_passes)),
                ("drafting", f"{self.draft_seconds * 1e3:.0f} ms"), ("verifying", f"{self.verify_seconds * 1e3:.0f} ms")]

    def to_dict(self) -> dict:
        return {
            "rounds": self.rounds, "plain_rounds": self.plain_rounds, "proposed": self.proposed,
            "accepted": self.accepted, "emitted": self.emitted, "target_passes": self.target_passes,
            "draft_passes": self.draft_passes, "acceptance_rate": round(self.acceptance_rate, 4),
            "mean_accepted_length": round(self.mean_accepted_length, 3),
            "draft_ms": round(self.draft_seconds * 1e3, 1), "verify_ms": round(self.verify_seconds * 1e3, 1),
            "accept_counts": dict(sorted(self.accept_counts.items())),
        }

