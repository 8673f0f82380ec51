"""Whisper's special token ids, read from the tokenizer and generation config of any checkpoint."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

TIME_PRECISION = 0.02  # seconds per timestamp token step


@dataclass(frozen=True)
class WhisperTokens:
    sot: int
    eot: int
    sot_prev: int
    no_timestamps: int
    no_speech: int
    transcribe: int
    translate: int
    lang_to_id: dict[str, int]  # "en" -> id of <|en|>
    suppress: tuple[int, ...]
    begin_suppress: tuple[int, ...]
    max_initial_timestamp_index: int | None
    is_multilingual: bool

    @property
    def timestamp_begin(self) -> int:
        # the tokenizer of a converted checkpoint may lack the timestamp tokens; their ids follow
        # <|notimestamps|> in 0.02 s steps all the same
        return self.no_timestamps + 1

    @classmethod
    def from_pretrained(cls, tokenizer, generation_config) -> "WhisperTokens":
        ids = tokenizer.convert_tokens_to_ids
        gc = generation_config
        lang_to_id = {token.strip("<|>"): i for token, i in (getattr(gc, "lang_to_id", None) or {}).items()}
        task_to_id = getattr(gc, "task_to_id", None) or {}
        no_speech = ids("<|nospeech|>")
        if no_speech in (None, tokenizer.unk_token_id):
            no_speech = ids("<|nocaptions|>")
        return cls(
            sot=gc.decoder_start_token_id,
            eot=gc.eos_token_id if isinstance(gc.eos_token_id, int) else gc.eos_token_id[0],
            sot_prev=ids("<|startofprev|>"),
            no_timestamps=gc.no_timestamps_token_id,
            no_speech=no_speech,
            transcribe=task_to_id.get("transcribe", ids("<|transcribe|>")),
            translate=task_to_id.get("translate", ids("<|translate|>")),
            lang_to_id=lang_to_id,
            suppress=tuple(gc.suppress_tokens or ()),
            begin_suppress=tuple(gc.begin_suppress_tokens or ()),
            max_initial_timestamp_index=getattr(gc, "max_initial_timestamp_index", None),
            is_multilingual=bool(getattr(gc, "is_multilingual", len(lang_to_id) > 1)),
        )

    def prefix(self, language: str | None, task: str, timestamps: bool) -> list[int]:
        """The forced start of every window: <|sot|> [<|lang|> <|task|>] [<|notimestamps|>]."""
        tokens = [self.sot]
        if self.is_multilingual:
            if language not in self.lang_to_id:
                raise ValueError(f"unknown language {language!r}; known: {', '.join(sorted(self.lang_to_id))}")
            tokens += [self.lang_to_id[language], self.translate if task == "translate" else self.transcribe]
        elif task == "translate" or language not in (None, "en"):
            raise ValueError("this model is English-only: it transcribes English and cannot translate")
        if not timestamps:
            tokens.append(self.no_timestamps)
        return tokens

    def language_of(self, tokens: list[int]) -> str | None:
        """The language a window's forced prefix names (None before it is chosen); "en" for an
        English-only model."""
        if not self.is_multilingual:
            return "en"
        if self.sot not in tokens:
            return None
        after = tokens.index(self.sot) + 1
        return self.id_to_lang.get(tokens[after]) if after < len(tokens) else None

    @cached_property
    def id_to_lang(self) -> dict[int, str]:
        return {i: code for code, i in self.lang_to_id.items()}

    def is_timestamp(self, token: int) -> bool:
        return token >= self.timestamp_begin

    def timestamp_seconds(self, token: int) -> float:
        return (token - self.timestamp_begin) * TIME_PRECISION
