"""Teacher-forced agreement of trained drafts with the main model, per source, language and kind of token.

    python -m whisperspec.distill.agreement --drafts old.safetensors new.safetensors \\
        --source asterisk-es:es --source /path/to/clips:fr --source talk.flac:en:longform \\
        --shards distill-data/val-fr ... --data-dir labels/

A source is SOURCE:LANGUAGE[:longform]: a data set name, folder, manifest or file, and the language
it is decoded in. The main model labels its short recordings joined into windows (with pauses), once
plain and once with timestamps; a `longform` source is transcribed as `Transcriber` walks a long file
(timestamps, each window after the previous text) and every window it decoded is kept with its
prompt. Labels are cached under --data-dir. `--shards` adds labelled folders as they are (the
held-out synthetic windows `whisperspec distill` wrote). Each draft then predicts every token of the
main model's greedy sequence from the ones before it, reading a prompted window as it drafts
(without the prompt unless its file says otherwise; `--both-views` also reports the other way), and
the share it gets right is reported per source and language, for text and timestamp tokens apart,
with the share of base's text tokens its head scores at all (`head_coverage`).
That is acceptance at lookahead 1; longer drafts are accepted less often.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import numpy as np
import torch

from whisperspec.audio import N_FRAMES, N_SAMPLES, SAMPLE_RATE, load_audio, log_mel_spectrogram
from whisperspec.distill.labels import Example, label_windows, load_examples, save_shard, teacher_forced_examples
from whisperspec.distill.speech import silence
from whisperspec.whisper.decode import DecodeOptions, WindowDecoder


def joined_windows(paths: list[Path], max_seconds: float = 25.0, seed: int = 0) -> list[np.ndarray]:
    """Consecutive recordings joined, with short pauses, into windows of at most `max_seconds`."""
    rng = random.Random(seed)
    windows, pieces, seconds = [], [], 0.0
    for path in paths:
        audio = load_audio(path)[:int(max_seconds * SAMPLE_RATE)]
        if pieces and seconds + len(audio) / SAMPLE_RATE > max_seconds:
            windows.append(np.concatenate(pieces))
            pieces, seconds = [], 0.0
        pieces += [audio, silence(rng.uniform(0.3, 1.0))]
        seconds += len(pieces[-2]) / SAMPLE_RATE + len(pieces[-1]) / SAMPLE_RATE
    if pieces:
        windows.append(np.concatenate(pieces))
    return windows


def label_source(runtime, paths: list[Path], language: str, folder: Path, longform: bool = False) -> list[Path]:
    """Labelled shards of a source (cached in `folder`)."""
    path = folder / "shard-0000.pt"
    if path.is_file():
        return [path]
    if longform:
        examples = [e for p in paths for e in longform_examples(runtime, p, language)]
    else:
        windows = joined_windows(paths)
        examples = []
        for timestamps in (False, True):
            options = DecodeOptions(language=language, timestamps=timestamps, temperatures=(0.0,))
            for start in range(0, len(windows), 16):
                batch = windows[start:start + 16]
                examples += label_windows(runtime, batch, [[] for _ in batch], options)
    save_shard(examples, path)
    return [path]


def longform_examples(runtime, path: Path, language: str) -> list[Example]:
    """Every window of a long-form transcription of `path` (the walk `Transcriber` takes: timestamps,
    each window after the previous text), with the prompt it was decoded after."""
    from whisperspec.whisper.longform import LongformWalk

    audio = load_audio(path)
    mel = log_mel_spectrogram(audio, runtime.n_mels, padding=N_SAMPLES)
    decoder, examples = WindowDecoder(runtime), []
    walk = LongformWalk(runtime, mel, len(audio) // (N_SAMPLES // N_FRAMES), DecodeOptions(language=language))
    while not walk.done:
        window, prompt = runtime.encode(walk.window_mel()[None]), walk.prompt
        result = decoder.decode(window, walk.options, prompt)
        examples.extend(teacher_forced_examples(runtime, window, [list(prompt)], walk.options, [result]))
        walk.advance(result)
    return examples


def token_agreement(trainer, examples: list[Example], special) -> dict[str, list[int]]:
    """{kind: [agreed, total]} for text tokens, timestamp tokens and all (end-of-text included)."""
    counts = {"text": [0, 0], "timestamp": [0, 0], "all": [0, 0]}
    with torch.no_grad():
        for start in range(0, len(examples), 8):
            batch = examples[start:start + 8]
            cross = [trainer.cross_kv(e.encoder_hidden) for e in batch]
            tokens, _, labels, layer_cross = trainer.batch(batch, cross)
            predicted = trainer.forward(tokens, layer_cross).argmax(-1)
            for row, example in enumerate(batch):
                begin, length = example.sample_begin - 1, len(example.tokens) - 1
                for position in range(begin, length):
                    target = example.tokens[position + 1]
                    kind = "timestamp" if special.is_timestamp(target) else "text" if target < special.eot else None
                    hit = int(predicted[row, position] == labels[row, position])
                    for name in filter(None, (kind, "all")):
                        counts[name][0] += hit
                        counts[name][1] += 1
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m whisperspec.distill.agreement", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="base")
    parser.add_argument("--drafts", nargs="+", type=Path, required=True)
    parser.add_argument("--source", action="append", default=[], metavar="SOURCE:LANGUAGE[:longform]")
    parser.add_argument("--limit", type=int, default=32, help="recordings per (non-long-form) source")
    parser.add_argument("--shards", nargs="*", type=Path, default=[], help="folders of labelled shards")
    parser.add_argument("--data-dir", type=Path, required=True, help="where the sources' labels are cached")
    parser.add_argument("--both-views", action="store_true",
                        help="also score prompted windows read the other way (with / without the prompt)")
    parser.add_argument("--out", type=Path, default=None, help="also write the table as JSON")
    args = parser.parse_args(argv)

    from whisperspec.models.draft_file import load_draft
    from whisperspec.distill.recordings import recording_paths
    from whisperspec.distill.train import DraftTrainer, prompt_views
    from whisperspec.models import load_whisper
    from whisperspec.whisper.model import WhisperRuntime

    runtime = WhisperRuntime.from_bundle(load_whisper(args.model))
    sets: dict[str, list[Example]] = {}
    for spec in args.source:
        source, language, *mode = spec.rsplit(":", 2) if spec.endswith(":longform") else spec.rsplit(":", 1)
        paths = recording_paths([source], training=False)  # measuring: measure-only sets are what it is for
        paths = paths if mode else paths[:args.limit]
        path = Path(source)  # named by its folder (a manifest's, a file's) and, for a file, its name
        label = path.parent.name if path.suffix == ".jsonl" else f"{path.parent.name}-{path.stem}" if path.is_file() else path.name
        name = f"{label}:{language}{':longform' if mode else ''}"
        folder = args.data_dir / name.replace(":", "-").replace("/", "-")
        sets[name] = load_examples(label_source(runtime, paths, language, folder, longform=bool(mode)))
    for folder in args.shards:
        sets[folder.name] = load_examples(sorted(folder.glob("shard-*.pt")))

    table = []
    for draft_path in args.drafts:
        draft, vocab_ids = load_draft(draft_path, runtime.model)
        trainer = DraftTrainer(draft.model.decoder, vocab_ids, runtime.model.proj_out.weight,
                               cross_pool=draft.config.cross_attention_pool, special=runtime.special)
        reads = draft.config.reads_prompt
        views = ["with" if reads else "without"] + (["without" if reads else "with"] if args.both_views else [])
        for name, examples in sets.items():
            for view in views:
                viewed, _ = prompt_views(examples, [None] * len(examples), view, runtime.special)
                counts = token_agreement(trainer, viewed, runtime.special)
                prompted = sum(e.tokens[0] == runtime.special.sot_prev for e in examples)
                text = [t for e in examples for t in e.tokens[e.sample_begin:] if t < runtime.special.eot]
                scored = set(vocab_ids.tolist())
                row = {"draft": draft_path.name, "set": name, "windows": len(examples), "prompted": prompted,
                       "view": view, **{f"{k}": round(a / max(t, 1), 4) for k, (a, t) in counts.items()},
                       "tokens": counts["all"][1], "timestamp_tokens": counts["timestamp"][1],
                       "head_coverage": round(sum(t in scored for t in text) / max(len(text), 1), 4)}
                table.append(row)
                print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
