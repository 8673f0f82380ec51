"""Evaluation data by name or path: JSONL manifests (`manifest`), folders with .txt sidecars,
Hugging Face data sets, and the Asterisk recipe (`asterisk`)."""

from __future__ import annotations

from pathlib import Path

from whisperspec.evaluation import asterisk
from whisperspec.evaluation.manifest import Utterance, read_manifest, write_manifest

__all__ = ["AUDIO_SUFFIXES", "Utterance", "load_dataset", "read_folder", "read_manifest", "write_manifest"]

AUDIO_SUFFIXES = {".wav", ".flac", ".ogg", ".mp3", ".m4a", ".opus", ".g722"}


def read_folder(folder: Path, language: str | None = "en") -> list[Utterance]:
    """Audio files with a `.txt` reference beside each (same stem); files without one are skipped."""
    folder = Path(folder)
    return [Utterance(audio.stem, str(audio), audio.with_suffix(".txt").read_text(encoding="utf-8").strip(), language)
            for audio in sorted(folder.iterdir())
            if audio.suffix.lower() in AUDIO_SUFFIXES and audio.with_suffix(".txt").is_file()]


def huggingface_dataset(spec: str, limit: int | None = None) -> list[Utterance]:
    """`hf:NAME[:CONFIG[:SPLIT]]`, e.g. hf:librispeech_asr:clean:test — any Hugging Face `datasets`
    audio set the user has (offline: from their datasets cache). Audio is written once to FLAC in
    our cache, so every system (faster-whisper in its own process too) reads plain files."""
    import hashlib

    import soundfile as sf

    from whisperspec.cache import cache_dir

    try:
        import datasets
    except ImportError as error:
        raise ValueError("hf: data sets need the `datasets` package: pip install datasets") from error
    name, config, split = (spec.split(":", 3)[1:] + [None, None])[:3]
    data = datasets.load_dataset(name, config, split=split or "test")
    text_column = next((c for c in ("text", "sentence", "transcription", "normalized_text")
                        if c in data.column_names), None)
    if text_column is None or "audio" not in data.column_names:
        raise ValueError(f"{spec}: needs an 'audio' column and one of text/sentence/transcription")
    folder = cache_dir() / "datasets" / ("hf-" + hashlib.sha1(spec.encode()).hexdigest()[:12])
    folder.mkdir(parents=True, exist_ok=True)
    utterances = []
    for index, row in enumerate(data.select(range(min(limit or len(data), len(data))))):
        path = folder / f"{index:06d}.flac"
        samples, rate = _decoded(row["audio"])
        if not path.is_file():
            sf.write(path, samples, rate)
        utterances.append(Utterance(str(row.get("id", index)), str(path), row[text_column],
                                    row.get("language", "en"), len(samples) / rate))
    return utterances


def _decoded(audio):
    """datasets 3 gives {"array", "sampling_rate"}; datasets 4 a torchcodec AudioDecoder."""
    if isinstance(audio, dict):
        return audio["array"], audio["sampling_rate"]
    decoded = audio.get_all_samples()
    return decoded.data.mean(dim=0).numpy(), decoded.sample_rate


def load_dataset(name_or_path: str, limit: int | None = None) -> list[Utterance]:
    """A manifest (.jsonl), a folder with sidecars, hf:NAME[:CONFIG[:SPLIT]], or a built-in name:
    asterisk-en, asterisk-es, asterisk-en-long, asterisk-es-long, and asterisk-en-distill (the prompts kept for
    `whisperspec distill --audio`, never in an evaluation set)."""
    builders = {"asterisk-en": lambda: asterisk.evaluation_prompts("en"),
                "asterisk-es": lambda: asterisk.prompts("es"),  # no distillation split in Spanish
                "asterisk-en-long": lambda: asterisk.long_form("en"),
                "asterisk-es-long": lambda: asterisk.long_form("es"),
                "asterisk-en-distill": lambda: asterisk.distill_prompts("en")}
    path = Path(name_or_path)
    if name_or_path.startswith("hf:"):
        return huggingface_dataset(name_or_path, limit)
    if name_or_path in builders:
        utterances = builders[name_or_path]()
    elif path.is_dir():
        utterances = read_folder(path)
    elif path.is_file():
        utterances = read_manifest(path)
    else:
        raise ValueError(f"unknown data set {name_or_path!r}: use a .jsonl manifest, a folder of audio with "
                         f".txt sidecars, hf:NAME[:CONFIG[:SPLIT]], or one of {', '.join(builders)}")
    return utterances[:limit] if limit else utterances
