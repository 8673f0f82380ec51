"""What the processor is, for the choices of kernel and compute type that depend on it.

These choices are read from the instruction set and vendor, never timed: a choice that flipped with
the machine's load would change transcripts' last bits from one run to the next.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

import torch


def cpu_vendor(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """"GenuineIntel", "AuthenticAMD", ... or "" where the system does not say."""
    return _cpuinfo_field(cpuinfo, "vendor_id")


def processor_name(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The processor's model name ("AMD EPYC 9R14", ...), or its vendor, or "unknown"."""
    return _cpuinfo_field(cpuinfo, "model name") or cpu_vendor(cpuinfo) or "unknown"


def instruction_sets(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The widest vector and matrix instructions the processor has, as its flags say ("AVX-512 with
    BF16 and VNNI", "AVX2", ...): "AMD EPYC" alone names Zen 3, 4 and 5 alike."""
    flags = set(_cpuinfo_field(cpuinfo, "flags").split())
    if "avx512f" in flags:
        extras = [name for flag, name in (("avx512_bf16", "BF16"), ("avx512_vnni", "VNNI")) if flag in flags]
        widest = "AVX-512" + (f" with {' and '.join(extras)}" if extras else "")
    else:
        widest = next((name for flag, name in (("avx2", "AVX2"), ("avx", "AVX")) if flag in flags), "no AVX")
    return widest + (", AMX" if "amx_tile" in flags else "")


def processor_key(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """A short name for this kind of processor: its model and instruction set, and the settings
    that cap which of them oneDNN and torch use (what decides which kernels run), for keeping what
    was checked on it (`whisperspec.kept`)."""
    caps = [os.environ.get(name, "") for name in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")]
    described = "|".join([processor_name(cpuinfo), _cpuinfo_field(cpuinfo, "flags"), *caps])
    return hashlib.sha256(described.encode()).hexdigest()[:16]


def _cpuinfo_field(cpuinfo: Path, field: str) -> str:
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith(field):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


@functools.cache  # the processor does not change while a process runs
def bfloat16_runs() -> bool:
    """Whether oneDNN runs bfloat16 products here at all: it needs AVX-512 (with or without BF16) or
    AMX. Without them (an AVX2-only processor such as AMD's Zen 3) compute type bfloat16 is refused."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch without oneDNN
        return False


@functools.cache
def bfloat16_is_fast() -> bool:
    """Whether bfloat16 products (float32 sums) run well above float32's speed here: on processors
    with AMX tiles that the system lets programs use (Intel Xeon since Sapphire Rapids, which
    multiply bfloat16 tiles natively), and on AMD processors with AVX-512 BF16 (Zen 4 and later run
    bfloat16 pairs at twice float32's rate). Not on an Intel processor with AVX-512 BF16 alone,
    where oneDNN's bfloat16 path made the encoder slower than float32. The measured speeds per
    processor: docs/BENCHMARKS.md."""
    if amx_tiles_used():
        return True
    try:
        return bool(torch.cpu._is_avx512_bf16_supported()) and cpu_vendor() == "AuthenticAMD"
    except (AttributeError, RuntimeError):  # a torch without this probe
        return False


@functools.cache
def bfloat16_decoder_pays() -> bool:
    """Whether a decoder's per-token work runs faster on bfloat16 than on float32 here: with AMX
    tiles, which take a verify pass's few rows together at a one-token step's cost. Not with AMD's
    AVX-512 BF16, where a bfloat16 step and verify pass measured slower than float32's
    (docs/BENCHMARKS-HISTORY.md, session 36): there compute type bfloat16 is the encoder's and the window's
    cross-attention projections', and the decoder stays float32."""
    return amx_tiles_used()


def onednn_isa_cap() -> str:
    """The instruction set oneDNN is capped at (`ONEDNN_MAX_CPU_ISA`, or its older name
    `DNNL_MAX_CPU_ISA`), upper case; "" where nothing caps it."""
    return (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "").strip().upper()


@functools.cache
def amx_tiles_used() -> bool:
    """Whether oneDNN multiplies on AMX tiles here: the processor has them, the system lets this
    process use them, and `ONEDNN_MAX_CPU_ISA` does not cap oneDNN below them. Under
    `ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16` an Intel Xeon with AMX runs the AVX-512 BF16 kernels,
    where a bfloat16 encoder pass measured slower than a float32 one (docs/BENCHMARKS.md, Intel), so
    the choices that AMX pays for must not follow torch's probe of the processor alone."""
    try:
        tiles = bool(torch.cpu._is_amx_tile_supported() and torch.cpu._init_amx())
    except (AttributeError, RuntimeError):  # a torch without these probes
        return False
    cap = onednn_isa_cap()  # oneDNN's names: AVX512_CORE_BF16, AVX512_CORE_AMX, AVX10_1_512_AMX, ...
    return tiles and (cap in ("", "ALL", "DEFAULT") or "AMX" in cap)
