"""Benchmarks, each a `whisperspec bench-*` command that prints numbers (speed is measured here,
never asserted in tests): `decoder` (bench: step, verify and draft costs, the decode phase per
drafter, with `trees` the arithmetic of draft trees), `corpus` (bench-corpus: whole processes
against faster-whisper, with `fw_corpus` its faster-whisper side), `startup` (bench-startup),
`online` (bench-online), `vad` (bench-vad) and `textlm` (the text-LM module's)."""


def checked_data(parser, data: str, limit: int | None, drafts: list[str], draft_option: str):
    """The data set's utterances, once every draft spec parses: a bad spec, an unknown set or a
    package not installed is the parser's one-line error (naming `draft_option` or --data)
    before anything loads."""
    from whisperspec.evaluation.datasets import load_dataset
    from whisperspec.options import parse_draft_spec
    from whisperspec.spec import SpecError

    try:
        for draft in drafts:
            parse_draft_spec(draft)
        return load_dataset(data, limit)
    except SpecError as error:
        parser.error(f"{draft_option}: {error}")
    except (ValueError, FileNotFoundError) as error:  # an unknown name, a package not installed
        parser.error(f"--data: {error}")
