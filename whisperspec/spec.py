"""The one grammar for naming a drafter and how far it drafts: `DRAFT[@LOOKAHEAD]`.

    DRAFT      KIND[:ARG]   e.g. none, auto, ngram:4, int8:8192, early-exit:2, or a model
                            (tiny.en, a folder, a hub id, my-draft.safetensors)
    LOOKAHEAD  K | heuristic[:K] | confidence[:T] | cost

and where several systems are compared, `SYSTEM[:DRAFT[@LOOKAHEAD]]` (`whisperspec evaluate`).
The CLI, `Transcriber`, bench, evaluate, the demo and the text-LM module all parse with these
functions, each passing the drafter kinds it has, so a spec is checked before any model loads and
a wrong one is a one-line `SpecError` that lists what is accepted.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

LOOKAHEAD_POLICIES = "K (tokens per round, 1-64), heuristic[:K], confidence[:T] (0 < T < 1) or cost"
MAX_LOOKAHEAD = 64  # past this a verify pass costs more than any acceptance could repay
# owner/name: what a hub id looks like; anything else that is not an embedded name or an existing
# path is a typo, refused at once instead of being tried against a hub
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class SpecError(ValueError):
    """A drafter, lookahead or system spec that does not parse; the message lists what does."""


@dataclass(frozen=True)
class DrafterKind:
    name: str
    argument: str = ""  # what KIND:ARG's ARG is (a whole number >= 1), "" if it takes none
    help: str = ""

    def usage(self) -> str:
        return f"{self.name}[:{self.argument}]" if self.argument else self.name


@dataclass(frozen=True)
class LookaheadSpec:
    """A parsed LOOKAHEAD: `policy` "fixed" (`value` K), "heuristic" (`value` its first K),
    "confidence" (`value` the threshold T) or "cost"; `value` None is the policy's own default.
    `whisperspec.speculative.lookahead.make_lookahead` builds the policy it names."""

    policy: str
    value: int | float | None = None

    def __str__(self) -> str:  # as written in a spec, canonical
        if self.policy == "fixed":
            return str(self.value)
        return self.policy if self.value is None else f"{self.policy}:{self.value:g}"


@dataclass(frozen=True)
class DraftSpec:
    """A parsed `DRAFT[@LOOKAHEAD]`. `kind` is one of the caller's kinds, or "model" (a model by
    name, folder or hub id, `argument` its head size) or "file" (a trained draft file)."""

    kind: str
    argument: int | None = None
    model: str | None = None  # for kind "model" / "file"
    lookahead: LookaheadSpec | None = None  # None: the caller's default

    @property
    def drafter(self) -> str:
        """The DRAFT part, as written back."""
        name = self.model if self.kind in ("model", "file") else self.kind
        return name if self.argument is None else f"{name}:{self.argument}"

    @property
    def drafts(self) -> bool:
        return self.kind != "none"

    def __str__(self) -> str:
        return self.drafter + (f"@{self.lookahead}" if self.lookahead else "")


def parse_draft(text: str | DraftSpec | None, kinds: Sequence[DrafterKind], *, models: Iterable[str] = (),
                files: bool = False, lookahead: str | int | None = None, default: str = "none") -> DraftSpec:
    """`DRAFT[@LOOKAHEAD]`. kinds: the named drafters the caller builds; models: the embedded model
    names it accepts as a draft (any existing folder or hub id is accepted too); files: whether a
    `.safetensors` draft file is; lookahead: a separate option (`--lookahead`), the same as `@`."""
    if isinstance(text, DraftSpec):
        spec = text
    else:
        spec = _parse_draft_text(default if text is None or str(text).strip() == "" else str(text).strip(),
                                 kinds, tuple(models), files)
    if lookahead is not None and str(lookahead).strip():
        if spec.lookahead is not None:
            raise SpecError(f"lookahead given twice: {spec} and --lookahead {lookahead}")
        spec = DraftSpec(spec.kind, spec.argument, spec.model, parse_lookahead(lookahead))
    if spec.lookahead is not None and not spec.drafts:
        raise SpecError(f"lookahead {spec.lookahead!r} needs a drafter (none drafts nothing)")
    return spec


def _parse_draft_text(text: str, kinds: Sequence[DrafterKind], models: tuple[str, ...], files: bool) -> DraftSpec:
    drafter, at, policy = text.partition("@")
    if at and not policy:
        raise SpecError(f"drafter {text!r}: nothing after '@'; a lookahead is {LOOKAHEAD_POLICIES}")
    lookahead = parse_lookahead(policy) if at else None
    name, colon, argument = drafter.partition(":")
    by_name = {kind.name: kind for kind in kinds}
    if name in by_name:
        kind = by_name[name]
        if not colon:
            return DraftSpec(name, None, None, lookahead)
        if not kind.argument:
            raise SpecError(f"drafter {name!r} takes no ':' argument (got {drafter!r}); a lookahead goes after "
                            f"'@', e.g. {name}@{argument or 5}")
        return DraftSpec(name, _whole_number(argument, f"{name}:{kind.argument}"), None, lookahead)
    if files and drafter.endswith(".safetensors"):
        if not Path(drafter).expanduser().is_file():
            raise SpecError(f"draft file {drafter!r} not found")
        return DraftSpec("file", None, drafter, lookahead)
    source, colon, size = drafter.rpartition(":")
    if colon and size.isdigit() and source:  # MODEL:V, its head scoring the V most frequent text tokens
        drafter, argument = source, _whole_number(size, "MODEL:V")
    else:
        argument = None
    if is_model_name(drafter, models):
        return DraftSpec("model", argument, drafter, lookahead)
    accepted = [kind.usage() for kind in kinds] + ["FILE.safetensors"] * files
    accepted.append(f"a model ({', '.join(models) + ', ' if models else ''}a local folder or an owner/name hub id)")
    raise SpecError(f"unknown drafter {text!r}: use {', '.join(accepted)}, optionally followed by @LOOKAHEAD")


def is_model_name(text: str, embedded: Iterable[str] = ()) -> bool:
    """An embedded name, an existing local path, or something shaped like a hub id (owner/name)."""
    return text in embedded or Path(text).expanduser().exists() or bool(HUB_ID.match(text))


def parse_lookahead(text: str | int | LookaheadSpec) -> LookaheadSpec:
    """`K`, `heuristic[:K]`, `confidence[:T]` or `cost`, checked."""
    if isinstance(text, LookaheadSpec):
        return text
    text = str(text).strip()
    name, colon, argument = text.partition(":")
    if name.isdigit() and not colon:
        return LookaheadSpec("fixed", _whole_number(name, "lookahead K", maximum=MAX_LOOKAHEAD))
    if name == "heuristic":
        return LookaheadSpec(name, _whole_number(argument, "heuristic:K", maximum=MAX_LOOKAHEAD) if colon else None)
    if name == "confidence":
        if not colon:
            return LookaheadSpec(name)
        try:
            threshold = float(argument)
        except ValueError:
            threshold = math.nan
        if not 0 < threshold < 1:
            raise SpecError(f"lookahead {text!r}: the confidence threshold T must be a number between 0 and 1")
        return LookaheadSpec(name, threshold)
    if name == "cost" and not colon:
        return LookaheadSpec(name)
    raise SpecError(f"unknown lookahead {text!r}: use {LOOKAHEAD_POLICIES}")


def _whole_number(text: str, what: str, maximum: int | None = None) -> int:
    if not text.isdigit() or int(text) < 1 or (maximum is not None and int(text) > maximum):
        limit = f" from 1 to {maximum}" if maximum else " >= 1"
        raise SpecError(f"{what}: {text!r} is not a whole number{limit}")
    return int(text)


@dataclass(frozen=True)
class SystemSpec:
    """A parsed `SYSTEM[:REST]`: for a system that drafts, REST is `DRAFT[@LOOKAHEAD]` (`draft`);
    for the others it is the system's own option (`option`)."""

    system: str
    draft: DraftSpec | None = None
    option: str = ""


def parse_system(text: str, drafting: dict[str, dict], others: Sequence[str]) -> SystemSpec:
    """drafting: system name -> the keyword arguments of `parse_draft` for its drafter;
    others: systems whose `:REST` is an option of their own."""
    system, _, rest = text.strip().partition(":")
    if system in drafting:
        return SystemSpec(system, parse_draft(rest or None, **drafting[system]))
    if system in others:
        return SystemSpec(system, option=rest)
    names = [f"{name}[:DRAFT[@LOOKAHEAD]]" for name in drafting] + [f"{name}[:...]" for name in others]
    raise SpecError(f"unknown system {text!r}: use {', '.join(names)}")
