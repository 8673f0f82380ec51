"""`auto`'s choice among drafters (`SelectingDrafter`), on simulated rounds with known costs: the
fastest candidate drafts, a plain step wins when none pays, a loser is probed rarely, and the
choice follows the text. (That any choice keeps the output is tested with the other drafters.)"""

from __future__ import annotations

import pytest

from whisperspec.speculative.drafters.select import Candidate, SelectingDrafter
from whisperspec.speculative.protocols import DraftContext, Drafter, Proposal, Verdict

PLAIN_STEP = 0.010  # seconds of a one-token pass; a verify pass costs 12% more per drafted token


class Constant(Drafter):
    def propose(self, tokens, k, context):
        return Proposal([7] * k)


def candidate(name: str, **priors) -> Candidate:
    return Candidate(name, Constant, **priors)


def simulate(selector: SelectingDrafter, rounds: int, world: dict[str, tuple[float, float]], k: int = 3) -> list:
    """world: candidate -> (share of drafted tokens accepted, seconds per drafted token)."""
    chosen = []
    for _ in range(rounds):
        proposal = selector.propose_batch([[1, 2, 3]], k, [DraftContext()])[0]
        name = selector.chosen
        share, step = world.get(name, (0.0, 0.0))
        drafted = len(proposal.tokens)
        verdict = Verdict(proposed=drafted, accepted=int(round(drafted * share)), next_token=0)
        selector.learn([1, 2, 3], verdict, None, step * drafted, PLAIN_STEP * (1 + 0.12 * drafted))
        chosen.append(name)
    return chosen


def test_the_fastest_candidate_drafts_and_the_choice_follows_the_text():
    selector = SelectingDrafter([candidate("cheap", acceptance=0.8, step_cost=0.08),
                                 candidate("dear", acceptance=0.75, step_cost=0.35)])
    world = {"cheap": (1.0, 0.0008), "dear": (0.67, 0.0035)}
    chosen = simulate(selector, 80, world)[-60:]
    assert chosen.count("cheap") >= 54 and chosen.count(None) <= 1  # one plain step, timed
    # the cheap draft stops being right (the speech changed, say): the dear one takes over once the
    # cheap one's record, which forgets 3% a round, says so, then the cheap one is probed less and
    # less often
    world["cheap"] = (0.0, 0.0008)
    chosen = simulate(selector, 160, world)
    assert chosen[40:].count("dear") >= 110
    assert chosen[60:].count("cheap") <= 6  # three probes of two rounds


def test_nothing_drafts_when_no_candidate_pays_and_a_probe_notices_when_one_does():
    selector = SelectingDrafter([candidate("wrong", acceptance=0.8, step_cost=0.1)])
    chosen = simulate(selector, 200, {"wrong": (0.0, 0.001)})
    assert chosen[20:].count(None) >= 170  # probes only: at most every 12th, then rarer
    assert 2 <= chosen[20:].count("wrong") <= 12
    chosen = simulate(selector, 200, {"wrong": (1.0, 0.001)})
    assert chosen[-50:].count("wrong") == 50


def test_candidates_are_built_when_first_chosen_and_only_where_they_apply():
    def never():
        pytest.fail("built a candidate that was never chosen")

    selector = SelectingDrafter([
        candidate("good", acceptance=0.9, step_cost=0.05),
        Candidate("poor", never, acceptance=0.3, step_cost=0.4, build_cost=20),  # explored after 112 rounds
        Candidate("elsewhere", never, acceptance=0.99, step_cost=0.01, applies=lambda tokens: tokens[0] == 99),
    ])
    chosen = simulate(selector, 50, {"good": (1.0, 0.0005)})
    assert set(chosen) <= {"good", None} and list(selector.built) == ["good"]
    assert selector.usage()["good"] >= 0.98


def test_a_late_candidate_gets_the_window_and_the_reorders_it_missed():
    events = []

    class Recording(Constant):
        def start_window(self, window):
            events.append(("window", window))

        def reorder(self, rows):
            events.append(("reorder", rows))

    selector = SelectingDrafter([Candidate("late", Recording, acceptance=0.9, step_cost=0.05)])
    selector.start_window("w")
    selector.reorder("first")
    selector.propose_batch([[1]], 2, [DraftContext()])
    selector.reorder("second")
    assert events == [("window", "w"), ("reorder", "first"), ("reorder", "second")]


def test_a_candidate_dear_to_build_is_built_once_the_steps_it_would_have_saved_pay_for_it():
    built = []

    def make():
        built.append(True)
        return Constant()

    # expected to make rounds ~1.8x faster: 0.46 plain steps saved per round, 30 steps to build it
    selector = SelectingDrafter([Candidate("dear", make, acceptance=0.8, step_cost=0.08, build_cost=30)])
    world = {"dear": (1.0, 0.0008)}
    assert simulate(selector, 20, world) == [None] * 20 and not built  # a short file: never built
    chosen = simulate(selector, 100, world)
    assert built and chosen[:40] == [None] * 40 and chosen[-40:] == ["dear"] * 40


