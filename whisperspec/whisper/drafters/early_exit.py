"""Early exit (self-speculative): the main decoder's own first E layers draft, in its own cache.

Their keys/values stay in the main decoder's cache, so the pass that verifies the same tokens starts
at layer E (LayerSkip-style reuse). Untrained for exiting early, the layers agree with the full
model on few tokens; the kind is here for models trained with early-exit losses.
"""

from __future__ import annotations

from whisperspec.speculative.drafters.model import ModelDrafter
from whisperspec.whisper.drafters.draft_models import EarlyExitDraftModel, reduced_vocab


def early_exit_drafter(runtime, exit_layer: int | None = None, vocab_size_kept: int | None = None) -> ModelDrafter:
    """exit_layer: how many of the main decoder's layers draft (default: all but the last)."""
    n_layers = runtime.decoder.n_layers
    exit_layer = exit_layer or max(n_layers - 1, 1)
    if not 1 <= exit_layer < n_layers:
        raise ValueError(f"early-exit layer must be in 1..{n_layers - 1} for this model, got {exit_layer}")
    draft = EarlyExitDraftModel(runtime.decoder, exit_layer, reduced_vocab(runtime, vocab_size_kept))
    return ModelDrafter(draft, runtime.vocab_size)
