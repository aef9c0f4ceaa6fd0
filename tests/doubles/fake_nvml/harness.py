"""TEST DOUBLE harness: build the fake libnvidia-ml, describe fake nodes, run the real probe.

`build(out_dir)` compiles `fake_nvml.c` with `build.sh`; `node_config(...)`
returns a fake node's JSON configuration (8 healthy V100s by default);
`run_probe(lib_dir, config, workdir)` runs the product's probe script exactly
as a node would (`python -` with the script on stdin), with the fake first in
LD_LIBRARY_PATH, its configuration in FAKE_NVML_CONFIG and the node files of
`fakenode.lay_out` passed as probe arguments (and `--cuda-home`: the fake CUDA
toolkit where a test gives one, else a directory without a toolkit).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from . import fakenode

HERE = Path(__file__).resolve().parent
BUILD_SH = HERE / "build.sh"
ROOT = HERE.parents[2]
PROBE = ROOT / "components" / "layers" / "gpu_runtime" / "onhost" / "probe.py"

V100 = "Tesla V100-SXM2-16GB"
DRIVER = "580.173.02"
NVML_VERSION = "13.580.173.02"
CUDA_DRIVER = 12090
_UUID_NS = uuid.UUID("6f1d7c1e-4b0a-4f43-9a53-0d6f0c7a1e55")


def run_build(build_sh: Path, out_dir: os.PathLike | str, what: str) -> Path:
    """Run a double's build.sh into `out_dir`; a failed build says which double and why."""
    out = Path(out_dir)
    p = subprocess.run(["sh", str(build_sh), str(out)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"building the {what} failed ({p.returncode}):\n{p.stdout}")
    return out


def build(out_dir: os.PathLike | str) -> Path:
    """Compile the double into `out_dir`; returns the library's path."""
    return run_build(BUILD_SH, out_dir, "fake NVML") / "libnvidia-ml.so.1"


def clean_doc(r) -> dict:
    """The probe's document, after checking it ran cleanly: exit 0, one JSON line, no stderr."""
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("\n") == 1, f"not one JSON line: {r.stdout!r}"
    assert r.stderr == "", f"the probe leaked onto its stderr: {r.stderr!r}"
    return r.doc


def load_probe_module():
    """probe.py as a module (it is shipped as program text, not imported by the product)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("gpu_probe_under_test", PROBE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def gpu_uuid(node: str, index: int) -> str:
    """A stable, NVML-shaped UUID for GPU `index` of `node`."""
    return f"GPU-{uuid.uuid5(_UUID_NS, f'{node}/{index}')}"


def device(node: str, index: int, **overrides: Any) -> dict:
    return {"name": V100, "uuid": gpu_uuid(node, index), "compute_capability": [7, 0],
            "ecc_uncorrected": 0, "memory_total": 17179869184, "minor_number": index,
            **overrides}


def node_config(node: str, gpus: int = 8, *, driver: str = DRIVER,
                nvml_version: Optional[str] = None, cuda: int = CUDA_DRIVER,
                devices: Optional[list] = None, **extra: Any) -> dict:
    """A fake node: `gpus` healthy V100s on one driver; `extra` adds or overrides keys."""
    cfg = {
        "driver_version": driver,
        "nvml_version": nvml_version or f"13.{driver}",
        "kernel_module_version": driver,
        "cuda_driver_version": cuda,
        "devices": devices if devices is not None else [device(node, i) for i in range(gpus)],
    }
    cfg.update(extra)
    return cfg


@dataclass
class ProbeRun:
    returncode: int
    stdout: str
    stderr: str

    @property
    def doc(self) -> dict:
        return json.loads(self.stdout)


def probe_env(lib_dir: os.PathLike | str, config_path: os.PathLike | str,
              path_dir: Optional[str] = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONWARNINGS")}
    env["LD_LIBRARY_PATH"] = str(lib_dir)
    env["FAKE_NVML_CONFIG"] = str(config_path)
    if path_dir:
        env["PATH"] = path_dir + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    return env


def run_probe(lib_dir: os.PathLike | str, config: Optional[dict], workdir: os.PathLike | str,
              *, python: Sequence[str] = (sys.executable,), extra_args: Sequence[str] = (),
              node_files: Optional[dict] = None,
              cuda_homes: Optional[Sequence[os.PathLike | str]] = None) -> ProbeRun:
    """Run the probe as a node does: `python -` with the script on stdin, cwd `workdir`.

    `config` None: FAKE_NVML_CONFIG names a file that does not exist. `node_files`
    (the keys of fakenode.lay_out) defaults to `config`'s own. `cuda_homes` are the
    probe's --cuda-home toolkits (the fake CUDA toolkit of tests/doubles/fake_cuda);
    None: a directory without one, so a real toolkit on the test machine is never used.
    """
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    cfg_path = work / "fake-nvml.json"
    if config is not None:
        cfg_path.write_text(json.dumps(config, indent=1))
    files = fakenode.lay_out(node_files if node_files is not None else (config or {}),
                             work / "root")
    homes = cuda_homes if cuda_homes is not None else [work / "no-cuda-toolkit"]
    cuda_args = [a for h in homes for a in ("--cuda-home", str(h))]
    p = subprocess.run([*python, "-", *files["probe_args"], *cuda_args, *extra_args],
                       input=PROBE.read_text(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, cwd=str(work), timeout=60,
                       env=probe_env(lib_dir, cfg_path, files["path_dir"]))
    return ProbeRun(p.returncode, p.stdout, p.stderr)
