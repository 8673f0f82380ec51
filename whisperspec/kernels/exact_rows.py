"""Products and attention that give each row the same bits whatever other rows come with it.

Speculative decoding is exact only if the main decoder scores a token the same in a one-token step
as in a pass that verifies k drafted tokens, and a file's row the same alone as in a batch. CPU
kernels do not promise that: oneDNN's products and torch's fused attention pick their kernel, and
so their summation order, from the number of rows they are given. A one-row product can run a
kernel of its own (on AMD EPYC, those with a 2048-wide input do); attention over 1, over 2 to 3
and over 4 to 32 queries runs three kinds of blocking; past some size (attention past 32 queries,
a float32 product past ~150 rows) yet another. Within one such class, every row's result is the
same whatever the other rows are and wherever it sits: the kernel does the same multiply-adds for
each.

So every call here gets between `smallest` and `largest` rows of one class (`RowBlock`): fewer are
padded with copies of the last, more are split into several calls. A step then costs a product over four
rows instead of one (the same weights read once, on the kernel the weights were packed for: no
slower) and its attention over four queries (more arithmetic on the same keys and values read).

Self-attention takes one more thing: a query attends over a number of cached keys that depends on
its own position only (`rows_cache_attention`: up to the end of its block of `KEY_BLOCK` positions,
keys past its position masked), so a token's scores sum over the same keys in a step as in a longer
pass (the kernel's blocking over the keys moves with their number, and with it the sums' order).

Which blocks keep rows apart is a property of the processor's kernels, so it is checked
(`product_block`, `attention_block`) on products and attention of the model's own widths, never
timed: the first block that keeps rows apart is used, and where none does, one row a call (exact
by construction, slower). Kernels may also split their sums by thread, and the thread count follows
the machine's load (`whisperspec.cpu`): a block keeps rows apart only if every row gets the bits it
gets alone on one thread, at each thread count the process may run with. The check costs a few
tenths of a second, a share of a short file's whole run: its answer is kept on disk for this
processor, torch build and those thread counts (`whisperspec.kept`), and made again when any of
them changes.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional

import torch
import torch.nn.functional as F

from whisperspec.cpu import torch_threads


@dataclass(frozen=True)
class RowBlock:
    """Every call gets at least `smallest` rows (padded) and at most `largest` (split)."""

    smallest: int
    largest: int


# a call over any number of rows (what a draft runs: only its speed matters)
ANY_ROWS = RowBlock(1, 1 << 30)
ONE_ROW = RowBlock(1, 1)
# tried in this order, the first that keeps rows apart is used: large blocks first (a batch of
# files or a prompt reads its weights fewer times), then smaller ones. A product starts at the rows
# its weights were packed for (`packed_linear.ROWS_HINT`): fewer run oneDNN's slower path, so a
# step's row padded to them costs less than alone.
PRODUCT_BLOCKS = (RowBlock(4, 64), RowBlock(4, 32), RowBlock(4, 16), RowBlock(2, 16), RowBlock(2, 8))
ATTENTION_BLOCKS = (RowBlock(4, 32), RowBlock(4, 16), RowBlock(8, 16), RowBlock(2, 3))
# columns per call tried for a product over a window's frames (the encoder's), widest first; 0: all
# of them in one call
COLUMN_PIECES = (0, 512, 256, 128)


def rows_product(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], attr: str, algorithm: str,
                 smallest: int, largest: int) -> torch.Tensor:
    """oneDNN's x @ weight.T + bias (`attr` "gelu" with `algorithm` "none": then the exact GELU) over
    the rows of `x` [..., in] in calls of `smallest` to `largest` rows. TorchScript-able."""
    rows = x.reshape(-1, x.shape[-1])
    count = rows.shape[0]
    if smallest <= count <= largest:
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, attr, [], algorithm)
    if count < smallest:  # a step's row: one call, padded
        out = torch.ops.mkldnn._linear_pointwise(_padded(rows, smallest), weight, bias, attr, [], algorithm)[:count]
        return out.reshape(x.shape[:-1] + out.shape[-1:])
    parts: List[torch.Tensor] = []
    for part in _blocks(rows, smallest, largest):
        parts.append(torch.ops.mkldnn._linear_pointwise(part, weight, bias, attr, [], algorithm))
    out = torch.cat(parts)[:count]
    return out.reshape(x.shape[:-1] + out.shape[-1:])


def rows_product_add(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                     smallest: int, largest: int) -> torch.Tensor:
    """residual + (x @ weight.T + bias), the addition inside oneDNN's product, over the rows of `x`
    in calls of `smallest` to `largest` rows. TorchScript-able."""
    rows = x.reshape(-1, x.shape[-1])
    count = rows.shape[0]
    if smallest <= count <= largest:
        return _product_add(x, residual, weight, bias)
    added = residual.reshape(-1, residual.shape[-1])
    if count < smallest:  # a step's row: one call, padded
        out = _product_add(_padded(rows, smallest), _padded(added, smallest), weight, bias)[:count]
        return out.reshape(residual.shape)
    parts: List[torch.Tensor] = []
    for part, plus in zip(_blocks(rows, smallest, largest), _blocks(added, smallest, largest)):
        parts.append(_product_add(part, plus, weight, bias))
    return torch.cat(parts)[:count].reshape(residual.shape)


def _product_add(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]):
    if torch.jit.is_scripting():  # TorchScript picks the overload from the arguments
        return torch.ops.mkldnn._linear_pointwise(x, residual, weight, bias, "add")
    # eager, that lookup costs more than a small product: name the overload
    return torch.ops.mkldnn._linear_pointwise.binary(x, residual, weight, bias, "add")


def _blocks(rows: torch.Tensor, smallest: int, largest: int) -> List[torch.Tensor]:
    """`rows` [n, d] in consecutive blocks of at most `largest`, the last padded to `smallest`.
    TorchScript-able."""
    blocks: List[torch.Tensor] = []
    for block in rows.split(largest):
        blocks.append(_padded(block, smallest))
    return blocks


def _padded(rows: torch.Tensor, smallest: int) -> torch.Tensor:
    """`rows` [n, d] and copies of its last row, `smallest` rows at least (any finite row will do:
    its results are dropped). TorchScript-able."""
    count = rows.shape[0]
    if count >= smallest:
        return rows
    return torch.cat([rows, rows[count - 1:].expand(smallest - count, rows.shape[1])])


def rows_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor], smallest: int,
                   largest: int) -> torch.Tensor:
    """softmax(q k^T + mask) v for `q` [batch, heads, n, dim] (already scaled) in calls of `smallest`
    to `largest` queries; `mask` [batch, 1, n, keys] (True: visible) or None. TorchScript-able."""
    n = q.shape[2]
    if smallest <= n <= largest:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0)
    if n < smallest and mask is None:  # a step's query: one call, padded
        queries = torch.cat([q, q[:, :, n - 1:].expand(-1, -1, smallest - n, -1)], dim=2)
        return F.scaled_dot_product_attention(queries, k, v, scale=1.0)[:, :, :n]
    parts: List[torch.Tensor] = []
    for first in range(0, n, largest):
        queries = q[:, :, first:first + largest]
        visible = mask
        if mask is not None:
            visible = mask[:, :, first:first + largest]
        count = queries.shape[2]
        if count < smallest:  # padded with copies of the last query: any finite row will do
            queries = torch.cat([queries, queries[:, :, -1:].expand(-1, -1, smallest - count, -1)], dim=2)
            if visible is not None:
                visible = torch.cat([visible, visible[:, :, -1:].expand(-1, -1, smallest - count, -1)], dim=2)
        parts.append(F.scaled_dot_product_attention(queries, k, v, attn_mask=visible, scale=1.0)[:, :, :count])
    return torch.cat(parts, dim=2)


# a query attends over the cache up to the end of its block of this many positions: a step and a
# longer pass give it the same number of keys (summed in the same order), and a short text reads
# only the first blocks of a cache sized for the longest
KEY_BLOCK = 64


def rows_cache_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, positions: torch.Tensor,
                         mask: torch.Tensor, smallest: int, largest: int, key_block: int = KEY_BLOCK) -> torch.Tensor:
    """`rows_attention` of queries `q` [batch, heads, n, dim] at `positions` [batch, n] over a cache
    [batch, heads, capacity, dim]: the query at position p over keys 0..p of the cache's first
    `KEY_BLOCK`-multiple past p, whatever the other queries' positions (a call per block of positions
    among them: one, unless the pass crosses a block's end). `mask` [batch, 1, n, capacity]: query
    i of row b sees key j where j <= positions[b, i]. TorchScript-able."""
    capacity = k_cache.shape[2]
    first, last = int(positions.min()) // key_block, int(positions.max()) // key_block
    out = q
    for block in range(first, last + 1):
        keys = min((block + 1) * key_block, capacity)
        attended = rows_attention(q, k_cache[:, :, :keys], v_cache[:, :, :keys], mask[:, :, :, :keys], smallest,
                                  largest)
        if first == last:
            return attended
        mine = (positions // key_block == block)[:, None, :, None]  # [batch, 1, n, 1]
        out = torch.where(mine, attended, out)
    return out


# ----------------------------------------------------------------------------- the checks
def _sizes(block: RowBlock) -> list[int]:
    """Row counts to try within a block: its ends, and the sizes where kernels tend to change."""
    sizes = {block.smallest, block.smallest + 1, block.largest - 1, block.largest, 3, 4, 5, 8, 9, 16, 17, 31, 32}
    return sorted(s for s in sizes if block.smallest <= s <= block.largest)


def _keeps_rows_apart(run, block: RowBlock, threads: tuple[int, ...] = ()) -> bool:
    """Whether `run(indices)` (the results of the rows of a fixed table at `indices`, in one call)
    gives each row the bits it gets alone on one thread, padded to `block.smallest`, for every row
    count of the block, at every place in the call, and at each of the `threads` counts."""
    def padded(indices: list[int]) -> torch.Tensor:
        return run(indices + indices[-1:] * (block.smallest - len(indices)))[:len(indices)]

    with torch_threads(1):
        alone = torch.cat([padded([i]) for i in range(block.largest)])
    for count_threads in threads or (torch.get_num_threads(),):
        with torch_threads(count_threads):
            if not all(torch.equal(padded(list(range(first, first + count))), alone[first:first + count])
                       for count in _sizes(block) for first in (0, block.largest - count)):
                return False
    return True



def _kept_block(name: str, find: Callable[[], RowBlock]) -> RowBlock:
    """`find()`, kept on disk under `name` for this processor and torch build (`whisperspec.kept`)."""
    from whisperspec.kept import kept_json
    from whisperspec.kernels.processor import processor_key

    def found() -> list[int]:
        block = find()
        return [block.smallest, block.largest]

    # the candidates tried are part of the question: other candidates, another answer
    tried = hashlib.sha256(repr((PRODUCT_BLOCKS, ATTENTION_BLOCKS, KEY_BLOCK, COLUMN_PIECES)).encode()).hexdigest()[:8]
    smallest, largest = kept_json(Path(torch.__file__), f"{name}-{processor_key()}-{tried}", found)
    return RowBlock(smallest, largest)


@functools.cache
def product_block(dtype: torch.dtype, width: int, inner: int, threads: tuple[int, ...] = ()) -> RowBlock:
    """The block of rows in which oneDNN's products (float32, or bfloat16 with float32 sums) keep
    every row's bits here, for a network of `width` channels and `inner` feed-forward ones: checked
    on products of those shapes, with GELU inside and without, at each of the `threads` counts
    (none: the current one). ONE_ROW where no block does, or where oneDNN cannot run them."""
    name = f"product-rows-{str(dtype).removeprefix('torch.')}-{width}-{inner}-{_threads_key(threads)}"
    return _kept_block(name, functools.partial(_find_product_block, dtype, width, inner, threads))


def _threads_key(threads: tuple[int, ...]) -> str:
    return "+".join(map(str, threads or (torch.get_num_threads(),)))


def _find_product_block(dtype: torch.dtype, width: int, inner: int, threads: tuple[int, ...]) -> RowBlock:
    from whisperspec.kernels.packed_linear import ONEDNN_AVAILABLE, packed_weight

    if not ONEDNN_AVAILABLE or dtype not in (torch.float32, torch.bfloat16):
        return ONE_ROW
    generator = torch.Generator().manual_seed(0)
    largest = max(block.largest for block in PRODUCT_BLOCKS)
    products = []
    for rows_out, rows_in in ((3 * width, width), (width, width), (inner, width), (width, inner), (4096, width)):
        weight = packed_weight((torch.randn(rows_out, rows_in, generator=generator) / rows_in ** 0.5).to(dtype))
        bias = torch.randn(rows_out, generator=generator).to(dtype)
        table = torch.randn(largest, rows_in, generator=generator).to(dtype)
        if weight is None:
            return ONE_ROW
        for attr, algorithm in (("none", ""), ("gelu", "none")):
            products.append(functools.partial(_product_of, table, weight, bias, attr, algorithm))
    try:
        for block in PRODUCT_BLOCKS:
            if all(_keeps_rows_apart(run, block, threads) for run in products):
                return block
    except (AttributeError, RuntimeError):  # a torch build without these ops
        pass
    return ONE_ROW


def _product_of(table, weight, bias, attr, algorithm, indices):
    return torch.ops.mkldnn._linear_pointwise(table[indices], weight, bias, attr, [], algorithm)


@functools.cache
def attention_block(dtype: torch.dtype, heads: int, head_dim: int, keys: int, frames: int,
                    threads: tuple[int, ...] = ()) -> RowBlock:
    """The block of queries in which torch's attention keeps every query's bits here: over a cache
    of up to `keys` positions read in `KEY_BLOCK`s, each query seeing those up to its own
    (self-attention), and over `frames` unmasked encoder frames (cross-attention); a batch's rows
    apart too; at each of the `threads` counts (none: the current one). ONE_ROW where no block does."""
    name = f"attention-rows-{str(dtype).removeprefix('torch.')}-{heads}-{head_dim}-{keys}-{frames}-{_threads_key(threads)}"
    return _kept_block(name, functools.partial(_find_attention_block, dtype, heads, head_dim, keys, frames, threads))


def _find_attention_block(dtype: torch.dtype, heads: int, head_dim: int, keys: int, frames: int,
                          threads: tuple[int, ...]) -> RowBlock:
    generator = torch.Generator().manual_seed(0)
    largest = max(block.largest for block in ATTENTION_BLOCKS)
    queries = torch.randn(2, heads, largest, head_dim, generator=generator).to(dtype)
    lengths = sorted({min(KEY_BLOCK, keys), min(3 * KEY_BLOCK, keys), keys})  # self-attention's
    keys_values = {length: [torch.randn(2, heads, length, head_dim, generator=generator).to(dtype) for _ in range(2)]
                   for length in (*lengths, frames)}

    def attend(length: int, masked: bool, rows: int, indices: list[int]) -> torch.Tensor:
        k, v = keys_values[length]
        q = queries[:rows, :, indices]
        mask = None
        if masked:  # query i at position length - largest + i (at least 0): it sees keys up to there
            positions = (torch.tensor(indices) + length - largest).clamp_min(0)
            mask = (torch.arange(length)[None, :] <= positions[:, None])[None, None].expand(rows, 1, -1, -1)
        out = F.scaled_dot_product_attention(q, k[:rows], v[:rows], attn_mask=mask, scale=1.0)
        return out[0].transpose(0, 1)  # row 0's queries first: [n, heads, dim]

    try:
        for block in ATTENTION_BLOCKS:
            if all(_keeps_rows_apart(functools.partial(attend, length, masked, rows), block, threads)
                   for length, masked in (*[(n, True) for n in lengths], (frames, False)) for rows in (1, 2)):
                return block
    except RuntimeError:
        pass
    return ONE_ROW


@functools.cache
def frame_columns(dtype: torch.dtype, rows: int, out_features: int, in_features: int,
                  threads: tuple[int, ...] = ()) -> int:
    """How many output columns a call of the `rows` x `in_features` -> `out_features` product (a
    window's frames through one of the encoder's weights) may compute for every output to get the bits
    it gets on one thread, at each of the `threads` counts: `out_features` where the whole product
    does, fewer where only pieces of its columns do, 0 where none does (then it runs on one thread).

    The encoder's products do not mix rows of other windows, but oneDNN shares a product's work
    among threads by blocks of rows and columns, and on AMX tiles some shapes' split moves rows to
    kernels that sum in another order: a bfloat16 product of 1500 frames to 1536 columns (base's
    fused query/key/value) changes bits between one thread and two, the 512-column pieces do not.
    The thread count follows the machine's load (`whisperspec.cpu`), so without this the load
    would change a transcript."""
    name = f"frame-columns-{str(dtype).removeprefix('torch.')}-{rows}-{out_features}-{in_features}-{_threads_key(threads)}"
    return _kept_block(name, functools.partial(_find_frame_columns, dtype, rows, out_features, in_features,
                                               threads)).largest


def _find_frame_columns(dtype: torch.dtype, rows: int, out_features: int, in_features: int,
                        threads: tuple[int, ...]) -> RowBlock:
    from whisperspec.kernels.packed_linear import packed_weight

    generator = torch.Generator().manual_seed(0)
    weight = (torch.randn(out_features, in_features, generator=generator) / in_features ** 0.5).to(dtype)
    bias = torch.randn(out_features, generator=generator).to(dtype)
    frames = torch.randn(rows, in_features, generator=generator).to(dtype)
    for columns in COLUMN_PIECES:
        columns = columns or out_features
        if out_features % columns:
            continue
        pieces = [(packed_weight(weight[first:first + columns].contiguous()), bias[first:first + columns])
                  for first in range(0, out_features, columns)]
        if any(packed is None for packed, _ in pieces):
            break

        def run() -> torch.Tensor:
            return torch.cat([torch.ops.mkldnn._linear_pointwise(frames, packed, part, "none", [], "")
                              for packed, part in pieces], dim=-1)

        try:
            with torch_threads(1):
                alone = run()
            if all(_same_at(count, run, alone) for count in threads or (torch.get_num_threads(),)):
                return RowBlock(columns, columns)
        except (AttributeError, RuntimeError):  # a torch build without these ops
            break
    return RowBlock(0, 0)


def _same_at(threads: int, run: Callable[[], torch.Tensor], expected: torch.Tensor) -> bool:
    with torch_threads(threads):
        return torch.equal(run(), expected)
