"""A Whisper checkpoint folder read without transformers: its weights as a module tree, its
tokenizer, its configs.

Our runtime only *reads* a model's weights (the encoder's fused products, the KV decoder, the drafts
all run their own passes), so it needs the weights in transformers' layout, not transformers'
classes. Importing transformers' Whisper modelling costs more than a whole short transcription
(docs/BENCHMARKS-HISTORY.md, "Measurements behind the code"); this module builds the same tree of
parameters (same names, same shapes, so `state_dict()` matches `WhisperForConditionalGeneration`'s
key for key) straight from `model.safetensors`, and the tokenizer from `tokenizer.json` with the
`tokenizers` library (transformers' WhisperTokenizer decodes text tokens with that same library).

The tree has no `forward`: whatever needs transformers' own computation (its `generate()` in
`whisperspec evaluate`, the reference checks in the tests) loads transformers' classes
(`load_whisper(..., transformers=True)`).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

WEIGHTS = "model.safetensors"


class Config(SimpleNamespace):
    """config.json / generation_config.json as attributes (what transformers' config objects offer
    the code that reads them: `config.d_model`, `generation_config.lang_to_id`, ...)."""

    @classmethod
    def from_file(cls, path: Path) -> "Config":
        return cls(**json.loads(Path(path).read_text(encoding="utf-8")))


def can_read(folder: Path) -> bool:
    """A transformers Whisper folder this module reads: one safetensors file, a tokenizer.json."""
    if not all((folder / name).is_file() for name in ("config.json", WEIGHTS, "tokenizer.json")):
        return False
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    return config.get("model_type") == "whisper" and config.get("activation_function") == "gelu"


class Attention(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.num_heads, self.head_dim = n_heads, d_model // n_heads
        self.scaling = self.head_dim ** -0.5
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)  # Whisper's keys have no bias
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)


class EncoderLayer(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        d = config.d_model
        self.self_attn = Attention(d, config.encoder_attention_heads)
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.activation_fn = nn.GELU()
        self.fc1, self.fc2 = nn.Linear(d, config.encoder_ffn_dim), nn.Linear(config.encoder_ffn_dim, d)
        self.final_layer_norm = nn.LayerNorm(d)


class DecoderLayer(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        d = config.d_model
        self.self_attn = Attention(d, config.decoder_attention_heads)
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.encoder_attn = Attention(d, config.decoder_attention_heads)
        self.encoder_attn_layer_norm = nn.LayerNorm(d)
        self.activation_fn = nn.GELU()
        self.fc1, self.fc2 = nn.Linear(d, config.decoder_ffn_dim), nn.Linear(config.decoder_ffn_dim, d)
        self.final_layer_norm = nn.LayerNorm(d)


class AudioEncoder(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.config, d = config, config.d_model
        self.conv1 = nn.Conv1d(config.num_mel_bins, d, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(d, d, kernel_size=3, stride=2, padding=1)
        self.embed_positions = _embedding(config.max_source_positions, d)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.encoder_layers))
        self.layer_norm = nn.LayerNorm(d)


class TextDecoder(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.config, d = config, config.d_model
        self.embed_tokens = _embedding(config.vocab_size, d)
        self.embed_positions = _embedding(config.max_target_positions, d)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.decoder_layers))
        self.layer_norm = nn.LayerNorm(d)


def _embedding(rows: int, dim: int) -> nn.Embedding:
    # given its weight, nn.Embedding skips the random init, which on the meta device would import
    # torch's reference implementations (seconds of start-up) to draw nothing
    return nn.Embedding(rows, dim, _weight=torch.empty(rows, dim))


class WhisperWeights(nn.Module):
    """Whisper's parameters in `WhisperForConditionalGeneration`'s layout (`model.encoder`,
    `model.decoder`, `proj_out` tied to the token embeddings), with its `config` and
    `generation_config`. Built like transformers' class, `WhisperWeights(config)`, so a draft can
    be made of its layers (`whisperspec.models.draft_layout`)."""

    def __init__(self, config: Config, generation_config: Config | None = None):
        super().__init__()
        self.config, self.generation_config = config, generation_config
        self.model = nn.Module()
        self.model.encoder, self.model.decoder = AudioEncoder(config), TextDecoder(config)
        self.proj_out = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.proj_out.weight = self.model.decoder.embed_tokens.weight

    @property
    def dtype(self) -> torch.dtype:
        return self.proj_out.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.proj_out.weight.device

    @classmethod
    def from_folder(cls, folder: Path, dtype: torch.dtype = torch.float32) -> "WhisperWeights":
        from safetensors.torch import load_file

        config = Config.from_file(folder / "config.json")
        generation = folder / "generation_config.json"
        with torch.device("meta"):  # a skeleton: every weight comes from the file, none is initialised
            model = cls(config, Config.from_file(generation) if generation.is_file() else None)
        weights = {name: tensor.to(dtype) for name, tensor in load_file(str(folder / WEIGHTS)).items()}
        weights.setdefault("proj_out.weight", weights["model.decoder.embed_tokens.weight"])
        model.load_state_dict(weights, strict=True, assign=True)
        model.proj_out.weight = model.model.decoder.embed_tokens.weight  # tied again after `assign`
        model.weights_file = folder / WEIGHTS  # what derived forms cached beside it are keyed by
        return model.eval()


class WhisperTextTokenizer:
    """Whisper's byte-level BPE tokenizer from a `tokenizer.json`, with the calls whisperspec makes
    of transformers' WhisperTokenizer, and the same results.

    Encoding text (prompts, hotwords) runs the `tokenizers` library, loaded on first use: parsing a
    tokenizer.json (50k merges) is a noticeable part of a short file's first transcription, which
    never encodes anything (docs/BENCHMARKS-HISTORY.md, session 28). What a transcription does need
    (the ids of special tokens, ids decoded to text) reads a table of the tokens kept from the file
    (`whisperspec.kept`, much quicker to read) and decodes as the library's byte-level decoder does
    (tests/test_models.py holds the two equal)."""

    def __init__(self, tokenizer_json: Path, eos_token: str = "<|endoftext|>"):
        from whisperspec.kept import kept_json

        self.path = Path(tokenizer_json)
        table = kept_json(self.path, "tokens", lambda: token_table(self.path))
        self.tokens: list[str | None] = table["tokens"]
        self.added, self.special = table["added"], frozenset(table["special"])
        self.size, self.byte_level = table["size"], table["byte_level"]
        self.eos_token_id = self.unk_token_id = self.ids.get(eos_token)
        # transformers' meaning: the ids of the named special tokens (bos, eos, unk, pad), which
        # Whisper's tokenizer all spells <|endoftext|>; <|startoftranscript|> & co are added tokens
        self.all_special_ids = [self.eos_token_id]

    @functools.cached_property
    def backend(self):
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(self.path))

    @functools.cached_property
    def ids(self) -> dict[str, int]:
        """token -> id as `tokenizers` finds it: an added token's id before the model vocabulary's."""
        ids = {token: i for i, token in enumerate(self.tokens) if token is not None}
        ids.update({self.tokens[i]: i for i in self.added})
        return ids

    def __len__(self) -> int:
        return self.size

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids, skip_special_tokens: bool = False, clean_up_tokenization_spaces: bool = False) -> str:
        # Whisper's tokenizer does not clean up tokenization spaces: the flag changes nothing here
        if not self.byte_level:
            return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)
        tokens = (self.convert_ids_to_tokens(int(i)) for i in ids)
        kept = (t for t in tokens if t is not None and not (skip_special_tokens and t in self.special))
        return b"".join(_token_bytes(t) for t in kept).decode("utf-8", errors="replace")

    def convert_tokens_to_ids(self, tokens: str | list[str]) -> int | list[int]:
        if not isinstance(tokens, str):
            return [self.convert_tokens_to_ids(token) for token in tokens]
        return self.ids.get(tokens, self.unk_token_id)

    def convert_ids_to_tokens(self, ids: int | list[int]) -> str | None | list[str | None]:
        if not isinstance(ids, int):
            return [self.convert_ids_to_tokens(i) for i in ids]
        return self.tokens[ids] if 0 <= ids < len(self.tokens) else None


def token_table(tokenizer_json: Path) -> dict:
    """What `WhisperTextTokenizer` reads of a tokenizer.json besides the merges: every token by id
    (an added token's text where it has one), which are added and which special, how many distinct
    tokens there are (`tokenizers`' vocabulary size with added tokens), and whether its decoder is
    byte-level BPE's."""
    data = json.loads(Path(tokenizer_json).read_text(encoding="utf-8"))
    vocab, added = data["model"]["vocab"], data.get("added_tokens") or []
    tokens: list[str | None] = [None] * (max([*vocab.values(), *(a["id"] for a in added)], default=-1) + 1)
    for token, i in vocab.items():
        tokens[i] = token
    for token in added:
        tokens[token["id"]] = token["content"]
    return {"tokens": tokens, "added": [a["id"] for a in added],
            "special": [a["content"] for a in added if a["special"]],
            "size": len(set(vocab) | {a["content"] for a in added}),
            "byte_level": (data.get("decoder") or {}).get("type") == "ByteLevel"}


@functools.cache
def _byte_of_char() -> dict[str, int]:
    """GPT-2's byte-level alphabet, inverted: the character each byte is written as in a token."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1),
                 *range(ord("\xae"), ord("\xff") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {**{chr(b): b for b in printable}, **{chr(256 + n): b for n, b in enumerate(others)}}


@functools.lru_cache(maxsize=None)
def _token_bytes(token: str) -> bytes:
    """A token's bytes as the byte-level decoder gives them: its characters mapped back to bytes,
    or, when one of them is not in the alphabet (an added token such as "<|en|>" is, ASCII), its
    text as UTF-8."""
    byte_of = _byte_of_char()
    if all(c in byte_of for c in token):
        return bytes(byte_of[c] for c in token)
    return token.encode("utf-8")
