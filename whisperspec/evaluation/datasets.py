"""Evaluation data by name or path: JSONL manifests (`manifest`), folders with .txt sidecars,
Hugging Face data sets, and the built-in sets of packaged real speech (`asterisk`, `tuxpaint`,
`samples`; docs/DATASETS.md), some of which are kept for measuring only (MEASURE_ONLY)."""

from __future__ import annotations

from pathlib import Path

from whisperspec.evaluation import asterisk, samples, tuxpaint
from whisperspec.evaluation.manifest import Utterance, read_manifest, write_manifest

__all__ = ["AUDIO_SUFFIXES", "BUILT_IN", "MEASURE_ONLY", "Utterance", "check_trainable", "load_dataset", "read_folder",
           "read_manifest", "write_manifest"]

AUDIO_SUFFIXES = {".wav", ".flac", ".ogg", ".mp3", ".m4a", ".opus", ".g722", ".gsm"}

# Built-in sets by name. Sets with empty references (community prompts, samples) are for
# distillation, or for speed where WER is not reported.
BUILT_IN = {
    "asterisk-en": lambda: asterisk.evaluation_prompts("en"),
    "asterisk-es": lambda: asterisk.prompts("es"),  # no distillation split in Spanish
    "asterisk-en-long": lambda: asterisk.long_form("en"),
    "asterisk-en-pauses": lambda: asterisk.long_form_with_pauses("en"),  # 2-8 s pauses of room noise (VAD)
    "asterisk-en-distill": lambda: asterisk.distill_prompts("en"),
    **{f"asterisk-{lang}": (lambda lang=lang: asterisk.prompts(lang)) for lang in ("it", "ru")},
    **{f"asterisk-{lang}-long": (lambda lang=lang: asterisk.long_form(lang)) for lang in ("es", "it", "ru")},
    **{name: (lambda name=name: asterisk.community_prompts(name)) for name in asterisk.COMMUNITY},
    **{f"tuxpaint-{lang}": (lambda lang=lang: tuxpaint.descriptions(lang)) for lang in tuxpaint.LANGUAGES},
    **{f"tuxpaint-{lang}-long": (lambda lang=lang: tuxpaint.long_form(lang)) for lang in tuxpaint.LANGUAGES},
    "codec2-en": samples.codec2_speech,
    "ami-en": lambda: samples.ami_excerpts("test"),
    "ami-en-train": lambda: samples.ami_excerpts("train"),
}
# Sources no draft is trained or tuned on, so that speed and acceptance measured on them say how a
# draft does on speech it never met: an English and several non-English speakers and channels.
# `whisperspec distill --audio` refuses them. (asterisk-it-menardi: the Italian prompt texts of
# asterisk-it, read by another speaker.)
MEASURE_ONLY = frozenset({"codec2-en", "ami-en", "asterisk-it", "asterisk-it-long", "asterisk-it-menardi",
                          *(name for name in BUILT_IN if name.startswith("tuxpaint-"))})


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


def check_trainable(source: str) -> None:
    """A ValueError for a built-in set kept for measuring only."""
    if source in MEASURE_ONLY:
        raise ValueError(f"{source} is kept for measuring only (docs/DATASETS.md): no draft is trained or tuned on it")


def load_dataset(name_or_path: str, limit: int | None = None) -> list[Utterance]:
    """A manifest (.jsonl), a folder with sidecars, hf:NAME[:CONFIG[:SPLIT]], or a BUILT_IN name
    (asterisk-en-distill: the prompts kept for `whisperspec distill --audio`, never in an
    evaluation set)."""
    path = Path(name_or_path)
    if name_or_path.startswith("hf:"):
        return huggingface_dataset(name_or_path, limit)
    if name_or_path in BUILT_IN:
        utterances = BUILT_IN[name_or_path]()
    elif path.is_dir():
        utterances = read_folder(path)
    elif path.is_file():
        utterances = read_manifest(path)
    else:
        raise ValueError(f"unknown data set {name_or_path!r}: use a .jsonl manifest, a folder of audio with "
                         f".txt sidecars, hf:NAME[:CONFIG[:SPLIT]], or one of {', '.join(BUILT_IN)}")
    return utterances[:limit] if limit else utterances
