"""What this test host's processor can run: tests of a compute type it cannot run are skipped, saying so."""

import pytest

from whisperspec.kernels.processor import bfloat16_runs, processor_name

needs_bfloat16 = pytest.mark.skipif(not bfloat16_runs(), reason=f"{processor_name()} has no bfloat16 products "
                                    "(AVX2 only): compute type bfloat16 is refused here")
BFLOAT16 = pytest.param("bfloat16", marks=needs_bfloat16)
