"""Metrics from per-utterance outputs, and the report: results.json, report.md, PNG plots."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from whisperspec.atomic import atomic_write
from whisperspec.evaluation.scoring import score

REFERENCE_SYSTEM = "whisperspec:none"  # plain greedy: what every whisperspec drafter must reproduce
# Each family's own greedy output, which its drafting variants are compared with (transformers'
# assisted Whisper generation switches off begin_suppress_tokens and may differ: reported, not hidden)
FAMILY_GREEDY = {"whisperspec": "whisperspec:none", "whisperspec-int8": "whisperspec-int8:none",
                 "transformers": "transformers"}


def summarize(utterances, outputs: dict[str, list], peak_rss_mb: dict[str, float]) -> dict:
    """outputs[system] is a list of Output aligned with `utterances`."""
    audio_seconds = [u.duration or 0.0 for u in utterances]
    language = utterances[0].language if utterances else "en"
    references = [u.text for u in utterances]
    summary = {}
    for name, outs in outputs.items():
        seconds = np.array([o.seconds for o in outs])
        scores = score(references, [o.text for o in outs], language)
        spec = [o.stats for o in outs if o.stats]
        proposed, accepted = sum(s.get("proposed", 0) for s in spec), sum(s.get("accepted", 0) for s in spec)
        rounds, emitted = sum(s.get("rounds", 0) for s in spec), sum(s.get("emitted", 0) for s in spec)
        labelled = scores.reference_words > 0  # a set without references (for speed) has no WER
        summary[name] = {
            "wer": scores.wer if labelled else None, "cer": scores.cer if labelled else None,
            "total_seconds": float(seconds.sum()),
            "latency_p50": float(np.percentile(seconds, 50)), "latency_p90": float(np.percentile(seconds, 90)),
            "rtf": float(seconds.sum() / max(sum(audio_seconds), 1e-9)),
            "tokens_per_second": sum(o.tokens for o in outs) / max(float(seconds.sum()), 1e-9),
            "acceptance_rate": accepted / proposed if proposed else None,
            "mean_accepted_length": emitted / rounds if rounds and proposed else None,
            # the decode phase alone (ours: the encoder and the features excluded)
            "decode_seconds": sum(s["decoder_ms"] for s in spec) / 1e3 if any("decoder_ms" in s for s in spec) else None,
            "peak_rss_mb": peak_rss_mb.get(name),
            "per_utterance_wer": scores.per_utterance_wer,
        }
    for name, outs in outputs.items():
        summary[name]["speedup"] = {base: speedups(outputs[base], outs) for base in outputs if base != name}
        greedy = FAMILY_GREEDY.get(name.split(":")[0])
        if greedy in outputs:
            summary[name]["differs_from_greedy"] = sum(a.text != b.text for a, b in zip(outs, outputs[greedy]))
    return summary


def speedups(baseline: list, system: list) -> dict:
    """Ratio of summed latencies, and the median of per-utterance ratios (>1: system is faster)."""
    base, ours = np.array([o.seconds for o in baseline]), np.array([o.seconds for o in system])
    return {"total": float(base.sum() / ours.sum()), "median": float(np.median(base / ours))}


def markdown_table(summary: dict, baselines: list[str]) -> str:
    head = ["system", "WER %", "CER %", "p50 s", "p90 s", "RTF", "tokens/s", "decode s", "acceptance", "tokens/pass",
            *[f"speed-up vs {b}" for b in baselines], "differs from greedy"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, m in summary.items():
        row = [name, *(_maybe(None if m[k] is None else 100 * m[k], "{:.2f}") for k in ("wer", "cer")),
               f"{m['latency_p50']:.3f}",
               f"{m['latency_p90']:.3f}", f"{m['rtf']:.3f}", f"{m['tokens_per_second']:.1f}",
               _maybe(m.get("decode_seconds"), "{:.2f}"),
               _maybe(m["acceptance_rate"], "{:.1%}"), _maybe(m["mean_accepted_length"], "{:.2f}"),
               *[("1.00x" if b == name else f"{m['speedup'][b]['total']:.2f}x") if b in summary else "-"
                 for b in baselines],
               str(m.get("differs_from_greedy", "-"))]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def _maybe(value, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def write_report(out_dir: Path, utterances, outputs: dict, summary: dict, header: str) -> dict[str, Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    baselines = [b for b in ("whisperspec:none", "whisperspec-int8:none", "transformers", "faster-whisper:int8",
                             "faster-whisper:float32") if b in summary]
    per_utterance = [{"id": u.id, "duration": u.duration, "reference": u.text,
                      **{name: {"text": outs[i].text, "seconds": outs[i].seconds} for name, outs in outputs.items()}}
                     for i, u in enumerate(utterances)]
    paths = {
        "json": _atomic_write(out_dir / "results.json", json.dumps(
            {"summary": summary, "utterances": per_utterance}, indent=2)),
        "md": _atomic_write(out_dir / "report.md", f"{header}\n\n{markdown_table(summary, baselines)}\n"),
    }
    paths.update(_plots(out_dir, utterances, outputs))
    return paths


def _atomic_write(path: Path, text: str) -> Path:
    with atomic_write(path) as out:
        out.write(text)
    return path


def _plots(out_dir: Path, utterances, outputs: dict) -> dict[str, Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = {}
    names = list(outputs)
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(names)), 4))
    ax.boxplot([[o.seconds for o in outputs[n]] for n in names], showfliers=False)
    ax.set_xticks(range(1, len(names) + 1), names, rotation=30, ha="right")
    ax.set_ylabel("latency per utterance (s)")
    ax.set_title("Latency distribution")
    paths["latency"] = _save(fig, out_dir / "latency.png")

    if REFERENCE_SYSTEM in outputs:
        fig, ax = plt.subplots(figsize=(6, 4))
        durations = [u.duration or 0 for u in utterances]
        for name in names:
            if name != REFERENCE_SYSTEM:
                ratios = [b.seconds / o.seconds for b, o in zip(outputs[REFERENCE_SYSTEM], outputs[name])]
                ax.scatter(durations, ratios, s=12, label=name)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xlabel("utterance length (s)")
        ax.set_ylabel("speed-up vs whisperspec greedy")
        ax.legend(fontsize=7)
        paths["speedup"] = _save(fig, out_dir / "speedup_vs_length.png")

    by_lookahead = {}
    for name, outs in outputs.items():
        match = re.fullmatch(r"whisperspec:(.+)@(\d+)", name)
        stats = [o.stats for o in outs if o.stats]
        proposed = sum(s.get("proposed", 0) for s in stats)
        if match and proposed:
            by_lookahead.setdefault(match[1], []).append(
                (int(match[2]), sum(s.get("accepted", 0) for s in stats) / proposed))
    if by_lookahead:
        fig, ax = plt.subplots(figsize=(6, 4))
        for draft, points in by_lookahead.items():
            points.sort()
            ax.plot([k for k, _ in points], [a for _, a in points], marker="o", label=draft)
        ax.set_xlabel("lookahead k")
        ax.set_ylabel("acceptance rate")
        ax.legend()
        paths["acceptance"] = _save(fig, out_dir / "acceptance_vs_lookahead.png")
    return paths


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path
