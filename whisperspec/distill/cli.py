"""`whisperspec distill`: train a draft decoder for a main model, offline, on synthetic speech
and, if given, unlabelled recordings.

    whisperspec distill --model base --out my-draft.safetensors  [--init DRAFT --seed 2]
    whisperspec distill --languages en:3,es,fr,de --out my-draft.safetensors
    whisperspec distill --init DRAFT --audio my-recordings/ --out my-draft.safetensors

1. sentences of each --languages language (Debian's fortunes and translated man pages, or --corpus
   FILE), telephone prompts and disfluencies, spoken by espeak-ng, Flite and Piper voices; with
   --audio, windows of real recordings as well (`whisperspec.distill.recordings`);
2. labelled by the main model (greedy tokens, decoder hidden states), cached shard by shard;
3. a draft of --layers copies of main decoder layers (or --init: a trained draft's layers) trained to
   imitate it, best held-out epoch kept;
4. saved as a small file of its own weights (`whisperspec.models.draft_file`) with its held-out
   agreement per language (`draft_languages`): `--draft FILE`, or `--draft trained` for the one
   shipped in whisperspec/assets for the main model.
Held-out windows are spoken from sentences kept out of training (and, with --audio, are every
tenth recording). Targets come from the main model, so no transcripts are needed; no evaluation
audio or text is used (asterisk-en-distill is a split no evaluation set reads).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from whisperspec import defaults
from whisperspec.cache import cache_dir
from whisperspec.evaluation.datasets import check_trainable


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="whisperspec distill", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="base")
    parser.add_argument("--out", type=Path, required=True, help="the draft file to write (.safetensors)")
    parser.add_argument("--windows", type=int, default=1024, help="synthetic 30-s windows to train on")
    parser.add_argument("--val-windows", type=int, default=64, help="held-out synthetic windows per language")
    parser.add_argument("--languages", default="en", type=parse_languages, metavar="LANG[:WEIGHT],...",
                        help="languages of the synthetic windows and their shares of --windows "
                             "(e.g. en:3,es,fr,de: English three shares, the others one each)")
    parser.add_argument("--prompt-view", choices=("with", "without", "both"), default="without",
                        help="how the draft reads a window with a previous-text prompt, in training and when it "
                             "drafts: with the prompt, without it (the main model still reads it), or trained both "
                             "ways, drafting the way that agrees more with the main model on held-out prompted windows")
    parser.add_argument("--kind", choices=("distilled", "features"), default="distilled",
                        help="distilled: a distil-whisper-style draft decoder; features: a draft that also reads "
                             "the main decoder's features (EAGLE), prompt included; with --init DRAFT it starts "
                             "from that draft's layers and head")
    parser.add_argument("--layers", default="0,5", help="main decoder layers the draft starts from")
    parser.add_argument("--init", type=Path, default=None,
                        help="start from this trained draft's layers instead (continue training on new windows)")
    parser.add_argument("--seed", type=int, default=0, help="of the training windows (a new seed: new windows)")
    parser.add_argument("--vocab", type=int, default=defaults.TRAINED_DRAFT_HEAD,
                        help="text tokens the draft scores (the most frequent in the labels and the corpus)")
    parser.add_argument("--epochs", type=int, default=defaults.DISTILL_EPOCHS)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--cross-pool", type=int, default=None,
                        help="average the encoder frames the draft's cross-attention reads in groups of this many "
                             "(a cheaper draft step; default: as --init's draft, else 4)")
    parser.add_argument("--dropout", type=float, default=0.1, help="on the draft layers' residual branches while training")
    parser.add_argument("--audio", nargs="+", default=None, metavar="PATH",
                        help="unlabelled recordings to train on as well: files, folders, .jsonl manifests or "
                             "a data set name (asterisk-en-distill); every tenth file is kept for validation")
    parser.add_argument("--audio-language", default="en",
                        help="the language the recordings are decoded in, or 'detect' (per window)")
    parser.add_argument("--corpus", type=Path, default=None,
                        help="text file (one language only; default: the language's Debian text, docs/DISTILL.md)")
    parser.add_argument("--data-dir", type=Path, default=None, help="labelled shards (default: in the cache)")
    args = parser.parse_args(argv)
    for source in args.audio or []:  # before any model loads
        try:
            check_trainable(source)
        except ValueError as error:
            parser.error(f"--audio: {error}")
    try:
        report = distill(args)
    except FileNotFoundError as error:  # a Debian package it speaks or reads from, missing: the fix is in the message
        print(f"whisperspec distill: {error}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2))
    return 0


def parse_languages(spec: str) -> dict[str, float]:
    """'en:3,es,fr' -> {'en': 3.0, 'es': 1.0, 'fr': 1.0}, checked against the languages with text here."""
    from whisperspec.distill.corpus import TEXT_SOURCES

    weights = {}
    for item in spec.split(","):
        language, _, weight = item.strip().partition(":")
        if language not in TEXT_SOURCES:
            raise argparse.ArgumentTypeError(f"no text sources for {language!r} (known: {', '.join(TEXT_SOURCES)})")
        try:
            weights[language] = float(weight or 1)
        except ValueError:
            raise argparse.ArgumentTypeError(f"weight of {language!r} is not a number: {weight!r}") from None
    return weights


def distill(args) -> dict:
    from whisperspec.distill.corpus import load_sentences
    from whisperspec.distill.labels import build_dataset, load_examples
    from whisperspec.distill.train import (DraftTrainer, TrainConfig, agreement_by_language, draft_vocabulary,
                                           train)
    from whisperspec.models import load_whisper
    from whisperspec.models.draft_file import draft_kind, load_draft, save_draft
    from whisperspec.models.draft_layout import draft_from_main
    from whisperspec.whisper.drafters.features import KIND as FEATURES, FeatureTrainer, feature_draft_from_main
    from whisperspec.whisper.model import WhisperRuntime

    runtime = WhisperRuntime.from_bundle(load_whisper(args.model))
    languages = args.languages if isinstance(args.languages, dict) else parse_languages(args.languages)
    data = args.data_dir or cache_dir() / "distill" / Path(args.model).name
    started = time.perf_counter()
    sentences = {language: load_sentences(args.corpus if len(languages) == 1 else None, language=language)
                 for language in languages}
    held = {language: max(len(s) // 20, 1) for language, s in sentences.items()}  # 5%: only ever validation
    val_paths = [p for language, s in sentences.items()
                 for p in build_dataset(runtime, s[-held[language]:], data / f"val-{language}", args.val_windows,
                                        min(32, args.val_windows), seed=1, language=language, batch_size=8)]
    train_paths = label_languages(runtime, {language: s[:-held[language]] for language, s in sentences.items()},
                                  languages, args.windows, data, args.seed)
    if args.audio:
        from whisperspec.distill.recordings import label_recordings, recording_paths

        language = None if args.audio_language == "detect" else args.audio_language
        prompts = sentences.get(language, sentences[next(iter(sentences))])
        real_train, real_val = label_recordings(runtime, recording_paths(args.audio), prompts, data,
                                                seed=args.seed, language=language)
        train_paths, val_paths = train_paths + real_train, val_paths + real_val
    label_seconds = time.perf_counter() - started
    train_set, val_set = load_examples(train_paths), load_examples(val_paths)

    main_model = runtime.model
    features = getattr(args, "kind", "distilled") == "features"
    if args.init:
        draft, _ = load_draft(args.init, main_model)
        if features and draft_kind(args.init) != FEATURES:  # a token-level draft learns to read features
            draft = feature_draft_from_main(main_model, start=draft)
    elif features:
        draft = feature_draft_from_main(main_model, [int(i) for i in args.layers.split(",")])
    else:
        draft = draft_from_main(main_model, [int(i) for i in args.layers.split(",")])
    pool = args.cross_pool or (getattr(draft.config, "cross_attention_pool", 1) if args.init else 4)
    corpus = [runtime.tokenizer.encode(" " + s, add_special_tokens=False)
              for language, s in sentences.items() for s in s[:-held[language]]]
    vocab_ids = draft_vocabulary(train_set, runtime.vocab_size, runtime.special.eot, args.vocab, corpus)
    # a feature draft reads the main decoder's features position by position: the prompt included
    prompt_view = "with" if features else args.prompt_view
    trainer = (FeatureTrainer if features else DraftTrainer)(
        draft.model.decoder, vocab_ids, main_model.proj_out.weight, dropout=args.dropout, cross_pool=pool,
        special=runtime.special)
    config = TrainConfig(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, prompt_view=prompt_view)
    best = train(trainer, train_set, val_set, config)
    reads_prompt = prompt_view == "with"
    if features:
        best["val_second_token_agreement"] = trainer.agreement_second(val_set, [trainer.cross_kv(e.encoder_hidden)
                                                                                 for e in val_set])
    if prompt_view == "both":
        reads_prompt, best["prompted_val_agreement"] = reads_prompt_better(trainer, val_set, runtime.special)
    by_language = agreement_by_language(trainer, val_set, reads_prompt=reads_prompt)
    # the draft is trained for the languages asked for; a language the main model detected in a few
    # recordings (8-kHz prompts heard as Polish or Tamil) is no claim, and a handful of tokens no measure
    trained_for = set(languages) | ({args.audio_language} if args.audio and args.audio_language != "detect" else set())
    by_language = {language: value for language, value in by_language.items() if language in trained_for}
    report = {"model": args.model, "layers": args.layers, "init": args.init and Path(args.init).name,
              "seed": args.seed, "languages": ",".join(f"{k}:{v:g}" for k, v in languages.items()), "audio": args.audio,
              "vocab_size_kept": args.vocab, "cross_pool": pool, "dropout": args.dropout,
              "kind": "features" if features else "distilled", "prompt_view": prompt_view,
              "train_windows": len(train_set), "val_windows": len(val_set),
              "train_tokens": sum(len(e.tokens) - e.sample_begin for e in train_set),
              "label_seconds": round(label_seconds),
              **{k: round(v, 4) if isinstance(v, float) else v for k, v in best.items()},
              "threads": torch.get_num_threads()}
    report["reads_prompt"] = reads_prompt
    save_draft(args.out, main_model, draft.model.decoder, vocab_ids, report, cross_pool=pool,
               languages=by_language, reads_prompt=reads_prompt, kind=FEATURES if features else "distilled")
    report["out"] = str(args.out)
    report["val_agreement_by_language"] = {k: round(v, 4) for k, v in by_language.items()}
    return report


def reads_prompt_better(trainer, val_set: list, special) -> tuple[bool, dict[str, float]]:
    """Whether the draft agrees more with the main model reading held-out prompted windows with
    their prompt than without it, and both agreements."""
    from whisperspec.distill.train import prompt_views

    prompted = [e for e in val_set if e.tokens[0] == special.sot_prev]
    cross = [trainer.cross_kv(e.encoder_hidden) for e in prompted]
    agreement = {view: trainer.agreement(*prompt_views(prompted, cross, view, special)) for view in ("with", "without")}
    return agreement["with"] > agreement["without"], agreement


def label_languages(runtime, sentences: dict[str, list[str]], weights: dict[str, float], windows: int,
                    data: Path, seed: int, shard_size: int = 32) -> list[Path]:
    """Each language's share of `windows`, labelled a shard of every language at a time, so that a
    stopped run has labelled every language about as far (a rerun resumes from the shards it finds)."""
    from whisperspec.distill.labels import build_dataset

    total = sum(weights.values())
    counts = {language: round(windows * weight / total) for language, weight in weights.items()}
    suffix = "" if seed == 0 else f"-seed{seed}"
    paths: dict[str, list[Path]] = {}
    for upto in range(shard_size, max(counts.values()) + shard_size, shard_size):
        for language, count in counts.items():
            paths[language] = build_dataset(runtime, sentences[language], data / f"train-{language}{suffix}",
                                            min(count, upto), shard_size, seed=seed, language=language)
    return [p for language_paths in paths.values() for p in language_paths]


if __name__ == "__main__":
    raise SystemExit(main())
