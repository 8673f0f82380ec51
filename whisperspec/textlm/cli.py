"""`whisperspec generate`: speculative text generation with a causal LM, streamed."""

from __future__ import annotations

import argparse
import sys
import time

from whisperspec import defaults
from whisperspec.options import SAMPLING
from whisperspec.spec import SpecError
from whisperspec.textlm.generate import generate, generate_batch, parse_text_draft
from whisperspec.textlm.loading import PACKAGED, load_causal_lm


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="whisperspec generate", description=__doc__)
    parser.add_argument("prompt", nargs="+", help="one prompt (streamed), or several (decoded as one batch)")
    parser.add_argument("--model", default="smollm2", help=f"{', '.join(PACKAGED)}, a transformers dir or hub id")
    parser.add_argument("--draft", default="none", help="DRAFT[@LOOKAHEAD]: none, ngram[:N], early-exit[:E], or a "
                                                        "draft model (another tokenizer drafts through text)")
    parser.add_argument("--lookahead", default=None,
                        help=f"the same as DRAFT@LOOKAHEAD: K (default {defaults.TEXT_LM_LOOKAHEAD}), "
                             "heuristic[:K], confidence[:T] or cost")
    parser.add_argument("--max-new-tokens", type=_at_least_one, default=128)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--sampling", choices=SAMPLING, default="residual",
                        help="at temperature > 0: residual (Leviathan et al.) or coupled (the same text with or "
                             "without a draft)")
    parser.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    parser.add_argument("--stats", action="store_true")
    args = parser.parse_args(argv)
    try:
        draft = parse_text_draft(args.draft, args.lookahead)  # before the model loads
    except SpecError as error:
        print(f"whisperspec generate: --draft: {error}", file=sys.stderr)
        return 2

    try:
        model, tokenizer = load_causal_lm(args.model)
    except OSError as error:  # not installed, not a model, not in the cache and no network
        print(f"whisperspec generate: --model {args.model}: {error}", file=sys.stderr)
        return 2
    options = dict(draft=draft, max_new_tokens=args.max_new_tokens,
                   temperature=args.temperature, sampling=args.sampling, chat=args.chat)
    started = time.perf_counter()
    try:  # a draft model loads at the first generation
        if len(args.prompt) == 1:
            outs = [generate(model, tokenizer, args.prompt[0], on_text=lambda text: print(text, end="", flush=True),
                             **options)]
            print()
        else:
            outs = generate_batch(model, tokenizer, args.prompt, **options)
            for prompt, out in zip(args.prompt, outs):
                print(f"--- {prompt}\n{out.text}")
    except OSError as error:
        print(f"whisperspec generate: --draft {args.draft}: {error}", file=sys.stderr)
        return 2
    if args.stats:
        seconds = time.perf_counter() - started
        for out in outs:
            print(" | ".join([f"{len(out.tokens)} tokens", *(f"{name} {value}" for name, value in out.stats.rows())]),
                  file=sys.stderr)
        total = sum(len(out.tokens) for out in outs)
        print(f"{total} tokens in {seconds:.2f} s ({total / seconds:.1f} tokens/s)", file=sys.stderr)
    return 0


def _at_least_one(text: str) -> int:
    number = int(text) if text.strip().lstrip("-").isdigit() else 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number >= 1")
    return number