def test_told_the_work_ahead_it_builds_at_once_what_that_work_repays_and_no_more():
    def selector_with(built):
        return SelectingDrafter([Candidate("dear", lambda: built.append(True) or Constant(), acceptance=0.8,
                                           step_cost=0.08, build_cost=30)])

    world = {"dear": (1.0, 0.0008)}
    built = []
    selector = selector_with(built)
    selector.warmup.expect(200, drafted=True)  # ~0.46 plain steps saved a token: 92 of them ahead, for 30 to build it
    assert simulate(selector, 10, world) == ["dear"] * 10 and built
    built = []
    selector = selector_with(built)
    selector.warmup.expect(40, drafted=True)  # 18 steps saved ahead: renting as before (the ski rental)
    assert simulate(selector, 20, world) == [None] * 20 and not built
    # what has been emitted is no longer ahead (10 rounds of 3 drafted tokens right and one of the
    # target's), and inputs add up
    selector = selector_with([])
    selector.warmup.expect(100, drafted=True)
    simulate(selector, 10, world)
    selector.warmup.expect(30, drafted=True)
    assert selector.warmup.tokens_ahead == 100 - 10 * 4 + 30


def test_a_long_input_measures_a_candidate_never_measured_once_it_has_probed_the_others():
    # "modest" undersells itself, as below; told of 400 tokens ahead (at least 100 rounds of 3
    # drafted, past the 12 + 5 x 5 rounds that repay building it), it is tried in round
    # `probe_every` instead of round 37
    selector = SelectingDrafter([candidate("hyped", acceptance=0.9, step_cost=0.1),
                                 candidate("modest", acceptance=0.2, step_cost=0.1, build_cost=5)])
    selector.warmup.expect(400, drafted=True)
    chosen = simulate(selector, 40, {"hyped": (0.4, 0.004), "modest": (1.0, 0.001)})
    assert chosen.index("modest") + 1 == selector.probe_every and chosen[-20:] == ["modest"] * 20


def test_a_candidate_whose_prior_undersells_it_is_measured_and_then_drafts():
    # priors are guesses: "modest" promises less than a plain step, "hyped" promises much; in fact
    # "modest" is the fastest and "hyped" barely pays
    selector = SelectingDrafter([candidate("hyped", acceptance=0.9, step_cost=0.1),
                                 candidate("modest", acceptance=0.2, step_cost=0.1, build_cost=5)])
    world = {"hyped": (0.4, 0.004), "modest": (1.0, 0.001)}
    explored = selector.probe_every + selector.explore_after * 5
    chosen = simulate(selector, 40 + int(explored), world)
    assert "modest" not in chosen[:int(explored) - 1]  # not built before the input can repay it
    chosen = simulate(selector, 100, world)
    assert chosen[-50:].count("modest") >= 45


def test_a_probe_is_timed_on_its_second_round_not_on_its_catch_up():
    # the first round after a switch feeds the candidate what it missed: dear, but only once
    selector = SelectingDrafter([candidate("steady", acceptance=0.8, step_cost=0.05),
                                 candidate("other", acceptance=0.1, step_cost=0.05)])
    previous = None
    for _ in range(200):
        proposal = selector.propose_batch([[1, 2, 3]], 3, [DraftContext()])[0]
        name = selector.chosen
        catch_up = 0.2 if name is not None and name != previous else 0.0  # 20 plain steps
        accepted = {"steady": 2, "other": 3}.get(name, 0)
        drafted = len(proposal.tokens)
        verdict = Verdict(proposed=drafted, accepted=min(accepted, drafted), next_token=0)
        selector.learn([1, 2, 3], verdict, None, 0.0005 * drafted + catch_up, PLAIN_STEP * (1 + 0.12 * drafted))
        previous = name
    # "other" (all 3 tokens right, against 2) wins once its probe is timed without the catch-up
    assert selector.usage()["other"] > 0.8


class InPlace(Constant):
    catches_up = False  # as prompt lookup, or a draft in the target's own cache


def test_a_candidate_that_never_catches_up_is_probed_for_one_timed_round():
    # its first drafting round ever (a compile) goes untimed, so its first probe takes two rounds;
    # after that a switch to it costs nothing extra: each probe is one round, and it is timed
    selector = SelectingDrafter([candidate("leader", acceptance=0.8, step_cost=0.05),
                                 Candidate("in-place", InPlace, acceptance=0.8, step_cost=0.05)])
    chosen = simulate(selector, 400, {"leader": (1.0, 0.0005), "in-place": (0.34, 0.0005)})
    runs, previous = [], None
    for name in chosen:
        if name == "in-place":
            runs[-1:] = [runs[-1] + 1] if previous == "in-place" else runs[-1:] + [1]
        previous = name
    assert runs[0] == 2 and len(runs) >= 3 and set(runs[1:]) == {1}
    assert len(selector.measured["in-place"].draft_seconds) == sum(runs) - 1


