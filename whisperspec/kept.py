"""What is derived from a file once and kept on disk for the next process: a model's fingerprint,
a tokenizer's token table, a draft's int8 weights.

A command that transcribes one short file pays every derivation again in each new process, and
some cost a sizeable share of the whole run (hashing base's embeddings, parsing a tokenizer's 50k
merges, quantising a draft's head). Each kept form lives in the cache (`cache_dir()/kept`), under
a name made of its source's absolute path, and holds the source's size and modification time: it
is used only while the source is the same file, and made again (and kept again) otherwise.
Keeping is best effort: a read-only or full disk costs the next process the derivation, never a
failure.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable

from whisperspec.atomic import atomic_path, atomic_write
from whisperspec.cache import cache_dir


def kept_json(source: Path | None, name: str, make: Callable[[], Any]) -> Any:
    """`make()` (a JSON value) derived from `source`, read from disk when kept from this very file."""
    if source is None:
        return make()
    path, key = _kept_path(source, name + ".json"), _file_key(source)
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
        if kept["source"] == key:
            return kept["value"]
    except (OSError, ValueError, KeyError, TypeError):  # none kept, or unreadable
        pass
    value = make()
    try:
        with atomic_write(path) as file:
            json.dump({"source": key, "value": value}, file)
    except OSError:
        pass
    return value


def kept_tensors(source: Path | None, name: str, make: Callable[[], dict]) -> dict:
    """`make()` (a dict of name -> tensor) derived from `source`, read from disk (a safetensors
    file) when kept from this very file."""
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import save_file

    if source is None:
        return make()
    path, key = _kept_path(source, name + ".safetensors"), json.dumps(_file_key(source))
    try:
        with safe_open(str(path), "pt") as file:
            if (file.metadata() or {}).get("source") == key:
                return {tensor: file.get_tensor(tensor) for tensor in file.keys()}
    except (OSError, SafetensorError):
        pass
    tensors = make()
    try:
        with atomic_path(path) as temporary:
            save_file({n: t.contiguous() for n, t in tensors.items()}, str(temporary), metadata={"source": key})
    except (OSError, SafetensorError):
        pass
    return tensors


def _kept_path(source: Path, name: str) -> Path:
    source = Path(source).resolve()
    digest = hashlib.sha256(str(source).encode()).hexdigest()[:16]
    return cache_dir() / "kept" / f"{digest}-{source.name}.{name}"


def _file_key(path: Path) -> list[int]:
    status = Path(path).stat()
    return [status.st_size, status.st_mtime_ns]
