"""`whisperspec bench`'s arithmetic: what acceptance a decode-phase speed-up needs at measured costs."""

from __future__ import annotations

import pytest
import torch

from whisperspec.bench.decoder import acceptance_needed, tokens_per_round


def test_tokens_per_round_counts_the_accepted_prefix_and_the_targets_own_token():
    assert tokens_per_round(0.0, 4) == 1
    assert tokens_per_round(1.0, 4) == 5
    assert tokens_per_round(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)


def test_the_acceptance_found_gives_the_speed_up_asked_for():
    plain, fixed, n_tokens, round_seconds, k = 10.0, 1.0, 100, 0.2, 4
    acceptance = acceptance_needed(1.5, plain, fixed, n_tokens, round_seconds, k)
    assert 0 < acceptance < 1
    total = fixed + n_tokens / tokens_per_round(acceptance, k) * round_seconds
    assert plain / total == pytest.approx(1.5, rel=1e-6)
    # a higher target needs more
    assert acceptance_needed(1.8, plain, fixed, n_tokens, round_seconds, k) > acceptance


def test_a_speed_up_that_every_token_accepted_would_not_give_is_out_of_reach():
    plain, fixed, n_tokens, round_seconds, k = 10.0, 1.0, 100, 0.2, 4
    # all accepted: 100 / 5 rounds of 0.2 s + 1 s = 5 s, 2x
    assert acceptance_needed(2.0, plain, fixed, n_tokens, round_seconds, k) == pytest.approx(1.0, abs=1e-6)
    assert acceptance_needed(2.5, plain, fixed, n_tokens, round_seconds, k) is None
    assert acceptance_needed(10.0, plain, fixed, n_tokens, round_seconds, k) is None  # the fixed costs alone


# ---------------------------------------------------------------- draft trees (whisperspec.bench.trees)

def test_a_round_keeps_the_longest_path_of_the_tree_that_the_ranks_spell():
    from whisperspec.bench.trees import Tree, accepted_depth, chain

    ranks = [0, 1, 0, 0, 2]
    assert accepted_depth(ranks, 0, chain(3)) == 1  # the second token was the draft's second choice
    assert accepted_depth(ranks, 2, chain(3)) == 2  # the sequence ends a miss later
    two_wide = Tree({(0,), (1,), (0, 0), (0, 1), (0, 1, 0)})
    assert accepted_depth(ranks, 0, two_wide) == 3  # first, second, then first choice
    assert accepted_depth(ranks, 1, two_wide) == 1  # (1, 0) is not in it


def test_rounds_are_counted_as_the_loop_runs_them():
    from whisperspec.bench.trees import chain, counted_tokens_per_round, rounds_needed

    # ranks of 6 tokens (the last the end-of-text): a chain of 2 keeps 0,0 then emits its own token
    # (rank 3 at position 2), then 0,0 and the target's end-of-text
    ranks = [0, 0, 3, 0, 0, 1]
    assert rounds_needed(ranks, chain(2)) == 2
    # a chain of 1: keeps 0 and adds 0; then 3 alone (its own token); keeps 0 and adds 0; then 1 alone
    assert rounds_needed(ranks, chain(1)) == 4
    assert rounds_needed([], chain(3)) == 0
    assert counted_tokens_per_round([ranks], chain(2)) == 3.0
    # with nothing drafted right, a round is a plain step
    assert rounds_needed([5, 5, 5], chain(4)) == 3


def test_the_likeliest_tree_takes_paths_by_share_and_stays_whole():
    from whisperspec.bench.trees import likeliest_tree, path_shares, widths

    shares = path_shares([[0, 0, 1, 0, 0, 2, 0, 1]], max_depth=3)
    assert shares[(0,)] == pytest.approx(5 / 8)
    assert shares[(0, 0)] == pytest.approx(2 / 8)  # from positions 0 and 3
    for nodes in range(1, 8):
        tree = likeliest_tree(shares, nodes)
        assert len(tree) == min(nodes, len(shares))
        assert all(len(path) == 1 or path[:-1] in tree for path in tree)  # every node's parent is in it
    assert likeliest_tree(shares, 1) == {(0,)}
    # (0,) 5/8, then (0, 0) and (1,) at 2/8 each: the shallower first
    assert likeliest_tree(shares, 2) == {(0,), (1,)}
    assert widths(likeliest_tree(shares, 3)) == [2, 1]


