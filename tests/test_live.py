"""Live transcription's stable-prefix policy (local agreement, cuts at confirmed segment ends)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from whisperspec.audio import SAMPLE_RATE, load_audio
from whisperspec.demo.live_transcript import LiveTranscript
from whisperspec.result import Segment, Transcription

DATA = Path(__file__).parent / "data"
WORDS = [" The", " number", " you", " have", " dial", "ed", " is", " not", " in", " service", "."]


class ScriptedTranscriber:
    """Answers each reading with the next scripted list of segments [(words, end seconds)]."""

    def __init__(self, readings):
        self.readings, self.calls = iter(readings), []
        self.runtime = self
        self.tokenizer = self

    def decode(self, ids):  # tokenizer.decode
        return "".join(WORDS[i] for i in ids)

    def decode_text(self, ids):  # runtime.decode_text
        return self.decode(ids)

    def transcribe(self, audio, **options):
        self.calls.append((len(audio), options))
        segments = [Segment(0.0, end, "", [WORDS.index(w) for w in words], [True] * len(words))
                    for words, end in next(self.readings)]
        return Transcription("", segments, "en", len(audio) / SAMPLE_RATE)


def texts(live, transcriber):
    return live.text(transcriber.runtime)


def test_tokens_are_confirmed_when_two_readings_agree_and_only_whole_words():
    transcriber = ScriptedTranscriber([
        [([" The", " number", " you"], 2.0)],
        [([" The", " number", " you", " have", " dial"], 3.0)],  # agrees on 3 tokens
        [([" The", " number", " you", " have", " dial", "ed"], 3.5)],  # " dial" agreed, but "ed" goes on the word
        [([" The", " number", " you", " have", " dial", "ed", " is"], 4.0)],
    ])
    live = LiveTranscript()
    live.add(np.full(SAMPLE_RATE, 0.1, np.float32), SAMPLE_RATE)
    live.step(transcriber)
    assert texts(live, transcriber) == ("", "The number you")  # one reading confirms nothing
    live.step(transcriber)
    assert texts(live, transcriber) == ("The number you", "have dial")
    live.step(transcriber)
    assert texts(live, transcriber) == ("The number you have", "dialed")  # not "dial" alone
    live.step(transcriber)
    assert texts(live, transcriber) == ("The number you have dialed", "is")
    assert transcriber.calls[-1][1]["timestamps"] and not transcriber.calls[0][1]["initial_prompt"]


def test_the_buffer_is_cut_at_a_confirmed_segment_end_and_what_is_cut_is_the_next_prompt():
    first, second = ([" The", " number", "."], 1.5), ([" you", " have"], 2.5)
    transcriber = ScriptedTranscriber([[first, second], [first, second], [([" you", " have", " dial"], 1.2)]])
    live = LiveTranscript()
    live.add(np.full(3 * SAMPLE_RATE, 0.1, np.float32), SAMPLE_RATE)
    live.step(transcriber)
    assert live.offset == 0 and len(live.buffer) == 3 * SAMPLE_RATE
    live.step(transcriber)  # both segments agreed; the first is followed by another: cut at 1.5 s
    assert live.offset == 1.5 and len(live.buffer) == int(1.5 * SAMPLE_RATE)
    assert texts(live, transcriber) == ("The number. you have", "")
    assert [t.from_draft for t in live.committed] == [True] * 3  # how each token arrived is kept
    live.step(transcriber)
    assert transcriber.calls[-1][1]["initial_prompt"] == "The number."  # the cut text conditions the rest
    assert texts(live, transcriber) == ("The number. you have", "dial")


def test_at_thirty_seconds_the_latest_reading_is_taken_up_to_its_last_segment_end():
    readings = [[([" The", " number"], 12.0), ([" you", " have"], 29.0), ([" dial"], 31.0)],
                [([" is", " not"], 12.0), ([" in"], 20.0)]]  # no two readings agree
    transcriber = ScriptedTranscriber(readings)
    live = LiveTranscript()
    live.add(np.full(31 * SAMPLE_RATE, 0.1, np.float32), SAMPLE_RATE)
    live.step(transcriber)
    assert live.offset == 29.0 and texts(live, transcriber) == ("The number you have", "dial")
    live.add(np.full(SAMPLE_RATE // 2, 0.1, np.float32), SAMPLE_RATE)
    live.finish(transcriber)  # the recording stopped: what is left is read, and that reading stands
    assert texts(live, transcriber) == ("The number you have is not in", "")
    assert len(live.buffer) == 0 and live.seconds == 31.5


def test_a_step_waits_for_enough_new_audio_and_audio_added_during_a_reading_is_kept():
    live = LiveTranscript(step_seconds=1.0)
    live.add(np.zeros(4800, np.int16), 48000)  # 0.1 s of 16-bit PCM at the browser's rate
    assert not live.ready and len(live.buffer) == 1600
    arrived_meanwhile = np.full(SAMPLE_RATE, 0.2, np.float32)

    class Recording(ScriptedTranscriber):
        def transcribe(self, audio, **options):
            live.add(arrived_meanwhile, SAMPLE_RATE)  # a chunk arriving while the buffer is read
            return super().transcribe(audio, **options)

    live.add(np.full(SAMPLE_RATE, 0.1, np.float32), SAMPLE_RATE)
    assert live.ready
    live.step(Recording([[([" The"], 1.0)]]))
    assert live.read == 1600 + SAMPLE_RATE and len(live.buffer) == 1600 + 2 * SAMPLE_RATE and live.ready


@pytest.mark.real
def test_a_recording_streamed_in_browser_sized_chunks_reads_like_the_clips():
    """Three Asterisk prompts with pauses, sent as the browser sends them (0.1 s of 48-kHz 16-bit
    PCM at a time): the confirmed text only grows, the buffer is cut as segments are confirmed, the
    drafter's tokens are marked, and the words are the prompts'."""
    import json

    from whisperspec.evaluation.scoring import score
    from whisperspec.transcribe import Transcriber

    clips = ["ss-noservice", "privacy-prompt", "tt-weasels"]
    references = {r["id"]: r["text"] for r in map(json.loads, (DATA / "references.jsonl").read_text().splitlines())}
    pause = np.zeros(SAMPLE_RATE // 2, np.float32)
    audio = np.concatenate([part for clip in clips for part in (load_audio(DATA / f"{clip}.flac"), pause)])
    import librosa

    browser = np.round(librosa.resample(audio, orig_sr=SAMPLE_RATE, target_sr=48000) * 32767).astype(np.int16)
    transcriber = Transcriber("tiny.en", draft="int8")
    live, confirmed, longest_buffer, offsets = LiveTranscript(), [], 0, []
    for start in range(0, len(browser), 4800):
        live.add(browser[start:start + 4800], 48000)
        if live.ready:
            live.step(transcriber)
            confirmed.append(live.text(transcriber.runtime)[0])
            longest_buffer, offsets = max(longest_buffer, len(live.buffer)), offsets + [live.offset]
    live.finish(transcriber)
    text = live.text(transcriber.runtime)[0]
    assert all(text.startswith(before) for before in confirmed), confirmed  # confirmed text never changes
    assert offsets[-1] > 4 and longest_buffer < 0.7 * len(audio)  # cut once the first prompt was confirmed
    assert 0 < sum(t.from_draft for t in live.committed) < len(live.committed)
    assert score([" ".join(references[c] for c in clips)], [text]).wer <= 0.15, text


def test_a_reading_reads_at_most_one_window_and_finishing_reads_the_rest():
    transcriber = ScriptedTranscriber([[([" The"], 20.0)], [([" number"], 10.0)], [([" you"], 5.0)]])
    live = LiveTranscript()
    live.add(np.full(70 * SAMPLE_RATE, 0.1, np.float32), SAMPLE_RATE)  # a reading fell far behind
    live.step(transcriber)
    assert transcriber.calls[0][0] == 30 * SAMPLE_RATE and live.offset == 30.0  # read 30 s, cut at 30 s
    live.finish(transcriber)
    assert [n for n, _ in transcriber.calls] == [30 * SAMPLE_RATE, 30 * SAMPLE_RATE, 10 * SAMPLE_RATE]
    assert texts(live, transcriber) == ("The number you", "") and live.seconds == 70.0 and not len(live.buffer)
