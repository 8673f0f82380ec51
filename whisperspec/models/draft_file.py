"""Trained draft decoders as small files of their own: only the weights the draft does not share.

A distilled draft (`whisperspec distill`) reuses the main model's encoder, token and position
embeddings and (a slice of) its output head, so its file holds just its decoder layers and final
layer norm, in float16 (base: 2 layers, ~17 MB), the ids of the tokens its head scores, and
metadata saying which main model it belongs to (a fingerprint of the main embeddings), how many
layers it has, how many encoder frames its cross-attention averages into one, whether it reads
long-form's previous-text prompt, and the languages it was trained on with its held-out agreement
in each (`draft_languages`: what a drafter that chooses per language reads).
`shipped_drafts(main)` lists the drafts shipped for a main model with the languages each agrees
most in; `shipped_draft(main, language)` picks the one for a language.
"""

from __future__ import annotations

import hashlib
import json
import weakref
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from whisperspec.atomic import atomic_path
from whisperspec.kept import kept_json
from whisperspec.resources import asset

SHARED = ("embed_tokens.", "embed_positions.")  # the main model's, never stored
VOCAB_IDS = "vocab_ids"  # the full-vocabulary ids of the draft head's rows
LANGUAGES = "languages"  # metadata: JSON {language code: held-out teacher-forced agreement}
KIND = "draft_kind"  # metadata: the draft's layout: "distilled" (distil-whisper's) or "features"


_fingerprints: "weakref.WeakKeyDictionary[torch.nn.Module, str]" = weakref.WeakKeyDictionary()


def fingerprint(model: torch.nn.Module) -> str:
    """Identifies the main model a draft was trained for (its token embeddings, exactly).

    Hashing base's 106 MB of embeddings takes ~50 ms, a share of a short file's whole run worth
    sparing: once per loaded model, and kept (`whisperspec.kept`) for the weights file the model
    was read from (`weights_file`, where the reader records it) for the next process."""
    if model not in _fingerprints:
        _fingerprints[model] = kept_json(getattr(model, "weights_file", None), "fingerprint",
                                         lambda: _hash_embeddings(model))
    return _fingerprints[model]


def _hash_embeddings(model: torch.nn.Module) -> str:
    weight = model.model.decoder.embed_tokens.weight.detach().float().contiguous()
    return hashlib.sha256(memoryview(weight.numpy()).cast("B")).hexdigest()[:16]  # read in place, not copied


def save_draft(path: Path, main: torch.nn.Module, draft_decoder: torch.nn.Module, vocab_ids: torch.Tensor,
               info: dict, cross_pool: int = 1, languages: dict[str, float] | None = None,
               reads_prompt: bool = False, kind: str = "distilled") -> Path:
    """Write the draft's own weights (float16) and the ids of the tokens its head scores;
    `languages`: {language code: teacher-forced agreement on its held-out windows}."""
    tensors = {name: value.detach().half().contiguous() for name, value in draft_decoder.state_dict().items()
               if not name.startswith(SHARED)}
    tensors[VOCAB_IDS] = vocab_ids.to(torch.int32).contiguous()
    metadata = {"main_fingerprint": fingerprint(main), "decoder_layers": str(len(draft_decoder.layers)),
                "vocab_size_kept": str(len(vocab_ids)), "cross_attention_pool": str(cross_pool),
                "info": json.dumps(info), "reads_prompt": str(int(reads_prompt)), KIND: kind}
    if languages is not None:
        metadata[LANGUAGES] = json.dumps({code: round(value, 4) for code, value in languages.items()})
    with atomic_path(path) as temporary:
        save_file(tensors, str(temporary), metadata=metadata)
    return path


def read_metadata(path: Path) -> dict:
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        return dict(f.metadata())


def load_draft(path: Path, main: torch.nn.Module) -> tuple[torch.nn.Module, torch.Tensor]:
    """(the draft as a Whisper model sharing the main encoder and embeddings, the ids its head scores)."""
    from whisperspec.models.draft_layout import draft_from_main
    from whisperspec.whisper.drafters.features import KIND as FEATURES, feature_draft_from_main

    meta = read_metadata(path)
    if meta["main_fingerprint"] != fingerprint(main):
        raise ValueError(f"{path} was trained for another main model (fingerprint {meta['main_fingerprint']})")
    layers = [0] * int(meta["decoder_layers"])
    draft = feature_draft_from_main(main, layers) if draft_kind(path) == FEATURES else draft_from_main(main, layers)
    draft.config.cross_attention_pool = int(meta.get("cross_attention_pool", 1))  # read by the drafter
    draft.config.reads_prompt = meta.get("reads_prompt") == "1"  # and so is this
    weights = load_file(str(path))
    vocab_ids = weights.pop(VOCAB_IDS).long()
    missing, unexpected = draft.model.decoder.load_state_dict(
        {name: value.to(main.dtype) for name, value in weights.items()}, strict=False)
    if unexpected or any(not name.startswith(SHARED) for name in missing):
        raise ValueError(f"{path} does not fit a {meta['decoder_layers']}-layer draft: {missing or unexpected}")
    return draft, vocab_ids


def draft_kind(path: Path) -> str:
    """The draft's layout: "distilled" (a distil-whisper-style decoder) or "features" (reads the main
    decoder's features: `whisperspec.whisper.drafters.features`)."""
    return read_metadata(path).get(KIND, "distilled")


def draft_languages(path: Path) -> dict[str, float | None]:
    """The languages a draft was trained for, each with its held-out agreement with the main model
    where the file records it. Drafts from before the recipe spoke other languages were trained on
    English speech only."""
    meta = read_metadata(path)
    if LANGUAGES in meta:
        return json.loads(meta[LANGUAGES])
    return {"en": json.loads(meta.get("info", "{}")).get("val_agreement")}


def shipped_drafts(main: torch.nn.Module, kind: str = "distilled") -> dict[Path, set[str]]:
    """The draft files of layout `kind` in whisperspec/assets trained for this main model, each with
    the languages it is the best shipped draft for (the highest recorded held-out agreement in that
    language)."""
    mark = fingerprint(main)
    files = [path for path in sorted(asset("").glob("*.safetensors"))
             if read_metadata(path).get("main_fingerprint") == mark and draft_kind(path) == kind]
    covered = {path: draft_languages(path) for path in files}
    best = {language: max((p for p in files if language in covered[p]), key=lambda p: covered[p][language] or 0.0)
            for language in {language for languages in covered.values() for language in languages}}
    return {path: {lang for lang, chosen in best.items() if chosen == path} for path in files
            if path in best.values()}


def shipped_draft(main: torch.nn.Module, language: str | None = None) -> Path | None:
    """The shipped draft for this main model that is best for `language` (default English), if one
    is: the English draft for English, the multilingual one for the other languages it was trained for."""
    language = language or "en"
    return next((path for path, languages in shipped_drafts(main).items() if language in languages), None)