def test_counting_from_the_drafts_ranks_gives_the_rounds_the_loop_ran():
    """Teacher forcing is exact for a draft whose scores do not depend on how many tokens a pass
    feeds: the main decoder's own first layers (rows kept apart) on a tiny random Whisper."""
    from tiny_models import random_mel, tiny_runtime
    from whisperspec.bench.trees import chain, draft_ranks, rounds_needed
    from whisperspec.speculative.lookahead import make_lookahead
    from whisperspec.whisper.decode import DecodeOptions, WindowDecoder, forced_prefix
    from whisperspec.whisper.drafters import make_drafter
    from whisperspec.whisper.rules import WhisperLogitFilter

    runtime = tiny_runtime(0)
    special = runtime.special
    options = DecodeOptions(language="en", temperatures=(0.0,), max_new_tokens=60)
    window = runtime.encode(random_mel(0))
    for k in (2, 4):
        drafter = make_drafter("early-exit:2", runtime)
        result = WindowDecoder(runtime, drafter, make_lookahead(str(k))).decode(window, options)
        prefix = forced_prefix(special, [], "en", options)
        ended = len(result.tokens) < options.max_new_tokens  # the last round emitted end-of-text
        sequence = prefix + result.tokens + ([special.eot] if ended else [])
        rules = WhisperLogitFilter(special, len(prefix), options.timestamps, runtime.vocab_size)
        runtime.decoder.start(window.hidden)
        ranks = draft_ranks(drafter, window, sequence, len(prefix), rules)
        assert result.stats.accepted > 0  # the count below is not one of plain steps only
        assert rounds_needed(ranks, chain(k)) == result.stats.rounds, k


def test_bench_runs_drafts_with_a_lookahead_after_the_at_sign_and_without(tmp_path, capsys):
    # `--drafts int8@3,ngram` as the README writes it: a lookahead parsed from the spec and one
    # from --lookahead both reach the tables and the draft-tree count of a fixed-lookahead draft
    from transformers import WhisperFeatureExtractor

    from tiny_models import real_vocabulary, tiny_whisper
    from whisperspec.resources import bench_clips
    from whisperspec.bench.decoder import main

    tokenizer, generation_config, _ = real_vocabulary("tiny.en")
    tiny_whisper(6, dtype=torch.float32).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    generation_config.save_pretrained(tmp_path)
    WhisperFeatureExtractor().save_pretrained(tmp_path)
    assert main(["--model", str(tmp_path), "--compute-type", "float32", "--audio", str(bench_clips()[0]),
                 "--drafts", "int8@2,early-exit:2@heuristic,ngram", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "## Draft trees" in out
    assert "| int8 | 2 |" in out and "| early-exit:2 | heuristic |" in out and "| ngram | 3 |" in out


@pytest.mark.parametrize("command, arguments, message", [
    ("longform", ["--data", "no-such-set"], "--data: unknown data set 'no-such-set'"),
    ("longform", ["--data", "codec2-en", "--drafts", "none,bogus"], "--drafts: unknown drafter 'bogus'"),
    ("corpus", ["--data", "no-such-set"], "--data: unknown data set 'no-such-set'"),
    ("corpus", ["--data", "codec2-en", "--draft", "bogus"], "--draft: unknown drafter 'bogus'"),
])
def test_the_benches_refuse_a_data_set_or_draft_they_cannot_run_before_anything_loads(command, arguments, message,
                                                                                      monkeypatch, capsys):
    import importlib

    monkeypatch.setattr("whisperspec.transcribe.load_whisper",
                        lambda *a, **k: pytest.fail("a model was loaded for an option that does not parse"))
    with pytest.raises(SystemExit) as exit:
        importlib.import_module(f"whisperspec.bench.{command}").main(arguments)
    assert exit.value.code == 2
    assert message in capsys.readouterr().err.strip().splitlines()[-1]


def test_bench_names_an_audio_file_it_cannot_read(tmp_path, capsys):
    from whisperspec.bench.decoder import main

    bad = tmp_path / "notes.wav"
    bad.write_text("not audio")
    assert main(["--model", "tiny.en", "--audio", str(bad), "--drafts", "none", "--repeats", "1"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith(f"whisperspec bench: --audio: {bad}: cannot be decoded as audio")
