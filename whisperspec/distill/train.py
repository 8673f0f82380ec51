"""Train a shared-encoder draft decoder to imitate the main decoder (knowledge distillation).

The draft is distil-whisper's layout built from the main model (`draft_from_main`): a few copies of
main decoder layers over the main encoder's output, the main embeddings and a reduced-vocabulary
slice of the main output head (both frozen and shared, so the draft ships only its own layers).
Loss per position: KL(main || draft) over the draft's vocabulary plus cross-entropy on the main
model's greedy token, the one the verifier will compare with.

A window decoded after a previous-text prompt teaches the draft one of two things (`prompt_view`):
to read the prompt as the main model does ("with"), or to draft from <|startoftranscript|> on
while the main model still reads the prompt ("without", how `trained.without_prompt` drafts);
"both" trains on each window both ways.

The draft, its teacher-forced pass and its loss: `whisperspec.whisper.drafters.training`
(`DraftTrainer`), which online learning shares; this module is the offline recipe around it.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, replace

import torch

from whisperspec import defaults
from whisperspec.whisper.drafters.training import DraftTrainer, Example


@dataclass
class TrainConfig:
    epochs: int = defaults.DISTILL_EPOCHS
    batch_size: int = 16
    lr: float = 2e-4
    warmup_steps: int = 30
    ce_weight: float = 1.0
    seed: int = 0
    prompt_view: str = "without"  # how the draft reads a prompted window: "with", "without" or "both"


def draft_vocabulary(examples: list[Example], vocab_size: int, eot: int, size: int,
                     corpus: list[list[int]] = ()) -> torch.Tensor:
    """The text tokens the draft's head scores: those seen in the main model's labels or in the
    corpus text (as the tokenizer splits it), most frequent first, then the lowest ids (BPE merge
    order, roughly frequency), plus every special and timestamp token.

    Base's vocabulary is multilingual: its first 16384 ids miss 5.2% of the tokens of the English
    test transcripts (" logged", " incorrect", " Agent"), and the 12288 tokens base emitted most in
    1280 synthetic windows miss 8.4%. Acceptance can never exceed that coverage.
    """
    counts = torch.zeros(eot, dtype=torch.long)
    for tokens in [e.tokens[e.sample_begin:] for e in examples] + list(corpus):
        text = torch.tensor([t for t in tokens if t < eot], dtype=torch.long)
        counts += torch.bincount(text, minlength=eot)
    rank = counts.double() + 1.0 / (2.0 + torch.arange(eot))  # unseen tokens: by id, below any seen one
    text_ids = rank.topk(min(size, eot)).indices.sort().values
    return torch.cat([text_ids, torch.arange(eot, vocab_size)])


def without_prompt(example: Example, special) -> Example:
    """The window as a draft that skips the previous-text prompt reads it: from <|startoftranscript|>
    on (positions from 0), against the main model's hidden states, which read the prompt."""
    if not example.tokens or example.tokens[0] != special.sot_prev:
        return example
    start = example.tokens.index(special.sot)
    return replace(example, tokens=example.tokens[start:], sample_begin=example.sample_begin - start,
                   target_hidden=example.target_hidden[start:])


def prompt_views(examples: list[Example], cross: list, view: str, special) -> tuple[list[Example], list]:
    """`examples` (and their cross K/V, shared) as the draft is to read them: "with" the prompt,
    "without" it, or "both" (every prompted window twice)."""
    if view == "with" or special is None:
        return examples, cross
    stripped = [without_prompt(e, special) for e in examples]
    if view == "without":
        return stripped, cross
    twice = [(s, c) for e, s, c in zip(examples, stripped, cross) if s is not e]
    return examples + [s for s, _ in twice], cross + [c for _, c in twice]


def agreement_by_language(trainer: DraftTrainer, examples: list[Example], reads_prompt: bool = False,
                          cross: list | None = None) -> dict[str, float]:
    """Teacher-forced agreement on `examples`, per language they were decoded in (the draft reading
    prompted windows as it will when drafting)."""
    cross = cross or [trainer.cross_kv(e.encoder_hidden) for e in examples]
    examples, cross = prompt_views(examples, cross, "with" if reads_prompt else "without", trainer.special)
    result = {}
    for language in sorted({e.language for e in examples}):
        rows = [i for i, e in enumerate(examples) if e.language == language]
        result[language or "unknown"] = trainer.agreement([examples[i] for i in rows], [cross[i] for i in rows])
    return result


def train(trainer: DraftTrainer, train_set: list[Example], val_set: list[Example], config: TrainConfig,
          log=print) -> dict:
    """Train with AdamW, warmup + cosine decay; keep the weights of the epoch with the best held-out
    agreement (early stopping: the synthetic training set is small enough to overfit). Held-out
    windows are read the way the draft will draft: without their prompt unless it is trained "with"."""
    rng = random.Random(config.seed)
    started = time.perf_counter()
    train_set, train_cross = prompt_views(train_set, [trainer.cross_kv(e.encoder_hidden) for e in train_set],
                                          config.prompt_view, trainer.special)
    val_set, val_cross = prompt_views(val_set, [trainer.cross_kv(e.encoder_hidden) for e in val_set],
                                      "with" if config.prompt_view == "with" else "without", trainer.special)
    order = sorted(range(len(train_set)), key=lambda i: len(train_set[i].tokens))  # similar lengths batch together
    batches = [order[i:i + config.batch_size] for i in range(0, len(order), config.batch_size)]
    total_steps = config.epochs * len(batches)
    optimizer = torch.optim.AdamW(trainer.parameter_groups(config.lr), lr=config.lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / config.warmup_steps)
                                                 * 0.5 * (1 + math.cos(math.pi * min(step / total_steps, 1.0))))
    best = {"val_agreement": trainer.agreement(val_set, val_cross), "epoch": 0}
    log(f"epoch 0: held-out agreement {best['val_agreement']:.1%}")
    best_state = {k: v.clone() for k, v in trainer.decoder.state_dict().items()}
    for epoch in range(1, config.epochs + 1):
        rng.shuffle(batches)
        trainer.decoder.train()
        seen = agreed = 0
        for batch in batches:
            loss, agree, total = trainer.loss([train_set[i] for i in batch], [train_cross[i] for i in batch],
                                              config.ce_weight)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trainer.trainable(), 1.0)
            optimizer.step()
            schedule.step()
            seen, agreed = seen + total, agreed + agree
        trainer.decoder.eval()
        val = trainer.agreement(val_set, val_cross)
        log(f"epoch {epoch}: train agreement {agreed / max(seen, 1):.1%}, held-out {val:.1%}, "
            f"{time.perf_counter() - started:.0f} s")
        if val > best["val_agreement"]:
            best = {"val_agreement": val, "epoch": epoch, "train_agreement": agreed / max(seen, 1)}
            best_state = {k: v.clone() for k, v in trainer.decoder.state_dict().items()}
    trainer.decoder.load_state_dict(best_state)
    best["train_seconds"] = time.perf_counter() - started
    return best
