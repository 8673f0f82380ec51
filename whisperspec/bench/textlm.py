"""Text-LM benchmark: tokens/s of plain greedy, each drafter, and transformers' generate() with its
assisted variants, side by side in one run, on input-grounded and open-ended prompts; then the
same prompts as one batch.

    python -m whisperspec.bench.textlm [--model smollm2|gemma3-270m] [--max-new-tokens 64]

No trained same-tokenizer pair of models can be had offline, so the "draft model" rows (ours and
transformers' `assistant_model`) use a truncated copy of the target: its first E layers + final
norm + head, as separate weights. A real small model would accept differently.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

from whisperspec import defaults
from whisperspec.textlm.generate import generate, generate_batch, prompt_ids
from whisperspec.textlm.loading import load_causal_lm
from whisperspec.textlm.models import first_layers

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
    parser.add_argument("--cross-draft", default="auto", help="a draft with another tokenizer (universal assisted "
                        "decoding): a model name, none, or auto (smollm2 for gemma3-270m)")
    args = parser.parse_args(argv)
    model, tokenizer = load_causal_lm(args.model)
    chat = tokenizer.chat_template is not None  # base models (Gemma-3-270M) have none
    exit_layer = model.config.num_hidden_layers // 2
    truncated = copy.deepcopy(first_layers(model, exit_layer))  # its own weights, as a separate draft has
    systems = {
        "whisperspec greedy": dict(),
        f"whisperspec ngram, k={defaults.TEXT_LM_LOOKAHEAD}": dict(draft="ngram"),
        f"whisperspec early-exit {exit_layer}, shared cache (LayerSkip), k=3":
            dict(draft=f"early-exit:{exit_layer}", lookahead="3"),
        f"whisperspec early-exit {exit_layer}, own cache, k=3": dict(draft=first_layers(model, exit_layer),
                                                                     lookahead="3"),
        f"whisperspec draft model (truncated copy, {exit_layer} layers), k=3": dict(draft=truncated, lookahead="3"),
        "transformers greedy": dict(hf={}),
        "transformers prompt lookup 6": dict(hf=dict(prompt_lookup_num_tokens=6)),
        f"transformers assistant_early_exit {exit_layer}, k=3":
            dict(hf=dict(assistant_early_exit=exit_layer, num_assistant_tokens=3)),
        f"transformers assistant_model (truncated copy, {exit_layer} layers), k=3":
            dict(hf=dict(assistant_model=truncated, num_assistant_tokens=3)),
    }
    cross = {"auto": "smollm2" if args.model == "gemma3-270m" else "none"}.get(args.cross_draft, args.cross_draft)
    if cross != "none":
        draft, draft_tokenizer = load_causal_lm(cross)
        other = dict(assistant_model=draft, assistant_tokenizer=draft_tokenizer, num_assistant_tokens=4)
        systems[f"whisperspec draft {cross} (other tokenizer), k=4"] = other
        systems[f"transformers assistant_model {cross} + assistant_tokenizer, k=4"] = dict(
            hf=dict(other, tokenizer=tokenizer))  # transformers wants the target's tokenizer too
    print(f"# text-LM bench: {args.model}, {args.max_new_tokens} new tokens, median of {args.repeats}\n")
    print("Draft-model rows: a truncated copy of the target stands in for a small model with the same tokenizer "
          "(none can be had offline).\n")
    print("| prompt | system | tokens/s | acceptance | tokens/pass | identical to greedy |")
    print("|---|---|---|---|---|---|")
    for label, prompt in PROMPTS.items():
        reference = None
        for name, options in systems.items():
            seconds, (tokens, stats) = _timed(args.repeats, lambda: _run(model, tokenizer, prompt, options, chat,
                                                                        args.max_new_tokens))
            reference = reference or tokens
            acceptance = f"{stats.acceptance_rate:.1%}" if stats and stats.proposed else "-"
            per_pass = f"{stats.mean_accepted_length:.2f}" if stats and stats.proposed else "-"
            print(f"| {label} | {name} | {len(tokens) / seconds:.1f} | {acceptance} | {per_pass} | "
                  f"{tokens == reference} |")
    _bench_batch(model, tokenizer, chat, args)
    return 0


def _bench_batch(model, tokenizer, chat, args) -> None:
    """All prompts as one batch (one target pass per round for every row) against one at a time."""
    prompts = list(PROMPTS.values())
    print(f"\n## the {len(prompts)} prompts as one batch\n")
    print("| system | tokens/s (all rows) | rows identical to batch of one |")
    print("|---|---|---|")
    for name, options in {"greedy": dict(), f"ngram, k={defaults.TEXT_LM_LOOKAHEAD}": dict(draft="ngram")}.items():
        common = dict(chat=chat, max_new_tokens=args.max_new_tokens, **options)
        seconds, alone = _timed(args.repeats, lambda: [generate(model, tokenizer, p, **common) for p in prompts])
        print(f"| {name}, one at a time | {sum(len(o.tokens) for o in alone) / seconds:.1f} | - |")
        seconds, batch = _timed(args.repeats, lambda: generate_batch(model, tokenizer, prompts, **common))
        same = all(a.tokens == b.tokens for a, b in zip(alone, batch))
        print(f"| {name}, batch of {len(prompts)} | {sum(len(o.tokens) for o in batch) / seconds:.1f} | {same} |")


def _timed(repeats: int, run):
    """(median seconds, result) over `repeats` runs after one warm-up run."""
    times, out = [], None
    for _ in range(repeats + 1):
        start = time.perf_counter()
        out = run()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:]), out


def _run(model, tokenizer, prompt, options, chat, max_new_tokens):
    if "hf" not in options:
        out = generate(model, tokenizer, prompt, chat=chat, max_new_tokens=max_new_tokens, **options)
        return out.tokens, out.stats
    ids = torch.tensor([prompt_ids(tokenizer, prompt, chat=chat)])
    extra = dict(options["hf"])
    if "assistant_model" in extra or "assistant_early_exit" in extra:
        extra["num_assistant_tokens_schedule"] = "constant"
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                             do_sample=False, **extra)
    return out[0, ids.shape[1]:].tolist(), None


if __name__ == "__main__":
    raise SystemExit(main())
