"""`whisperspec generate`: speculative text generation with a causal LM, streamed."""

from __future__ import annotations

import argparse
import sys
import time

from whisperspec.textlm.generate import generate
from whisperspec.textlm.loading import PACKAGED, load_causal_lm


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="whisperspec generate", description=__doc__)
    parser.add_argument("prompt")
    parser.add_argument("--model", default="smollm2", help=f"{', '.join(PACKAGED)}, a transformers dir or hub id")
    parser.add_argument("--draft", default="none", help="none, ngram[:N], early-exit[:E], or a draft model "
                                                        "with the same tokenizer")
    parser.add_argument("--lookahead", default=None, help="K, heuristic, confidence[:t] or cost")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    parser.add_argument("--stats", action="store_true")
    args = parser.parse_args(argv)

    model, tokenizer = load_causal_lm(args.model)
    started = time.perf_counter()
    out = generate(model, tokenizer, args.prompt, draft=args.draft, lookahead=args.lookahead,
                   max_new_tokens=args.max_new_tokens, temperature=args.temperature, chat=args.chat,
                   on_text=lambda text: print(text, end="", flush=True))
    print()
    if args.stats:
        seconds = time.perf_counter() - started
        s = out.stats
        print(f"{len(out.tokens)} tokens in {seconds:.2f} s ({len(out.tokens) / seconds:.1f} tokens/s) | "
              f"acceptance {s.acceptance_rate:.1%} | tokens per target pass {s.mean_accepted_length:.2f} | "
              f"target passes {s.target_passes}, draft passes {s.draft_passes}", file=sys.stderr)
    return 0
