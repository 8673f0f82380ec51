"""The draft that reads the main decoder's features (EAGLE): lossless alone and in a batch, for every
lookahead, and it never keeps a cache entry it computed from a feature it predicted itself."""

from __future__ import annotations

import pytest
import torch

from tiny_models import random_mel, tiny_runtime
from whisperspec.models.draft_file import draft_kind, save_draft, shipped_drafts
from whisperspec.speculative.lookahead import make_lookahead
from whisperspec.speculative.protocols import DraftContext
from whisperspec.whisper.decode import DecodeOptions, WindowDecoder
from whisperspec.whisper.drafters import make_drafter
from whisperspec.whisper.drafters.features import KIND, FeatureDraftModel, feature_draft_from_main, feature_drafter
from whisperspec.whisper.kv_decoder import NO_HEAD

LOOKAHEADS = ["1", "2", "5", "8", "heuristic", "confidence", "cost"]


def feature_draft_file(runtime, tmp_path, name: str = "features.safetensors"):
    """An untrained feature draft of two copied main layers (a random main model's own layers agree
    with it on some tokens; the timestamp rules force the same timestamps on both)."""
    draft = feature_draft_from_main(runtime.model, [0, runtime.decoder.n_layers - 1])
    return save_draft(tmp_path / name, runtime.model, draft.model.decoder, torch.arange(runtime.vocab_size), {},
                      cross_pool=2, kind=KIND)


@pytest.fixture(scope="module")
def runtime():
    return tiny_runtime(3, dtype=torch.float32)


@pytest.mark.parametrize("int8", [False, True])
@pytest.mark.parametrize("timestamps", [False, True])
def test_a_feature_draft_gives_plain_greedys_tokens_for_every_lookahead(runtime, tmp_path, timestamps, int8):
    window = runtime.encode(random_mel(3, dtype=torch.float32))
    options = DecodeOptions(language="en", timestamps=timestamps, temperatures=(0.0,), max_new_tokens=48)
    reference = WindowDecoder(runtime).decode(window, options)
    assert len(reference.tokens) > 5
    drafter = feature_drafter(feature_draft_file(runtime, tmp_path), runtime, int8=int8)
    assert isinstance(drafter.model, FeatureDraftModel)
    accepted = 0
    for lookahead in LOOKAHEADS:
        result = WindowDecoder(runtime, drafter, make_lookahead(lookahead)).decode(window, options)
        assert result.tokens == reference.tokens, lookahead
        assert result.stats.proposed > 0 and result.stats.draft_passes > 0, lookahead
        accepted += result.stats.accepted
    if timestamps:
        assert accepted > 0


def test_a_feature_draft_keeps_every_row_of_a_batch_as_alone(runtime, tmp_path):
    windows = runtime.encode(random_mel(4, batch=3, dtype=torch.float32))
    options = DecodeOptions(language="en", timestamps=True, temperatures=(0.0,), max_new_tokens=40)
    drafter = feature_drafter(feature_draft_file(runtime, tmp_path), runtime, int8=False)
    batched = WindowDecoder(runtime, drafter, make_lookahead("3")).decode_batch(windows, options)
    for row, result in enumerate(batched):
        alone = WindowDecoder(runtime).decode(runtime.encode(windows.mel[row:row + 1]), options)
        assert result.tokens == alone.tokens, row
    assert sum(r.stats.accepted for r in batched) > 0


def test_the_main_decoder_keeps_the_features_its_head_reads_and_the_same_logits(tmp_path):
    runtime = tiny_runtime(5, dtype=torch.float32)
    window = runtime.encode(random_mel(5, dtype=torch.float32))
    options = DecodeOptions(language="en", temperatures=(0.0,), max_new_tokens=30)
    plain = WindowDecoder(runtime).decode(window, options)
    drafter = feature_drafter(feature_draft_file(runtime, tmp_path), runtime, int8=False)
    assert runtime.decoder.keep_features
    kept = WindowDecoder(runtime).decode(window, options)  # plain decoding, features kept
    assert kept.tokens == plain.tokens and kept.avg_logprob == plain.avg_logprob
    decoder = runtime.decoder
    length = int(decoder.lengths[-1, 0])
    features = decoder.features[0, :length].clone()
    tokens = decoder.fed_tokens[:, :length].clone()
    decoder.start(window.hidden)
    assert torch.equal(decoder.forward(tokens, head=NO_HEAD)[0], features)
    del drafter


def test_positions_fed_a_predicted_feature_are_computed_again_from_the_main_decoders(runtime, tmp_path):
    window = runtime.encode(random_mel(6, dtype=torch.float32))
    drafter = feature_drafter(feature_draft_file(runtime, tmp_path), runtime, int8=False)
    model = drafter.model
    special = runtime.special
    prefix = special.prefix("en", "transcribe", False)
    runtime.decoder.start(window.hidden)
    runtime.decoder.forward(torch.tensor([prefix[:-1]]))  # the main decoder holds all but the last token
    drafter.start_window(window)
    drafter.start([prefix])
    proposal = drafter.propose(prefix, 4, DraftContext())
    assert len(proposal.tokens) == 4
    # every drafted position read a predicted feature: none is kept as held
    assert model.held_tokens(0) == prefix
    assert model.real[0, :len(prefix)].all() and not model.real[0, len(prefix):len(prefix) + 3].any()
    # the main decoder verifies two of them; the next proposal re-reads those from its features
    runtime.decoder.forward(torch.tensor([[prefix[-1], *proposal.tokens[:2]]]))
    sequence = prefix + proposal.tokens[:2] + [proposal.tokens[2]]
    drafter.propose(sequence, 2, DraftContext())
    assert model.real[0, :len(sequence)].all()
    assert model.held_tokens(0) == sequence


def test_a_feature_draft_file_says_its_kind_and_drafts_as_one(runtime, tmp_path):
    path = feature_draft_file(runtime, tmp_path)
    assert draft_kind(path) == "features"
    assert isinstance(make_drafter(str(path), runtime).model, FeatureDraftModel)
    # no shipped draft is of this kind, so `trained` and `auto` keep to the token-level drafts
    assert all(draft_kind(p) == "distilled" for p in shipped_drafts(runtime.model, "distilled"))
