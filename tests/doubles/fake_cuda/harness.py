"""TEST DOUBLE harness: build the fake CUDA toolkit that the real probe compiles its CUDA program with.

`build(out_dir)` runs `build.sh` and returns the toolkit's home (give it to the
probe as `--cuda-home`). The fake runtime reads the same node configuration as
the fake NVML (`FAKE_NVML_CONFIG`), so `tests.doubles.fake_nvml.harness.run_probe`
with `cuda_homes=[home]` runs both doubles against one fake node.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..fake_nvml.harness import run_build

HERE = Path(__file__).resolve().parent
BUILD_SH = HERE / "build.sh"


def build(out_dir: os.PathLike | str) -> Path:
    """Lay out the fake toolkit in `out_dir` (bin/nvcc, include/, lib64/libcudart.so)."""
    return run_build(BUILD_SH, out_dir, "fake CUDA toolkit")
