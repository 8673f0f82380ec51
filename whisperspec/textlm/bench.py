"""Text-LM benchmark: tokens/s of plain greedy, each drafter, and transformers' generate() with its
assisted variants, side by side in one run, on input-grounded and open-ended prompts.

    python -m whisperspec.textlm.bench [--model smollm2] [--max-new-tokens 64]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from whisperspec.textlm.generate import generate, prompt_ids
from whisperspec.textlm.loading import load_causal_lm

PROMPTS = {
    "rewrite (input-grounded)": "Fix the spelling and repeat the text: Ths is a smal test of the emergancy "
                                "broadcast systm. If this had ben an actual emergancy, you would have been "
                                "instructed were to tune.",
    "summarise (input-grounded)": "Summarise in one sentence: The meeting was moved from Monday to Wednesday "
                                  "because the quarterly report was not ready. The report will be sent to all "
                                  "team members on Tuesday evening.",
    "open-ended": "Write a short story about a lighthouse keeper.",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    model, tokenizer = load_causal_lm(args.model)
    layers = model.config.num_hidden_layers
    systems = {
        "whisperspec greedy": dict(),
        "whisperspec ngram, k=6": dict(draft="ngram", lookahead="6"),
        f"whisperspec early-exit {layers // 2}, k=3": dict(draft=f"early-exit:{layers // 2}", lookahead="3"),
        "transformers greedy": "hf",
        "transformers prompt lookup 6": "hf-lookup",
    }
    print(f"# text-LM bench: {args.model}, {args.max_new_tokens} new tokens, median of {args.repeats}\n")
    print("| prompt | system | tokens/s | acceptance | tokens/pass | identical to greedy |")
    print("|---|---|---|---|---|---|")
    for label, prompt in PROMPTS.items():
        reference = None
        for name, options in systems.items():
            times, out = [], None
            for _ in range(args.repeats + 1):  # the first run warms up
                start = time.perf_counter()
                out = _run(model, tokenizer, prompt, options, args.max_new_tokens)
                times.append(time.perf_counter() - start)
            tokens, stats = out
            reference = reference or tokens
            seconds = statistics.median(times[1:])
            acceptance = f"{stats.acceptance_rate:.1%}" if stats and stats.proposed else "-"
            per_pass = f"{stats.mean_accepted_length:.2f}" if stats and stats.proposed else "-"
            print(f"| {label} | {name} | {len(tokens) / seconds:.1f} | {acceptance} | {per_pass} | "
                  f"{tokens == reference} |")
    return 0


def _run(model, tokenizer, prompt, options, max_new_tokens):
    if isinstance(options, dict):
        out = generate(model, tokenizer, prompt, chat=True, max_new_tokens=max_new_tokens, **options)
        return out.tokens, out.stats
    ids = torch.tensor([prompt_ids(tokenizer, prompt, chat=True)])
    extra = {"prompt_lookup_num_tokens": 6} if options == "hf-lookup" else {}
    with torch.inference_mode():
        out = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False, **extra)
    return out[0, ids.shape[1]:].tolist(), None


if __name__ == "__main__":
    raise SystemExit(main())
