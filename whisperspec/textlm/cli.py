"""`whisperspec generate`: speculative text generation with a causal LM, streamed."""

from __future__ import annotations

import argparse
import sys
import time

from whisperspec.textlm.generate import generate, generate_batch
from whisperspec.textlm.loading import PACKAGED, load_causal_lm


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="whisperspec generate", description=__doc__)
    parser.add_argument("prompt", nargs="+", help="one prompt (streamed), or several (decoded as one batch)")
    parser.add_argument("--model", default="smollm2", help=f"{', '.join(PACKAGED)}, a transformers dir or hub id")
    parser.add_argument("--draft", default="none", help="none, ngram[:N], early-exit[:E], or a draft model "
                                                        "with the same tokenizer")
    parser.add_argument("--lookahead", default=None, help="K, heuristic, confidence[:t] or cost")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--sampling", choices=("residual", "coupled"), default="residual",
                        help="at temperature > 0: residual (Leviathan et al.) or coupled (the same text with or "
                             "without a draft)")
    parser.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    parser.add_argument("--stats", action="store_true")
    args = parser.parse_args(argv)

    model, tokenizer = load_causal_lm(args.model)
    options = dict(draft=args.draft, lookahead=args.lookahead, max_new_tokens=args.max_new_tokens,
                   temperature=args.temperature, sampling=args.sampling, chat=args.chat)
    started = time.perf_counter()
    if len(args.prompt) == 1:
        outs = [generate(model, tokenizer, args.prompt[0], on_text=lambda text: print(text, end="", flush=True),
                         **options)]
        print()
    else:
        outs = generate_batch(model, tokenizer, args.prompt, **options)
        for prompt, out in zip(args.prompt, outs):
            print(f"--- {prompt}\n{out.text}")
    if args.stats:
        seconds = time.perf_counter() - started
        for out in outs:
            s = out.stats
            print(f"{len(out.tokens)} tokens | acceptance {s.acceptance_rate:.1%} | tokens per target pass "
                  f"{s.mean_accepted_length:.2f} | target passes {s.target_passes}, draft passes {s.draft_passes}",
                  file=sys.stderr)
        total = sum(len(out.tokens) for out in outs)
        print(f"{total} tokens in {seconds:.2f} s ({total / seconds:.1f} tokens/s)", file=sys.stderr)
    return 0
