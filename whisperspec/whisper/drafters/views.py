"""What part of a window's tokens a draft reads (`ModelDrafter(view=)`): the main model, which
verifies, still reads all of them, so a view changes acceptance and cost, never the output.

Long-form decoding conditions each window on up to 223 tokens of earlier text (<|startofprev|> ...
up to <|startoftranscript|>). A draft that reads all of it pays a pass over that prompt at every
window's first round; a distilled draft, trained with no prompt or a short one, also agrees less
under it; the int8 self-draft agrees a little more, by less than the pass costs
(docs/BENCHMARKS-HISTORY.md).
"""

from __future__ import annotations


def prompt_tail(special, kept: int):
    """A view of a window's tokens with only the last `kept` tokens of its previous-text prompt
    (0: none of it, nor <|startofprev|>). New tokens pass through: view(tokens + new) == view(tokens) + new."""
    def view(tokens: list[int]) -> list[int]:
        if not (tokens and tokens[0] == special.sot_prev and special.sot in tokens):
            return tokens
        start = tokens.index(special.sot)
        return tokens[start:] if kept == 0 else [special.sot_prev, *tokens[max(1, start - kept):]]
    return view


def without_prompt(special):
    """A view of a window's tokens without its previous-text prompt."""
    return prompt_tail(special, 0)
