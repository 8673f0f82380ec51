"""`whisperspec distill`: train a draft decoder for a main model, offline, on synthetic speech
and, if given, unlabelled recordings.

    whisperspec distill --model base --out my-draft.safetensors  [--init DRAFT --seed 2]
    whisperspec distill --init DRAFT --audio my-recordings/ --out my-draft.safetensors

1. sentences from Debian's `fortunes` (or --corpus FILE), spoken by espeak-ng, Flite and Piper voices;
   with --audio, windows of real recordings as well (`whisperspec.distill.recordings`);
2. labelled by the main model (greedy tokens, decoder hidden states), cached shard by shard;
3. a draft of --layers copies of main decoder layers (or --init: a trained draft's layers) trained to
   imitate it, best held-out epoch kept;
4. saved as a small file of its own weights (`whisperspec.distill.draft_file`): `--draft FILE`, or
   `--draft trained` for the one shipped in whisperspec/assets for the main model.
Held-out windows are spoken from sentences kept out of training (and, with --audio, are every
tenth recording). Targets come from the main model, so no transcripts are needed; no evaluation
audio or text is used (asterisk-en-distill is a split no evaluation set reads).
"""

from __future__ import annotations

import argparse
import json
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
    parser.add_argument("--val-windows", type=int, default=64)
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
    parser.add_argument("--corpus", type=Path, default=None, help="text file (default: Debian fortunes)")
    parser.add_argument("--data-dir", type=Path, default=None, help="labelled shards (default: in the cache)")
    args = parser.parse_args(argv)
    for source in args.audio or []:  # before any model loads
        try:
            check_trainable(source)
        except ValueError as error:
            parser.error(f"--audio: {error}")
    report = distill(args)
    print(json.dumps(report, indent=2))
    return 0


def distill(args) -> dict:
    from whisperspec.distill.corpus import load_sentences
    from whisperspec.distill.labels import build_dataset, load_examples
    from whisperspec.distill.train import DraftTrainer, TrainConfig, draft_vocabulary, train
    from whisperspec.models import load_whisper
    from whisperspec.distill.draft_file import load_draft, save_draft
    from whisperspec.distill.layout import draft_from_main
    from whisperspec.whisper.model import WhisperRuntime

    runtime = WhisperRuntime.from_bundle(load_whisper(args.model))
    sentences = load_sentences(args.corpus)
    held = max(len(sentences) // 20, 1)  # 5% of the sentences are only ever spoken for validation
    data = args.data_dir or cache_dir() / "distill" / Path(args.model).name
    started = time.perf_counter()
    val_paths = build_dataset(runtime, sentences[-held:], data / "val", args.val_windows, seed=1)
    train_folder = data / ("train" if args.seed == 0 else f"train-seed{args.seed}")
    train_paths = build_dataset(runtime, sentences[:-held], train_folder, args.windows, seed=args.seed)
    if args.audio:
        from whisperspec.distill.recordings import label_recordings, recording_paths

        real_train, real_val = label_recordings(runtime, recording_paths(args.audio), sentences[:-held], data,
                                                seed=args.seed)
        train_paths, val_paths = train_paths + real_train, val_paths + real_val
    label_seconds = time.perf_counter() - started
    train_set, val_set = load_examples(train_paths), load_examples(val_paths)

    main_model = runtime.model
    if args.init:
        draft, _ = load_draft(args.init, main_model)
    else:
        draft = draft_from_main(main_model, [int(i) for i in args.layers.split(",")])
    pool = args.cross_pool or (getattr(draft.config, "cross_attention_pool", 1) if args.init else 4)
    corpus = [runtime.tokenizer.encode(" " + s, add_special_tokens=False) for s in sentences[:-held]]
    vocab_ids = draft_vocabulary(train_set, runtime.vocab_size, runtime.special.eot, args.vocab, corpus)
    trainer = DraftTrainer(draft.model.decoder, vocab_ids, main_model.proj_out.weight, dropout=args.dropout,
                           cross_pool=pool)
    config = TrainConfig(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr)
    best = train(trainer, train_set, val_set, config)
    report = {"model": args.model, "layers": args.layers, "init": args.init and Path(args.init).name,
              "seed": args.seed, "audio": args.audio, "vocab_size_kept": args.vocab, "cross_pool": pool, "dropout": args.dropout,
              "train_windows": len(train_set), "val_windows": len(val_set),
              "train_tokens": sum(len(e.tokens) - e.sample_begin for e in train_set),
              "label_seconds": round(label_seconds), **{k: round(v, 4) for k, v in best.items()},
              "threads": torch.get_num_threads()}
    save_draft(args.out, main_model, draft.model.decoder, vocab_ids, report, cross_pool=pool)
    report["out"] = str(args.out)
    return report


if __name__ == "__main__":
    raise SystemExit(main())