def test_a_plain_step_is_timed_now_and_then_and_wins_where_passes_over_more_tokens_are_dear():
    """The plain step's cost is measured, not extrapolated from the verify passes: a decoder whose
    pass over 4 tokens costs 60% more than a step (attention one query at a time, say) is faster
    plain (100 tokens a second) than with a draft right on a third of its tokens (91), though the
    extrapolation from the verify passes at 12% a token would say not (85)."""
    selector = SelectingDrafter([candidate("third", acceptance=0.5, step_cost=0.1)])
    chosen = []
    for _ in range(200):
        proposal = selector.propose_batch([[1, 2, 3]], 3, [DraftContext()])[0]
        drafted = len(proposal.tokens)
        verdict = Verdict(proposed=drafted, accepted=drafted // 3, next_token=0)
        selector.learn([1, 2, 3], verdict, None, 0.002 * drafted, PLAIN_STEP * (1 + 0.2 * drafted))
        chosen.append(selector.chosen)
    assert selector.verify_cost.plain_steps_timed() >= 1
    assert chosen[-100:].count(None) >= 85


def test_one_slow_round_does_not_dethrone_the_fastest():
    # a collection pause or a first call makes one round 50x dearer: costs are medians, not means
    selector = SelectingDrafter([candidate("fast", acceptance=0.8, step_cost=0.05),
                                 candidate("slow", acceptance=0.8, step_cost=0.3)])
    world = {"fast": (1.0, 0.0005), "slow": (1.0, 0.003)}
    simulate(selector, 40, world)
    world["fast"] = (1.0, 0.5)
    simulate(selector, 1, world)
    world["fast"] = (1.0, 0.0005)
    assert simulate(selector, 5, world) == ["fast"] * 5


def test_two_unlucky_rounds_after_a_gap_do_not_undo_a_long_record():
    # what a round emits varies a lot: a probe's two rounds add to the record, they do not replace it
    selector = SelectingDrafter([candidate("lumpy", acceptance=0.5, step_cost=0.05)])
    record = selector.measured["lumpy"]
    for index in range(1, 101):
        record.add(3, 3, index)
    record.add(1, 3, 160)
    record.add(1, 3, 161)
    assert record.emitted > 2.5
    for index in range(162, 202):  # but rounds that keep saying otherwise are heard
        record.add(1, 3, index)
    assert record.emitted < 1.7


def test_a_candidate_that_could_not_win_even_when_right_is_not_probed_again():
    # a probe costs a catch-up: worth it only for a candidate that could beat the leader at its best
    selector = SelectingDrafter([candidate("fast", acceptance=0.8, step_cost=0.05),
                                 candidate("dear", acceptance=0.8, step_cost=0.3)])
    # dear: every token right, but at 0.4 plain steps each it is slower than fast at its best
    world = {"fast": (0.67, 0.0005), "dear": (1.0, 0.004)}
    chosen = simulate(selector, 60, world)
    assert "dear" in chosen  # measured once
    assert simulate(selector, 300, world).count("dear") == 0
    world["fast"] = (0.0, 0.0005)  # the leader falls behind a plain step: dear could win, is probed, wins
    assert simulate(selector, 200, world)[-100:].count("dear") >= 95


class Waiting(Constant):
    """Cannot draft its first round (as a draft in the target's cache before the target has read
    a long prompt)."""

    def __init__(self):
        self.asked = 0

    def can_draft(self, rows):
        self.asked += 1
        return self.asked > 1


def test_a_round_its_candidate_cannot_draft_is_a_plain_step_and_its_first_drafting_round_goes_untimed():
    selector = SelectingDrafter([Candidate("waiting", Waiting, acceptance=0.8, step_cost=0.1)])
    proposal = selector.propose_batch([[1, 2, 3]], 3, [DraftContext()])[0]
    assert proposal.tokens == [] and selector.chosen is None
    assert (selector.chosen_rounds["none"], selector.chosen_rounds["waiting"]) == (1, 0)
    selector.learn([1, 2, 3, 0], Verdict(proposed=0, accepted=0, next_token=0), None, 0.0, None)
    assert selector.measured["waiting"].weight == 0  # a plain step says nothing of its rate
    proposal = selector.propose_batch([[1, 2, 3, 0]], 3, [DraftContext()])[0]
    assert proposal.tokens == [7, 7, 7] and selector.chosen == "waiting" and selector.switched
    # its first drafting round (a compile, a catch-up): counted for what it emits, not timed
    selector.learn([1, 2, 3, 0, 7, 7, 7, 0], Verdict(proposed=3, accepted=3, next_token=0), None, 1.0,
                   PLAIN_STEP * 1.36)
    assert selector.measured["waiting"].weight > 0 and not selector.measured["waiting"].draft_seconds
