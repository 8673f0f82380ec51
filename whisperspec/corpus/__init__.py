"""Corpus mode: many files through one transcriber, batched, resumable (docs/CORPUS.md)."""

from whisperspec.corpus.inputs import InputError, Source, expand_inputs
from whisperspec.corpus.results import FileResult

__all__ = ["FileResult", "InputError", "Source", "expand_inputs"]
