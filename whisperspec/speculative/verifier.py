"""Decide which drafted tokens the target model keeps: the one place losslessness is decided.

`logits[i]` is the target's prediction after `tokens + draft[:i]` (i = 0..k), from one forward pass
over `[last token] + draft`. Every row first goes through the same logit filter plain decoding
uses, with the same preceding tokens, so the rules (and their effect on the argmax) are identical.

* greedy (temperature 0): keep draft tokens while they equal the target's argmax; the target's own
  argmax at the first mismatch (or after the last draft token: the bonus token) comes next. The
  output is token for token what plain greedy decoding produces.
* sampling: accept draft token x with probability min(1, p(x)/q(x)); at the first rejection draw
  from norm(max(0, p - q)); after k acceptances draw the bonus from p (Leviathan et al., 2023;
  Chen et al., 2023). A deterministic proposal is q = one-hot. The output follows p exactly.
* coupled sampling (`noise` given): the target's token at each position is argmax(scores / T +
  noise(position)) (`whisperspec.speculative.coupled`), kept or not like a greedy one: an exact
  sample of p, and the same one plain decoding with that noise draws.
"""

from __future__ import annotations

import torch

from whisperspec.speculative.coupled import GumbelNoise, coupled_choice
from whisperspec.speculative.protocols import LogitFilter, Proposal, Verdict


def verify(tokens: list[int], proposal: Proposal, logits: torch.Tensor, logit_filter: LogitFilter,
           temperature: float = 0.0, generator: torch.Generator | None = None,
           noise: GumbelNoise | None = None) -> Verdict:
    draft = proposal.tokens
    sequence = list(tokens)
    logprobs: list[float] = []
    for i in range(len(draft) + 1):
        scores = logit_filter(sequence, logits[i].float())
        logp = torch.log_softmax(scores, dim=-1)
        if temperature == 0 or noise is not None:
            choice = int(scores.argmax()) if temperature == 0 else coupled_choice(scores, temperature, noise,
                                                                                  len(sequence))
            accepted = i < len(draft) and choice == draft[i]
        else:
            p = torch.softmax(scores / temperature, dim=-1)
            choice, accepted = _sample_step(p, draft, proposal.probs, i, generator)
        logprobs.append(float(logp[choice]))
        if not accepted:
            return Verdict(proposed=len(draft), accepted=i, next_token=choice, logprobs=logprobs)
        sequence.append(choice)
    raise AssertionError("unreachable: the bonus row never accepts")


def _sample_step(p: torch.Tensor, draft: list[int], draft_probs: torch.Tensor | None, i: int,
                 generator: torch.Generator | None) -> tuple[int, bool]:
    """One position of speculative sampling: (token, whether it is the accepted draft token)."""
    if i == len(draft):  # every draft token accepted: the bonus token comes from p itself
        return _draw(p, generator), False
    x = draft[i]
    if draft_probs is None:
        q = torch.zeros_like(p)
        q[x] = 1.0
    else:
        q = draft_probs[i].to(p.dtype)
    if float(torch.rand((), generator=generator)) < min(1.0, float(p[x] / q[x]) if q[x] > 0 else 0.0):
        return x, True
    residual = (p - q).clamp_min(0)
    # p == q on the draft's support and zero mass left means the draft could not have been rejected
    return _draw(residual if residual.sum() > 0 else p, generator), False


def _draw(weights: torch.Tensor, generator: torch.Generator | None) -> int:
    return int(torch.multinomial(weights / weights.sum(), 1, generator=generator))
