"""`whisperspec bench`'s tree arithmetic: what drafting a tree of candidates would give, from the
draft's measured agreement and this machine's measured pass costs, before anyone builds it.

A chain drafts k tokens, each the draft's first choice after the one before. A tree (Medusa,
EAGLE-2, Sequoia) drafts several candidates per position, and the target checks every node in one
pass with a tree attention mask, keeping the longest path it agrees with. Whether that pays is
arithmetic: the extra nodes' acceptance against the dearer verify pass (more tokens) and the draft
passes that grow them (as many as the tree is deep, each over that depth's nodes).

The acceptance is measured, not modelled. With greedy decoding the target's own tokens are known
(plain greedy output), and a draft's choices along an accepted path are made after exactly those
tokens, so the draft fed the greedy sequence gives, at every position, the rank of the target's
token among its scores (`draft_ranks`; fed a token a pass, as drafting feeds them: a draft whose
int8 products scale each pass's input as a whole scores a long pass differently). A tree is a set
of rank paths ((0,) the first choice, (1, 0) the second choice then its first); a round from
position p keeps the longest path that the ranks from p spell (`accepted_depth`), emits it and the
target's own token, and the next round starts after them (`rounds_needed`). So any tree's rounds
over the windows are counted, up to near-ties between these passes and the loop's (the chain's
count beside the chain's measured tokens per round shows how close). For each node budget the tree
is the one of the likeliest paths (`likeliest_tree`, as Sequoia and EAGLE-2 choose theirs).
"""

from __future__ import annotations

import statistics
import time
from collections import Counter

import torch

Tree = frozenset  # of rank paths (tuples), closed under prefixes

MAX_RANK = 4  # ranks at or above this are a miss for any tree shown
MAX_DEPTH = 6


def chain(k: int) -> Tree:
    """The chain drafter's tree: k first choices, each after the one before."""
    return Tree((0,) * d for d in range(1, k + 1))


@torch.inference_mode()
def draft_ranks(drafter, window, sequence: list[int], prefix_length: int, logit_filter) -> list[int]:
    """For each position from `prefix_length` on, the rank of `sequence`'s token among the scores a
    `ModelDrafter` gives after the sequence before it (0: its first choice; MAX_RANK: none of the
    first MAX_RANK, or a token its head cannot score), the same logit rules applied as in drafting."""
    drafter.start([sequence[:prefix_length]])
    drafter.start_window(window)
    viewed = drafter.view(sequence) if drafter.view else sequence
    dropped = len(sequence) - len(viewed)  # a view leaves out a leading part (the previous text)
    drafter.model.rollback([0])
    fed = prefix_length - dropped  # the prefix in one pass, then a token a pass, as drafting feeds them
    logits = [*drafter.model.forward(torch.tensor([viewed[:fed]]))[0, -1:]]
    logits += [drafter.model.forward(torch.tensor([[token]]))[0, -1] for token in viewed[fed:-1]]
    drafter.model.rollback([0])
    ranks = []
    for position in range(prefix_length, len(sequence)):
        scores = drafter.full_vocab(logits[position - prefix_length][None])[0]
        scores = logit_filter(sequence[:position], scores)
        target = scores[sequence[position]]
        ranks.append(MAX_RANK if target == float("-inf") else min(int((scores > target).sum()), MAX_RANK))
    return ranks


def accepted_depth(ranks: list[int], start: int, tree: Tree) -> int:
    """How many drafted tokens a round from `start` keeps: the longest path of `tree` that the
    ranks from `start` spell."""
    depth = 0
    while start + depth < len(ranks) and tuple(ranks[start:start + depth + 1]) in tree:
        depth += 1
    return depth


def rounds_needed(ranks: list[int], tree: Tree) -> int:
    """The rounds that decode a sequence whose draft ranks are `ranks` (its end-of-text included)."""
    position = rounds = 0
    while position < len(ranks):
        position += accepted_depth(ranks, position, tree) + 1  # the kept path and the target's token
        rounds += 1
    return rounds


def counted_tokens_per_round(rank_lists: list[list[int]], tree: Tree) -> float:
    return sum(map(len, rank_lists)) / max(1, sum(rounds_needed(r, tree) for r in rank_lists))


def path_shares(rank_lists: list[list[int]], max_depth: int = MAX_DEPTH) -> Counter:
    """For every rank path up to `max_depth`, the share of positions whose next ranks spell it
    (how often a node on that path would be accepted, wherever a round starts)."""
    counts, positions = Counter(), sum(map(len, rank_lists))
    for ranks in rank_lists:
        for start in range(len(ranks)):
            for depth in range(1, max_depth + 1):
                path = tuple(ranks[start:start + depth])
                if len(path) < depth or path[-1] >= MAX_RANK:
                    break
                counts[path] += 1
    return Counter({path: n / positions for path, n in counts.items()})


