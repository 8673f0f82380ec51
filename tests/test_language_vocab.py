"""Each language's frequent tokens for a draft head (`whisperspec.whisper.drafters.language_vocab`)
and the int8 self-draft's heads that score them too (`LanguageHeads`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from whisperspec import defaults
from whisperspec.whisper.drafters.draft_models import LanguageHeads
from whisperspec.whisper.drafters.language_vocab import RANKED, TEXT_TOKENS, head_tokens, ranked_tokens, shipped

ARMELLE = Path("/var/lib/dpkg/info/asterisk-prompt-fr-armelle.list")


def test_each_words_frequency_goes_to_every_token_of_its_spellings():
    spellings = {" the": [1], " The": [2], "the": [3], " cat": [4, 5], " Cat": [6, 5], "cat": [7, TEXT_TOKENS]}
    # 1: 0.5; 5: 0.1 + 0.1 * 0.15; 4: 0.1; 2: 0.5 * 0.15; the special id is never ranked
    assert ranked_tokens([("the", 0.5), ("cat", 0.1)], spellings.__getitem__, ranked=4) == [1, 5, 4, 2]
    assert ranked_tokens([("猫", 1.0)], {"猫": [9, 8]}.__getitem__, spaced=False) == [9, 8]


def test_the_shipped_rankings_name_the_tokens_the_lowest_ids_miss_in_other_languages():
    rankings = shipped()
    for language in ("en", "es", "fr", "it", "ru", "de", "no"):
        ids = rankings[language]
        # as many as the words spell, up to RANKED (60000 Russian words take 6.5k tokens)
        assert 4000 < len(ids) <= RANKED and len(np.unique(ids)) == len(ids) and ids.max() < TEXT_TOKENS, language
    # most of Russian's most frequent tokens lie above the lowest 16384 ids
    assert np.mean(rankings["ru"][:4096] >= defaults.INT8_DRAFT_HEAD) > 0.5


def test_a_languages_head_scores_the_lowest_ids_and_its_frequent_tokens():
    size = defaults.INT8_DRAFT_HEAD
    russian = head_tokens("ru", size)
    ranked = set(shipped()["ru"].tolist())
    assert torch.equal(russian, russian.unique())  # sorted, none twice
    assert set(russian.tolist()) == set(range(size)) | ranked and len(russian) > size + 2000
    assert len(head_tokens("en", size)) < len(russian)  # English's words mostly have low ids already
    assert head_tokens("xx", size) is None and head_tokens(None, size) is None


def test_each_language_gets_its_own_head():
    torch.manual_seed(0)
    weight = torch.randn(TEXT_TOKENS + 10, 16)
    default_ids = torch.cat([torch.arange(1000), torch.arange(TEXT_TOKENS, TEXT_TOKENS + 10)])
    default = object()
    heads = LanguageHeads(default, default_ids, weight, lambda row: {1: "ru", 2: "fr", 3: "xx"}.get(row[0]), 1000)
    for rows in ([[0, 5]], [[3]], [[1], [2]]):  # no language yet, one with no ranking, several
        assert heads.select(rows) == (default, default_ids)
    head, ids = heads.select([[1, 7], [1]])
    assert torch.equal(ids, torch.cat([head_tokens("ru", 1000), default_ids[1000:]]))
    assert heads.select([[1]])[0] is head  # built once
    x = torch.randn(1, 1, 16)
    exact = x @ weight[ids].T  # int8 rows: the same scores, to int8's rounding
    assert float((head(x) - exact).abs().max()) < 0.05 * float(exact.abs().max())


@pytest.mark.real
@pytest.mark.skipif(not ARMELLE.is_file(), reason="sudo apt-get install asterisk-prompt-fr-armelle")
def test_on_french_speech_the_int8_self_draft_proposes_tokens_the_lowest_ids_leave_out():
    """Real French prompts (a trainable set, docs/DATASETS.md): the int8 self-draft of base drafts
    French tokens above the 16384 lowest ids, and the transcript is plain greedy's."""
    from test_transcribe import with_drafter
    from whisperspec.audio import load_audio
    from whisperspec.evaluation.packaged import package_files
    from whisperspec.speculative.drafters.model import ModelDrafter
    from whisperspec.transcribe import Transcriber

    files = sorted(package_files("asterisk-prompt-fr-armelle", (".gsm",)), key=lambda p: p.stat().st_size)[-3:]
    audio = np.concatenate([load_audio(path) for path in files])
    plain = Transcriber("base", language="fr", draft="none")
    expected = [t for s in plain.transcribe(audio).segments for t in s.tokens]
    speculative = with_drafter(plain, "int8", "3")  # the same loaded model
    drafter = speculative.drafter
    assert isinstance(drafter, ModelDrafter) and isinstance(drafter.model.heads, LanguageHeads)
    lowest = set(drafter.model.vocab_ids.tolist())  # its head before a language is chosen
    proposed = []
    propose = drafter.propose_batch

    def recording(rows, k, contexts):
        proposals = propose(rows, k, contexts)
        proposed.extend(t for p in proposals for t in p.tokens)
        return proposals

    drafter.propose_batch = recording
    got = [t for s in speculative.transcribe(audio).segments for t in s.tokens]
    assert got == expected
    # French tokens the lowest ids leave out: drafted, and some of them kept
    french = set(proposed) - lowest
    assert french and french & set(expected) and max(french) < TEXT_TOKENS