def likeliest_tree(shares: Counter, nodes: int) -> Tree:
    """The `nodes` likeliest paths whose prefixes are in too (a prefix is never less likely, so
    taking paths by falling share keeps the tree whole; a tie goes to the shallower path)."""
    chosen: set[tuple] = set()
    for path in sorted(shares, key=lambda p: (-shares[p], len(p), p)):
        if len(chosen) == nodes:
            break
        if len(path) == 1 or path[:-1] in chosen:
            chosen.add(path)
    return Tree(chosen)


def widths(tree: Tree) -> list[int]:
    """Nodes per depth: what each of the tree's draft passes computes."""
    by_depth = Counter(len(path) for path in tree)
    return [by_depth[d] for d in range(1, max(by_depth, default=0) + 1)]


def interleaved_costs(run, widths, repeats: int) -> dict[int, float]:
    """Median seconds of `run(tokens [1, n])` for each n in `widths`, the widths taken in turn
    within each repeat: a shared machine's drift then falls on every width alike, where timing one
    width after another would put it between them."""
    tokens = torch.full((1, max(widths)), 440)
    run(tokens[:, :1])  # compiles, warms up
    times = {n: [] for n in widths}
    for _ in range(repeats):
        for n in widths:
            started = time.perf_counter()
            run(tokens[:, :n])
            times[n].append(time.perf_counter() - started)
    return {n: statistics.median(values) for n, values in times.items()}


def pass_costs(model, window, widths_needed, repeats: int = 31) -> dict[int, float]:
    """Median seconds of one pass of a draft model over n new tokens after 20 cached ones (one
    row: a tree's nodes of one depth go through in one pass, each seeing only its own path)."""
    model.start_window(window)
    model.rollback([0])
    model.forward(torch.full((1, 20), 440))

    def run(tokens):
        model.forward(tokens)
        model.rollback([20])

    costs = interleaved_costs(run, widths_needed, repeats)
    model.rollback([0])
    return costs


def print_trees(name: str, rank_lists: list[list[int]], loop: dict, k: int, draft_pass: dict[int, float],
                verify_pass: dict[int, float], plain: float, fixed: float, max_nodes: int = 15) -> None:
    """The chains and the likeliest trees for each node budget: tokens a round keeps (counted over
    the windows), a round's cost, and the decode-phase speed-up over plain greedy that gives with
    this drafter's measured per-window costs (`fixed`). A round costs its draft passes (one a depth,
    over that depth's nodes) and a verify pass (over the round's first token and every node), each
    as measured apart, scaled by what the chain's rounds cost in the loop (`loop`: its tokens and
    seconds a round) over what the same passes cost apart: the loop's own work (the logit rules,
    the choice at each token, a draft that stops at end-of-text) and the machine's mood at the
    time fall on every shape alike."""
    n_tokens = sum(map(len, rank_lists))
    shares = path_shares(rank_lists)

    def passes(tree: Tree) -> float:
        return sum(draft_pass[w] for w in widths(tree)) + verify_pass[len(tree) + 1]

    scale = loop["round"] / passes(chain(k))
    print(f"### {name}: draft trees at this machine's pass costs\n")
    counted = counted_tokens_per_round(rank_lists, chain(k))
    print(f"Counted from its ranks, its chain of {k} keeps {counted:.2f} tokens a round; the loop measured "
          f"{loop['tokens']:.2f}. Draft passes: "
          + ", ".join(f"{n}: {1e3 * s:.2f} ms" for n, s in draft_pass.items())
          + f". A round of its chain took {1e3 * loop['round']:.1f} ms in the loop, {scale:.2f} times what its passes "
          "take apart: every round below is scaled alike.\n")
    print("| tree | nodes | nodes per depth | tokens/round | ms/round | rounds | speed-up |")
    print("|---|---|---|---|---|---|---|")
    shapes = [(f"chain {d}", chain(d)) for d in range(1, 6)]
    shapes += [(f"likeliest {n}", likeliest_tree(shares, n)) for n in range(2, max_nodes + 1)]
    best, shown = None, set()
    for label, tree in shapes:
        per_depth = widths(tree)
        if tree in shown or len(tree) + 1 not in verify_pass or any(w not in draft_pass for w in per_depth):
            continue  # a likeliest tree that is a chain already shown, or passes not measured
        shown.add(tree)
        cost = scale * passes(tree)
        rounds = sum(rounds_needed(r, tree) for r in rank_lists)
        speedup = plain / (fixed + rounds * cost)
        best = max(best or (speedup, label), (speedup, label))
        print(f"| {label} | {len(tree)} | {'-'.join(map(str, per_depth))} | {n_tokens / rounds:.2f} | "
              f"{1e3 * cost:.2f} | {rounds} | {speedup:.2f}x |")
    if best:
        print(f"\nBest at these costs: {best[1]} ({best[0]:.2f}x).\n")
