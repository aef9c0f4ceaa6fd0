"""The probe's CUDA runtime step, run as a node runs it, against the fake CUDA toolkit.

The real probe script compiles its embedded C program with the double's `nvcc`
(gcc around the fake libcudart, tests/doubles/fake_cuda) and runs it; NVML is
the fake NVML, and both read the same fake node configuration. The verdicts
come from the real baseline.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from components.layers.gpu_runtime.baseline import GpuExpectation, judge_node
from tests.doubles.fake_cuda import harness as cuda_harness
from tests.doubles.fake_nvml import harness
from tests.doubles.fake_nvml.harness import DRIVER, V100, device, node_config

INSUFFICIENT = "CUDA driver version is insufficient for CUDA runtime version"


def exp(node: str) -> GpuExpectation:
    return GpuExpectation(node=node, gpu_count=8, gpu_model=V100, driver_version=DRIVER,
                          cuda_runtime="12.9.1")


@pytest.fixture(scope="session")
def fake_nvml_lib(tmp_path_factory) -> Path:
    return harness.build(tmp_path_factory.mktemp("fake-nvml-lib")).parent


@pytest.fixture(scope="session")
def fake_cuda(tmp_path_factory) -> Path:
    """The fake toolkit's home (bin/nvcc, include/, lib64/), built once per session."""
    home = cuda_harness.build(tmp_path_factory.mktemp("fake-cuda") / "cuda-12.9")
    assert (home / "bin" / "nvcc").is_file() and (home / "lib64" / "libcudart.so").is_file()
    return home


@pytest.fixture
def probe(fake_nvml_lib, fake_cuda, tmp_path, monkeypatch):
    """probe(config, cuda_homes=[fake toolkit]) -> the document, after checking it ran cleanly.

    TMPDIR is a directory of the test's own, which must be empty again afterwards: the
    probe's compile and run leave nothing behind.
    """
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmpdir))

    def run(config, cuda_homes=None):
        r = harness.run_probe(fake_nvml_lib, config, tmp_path / "node",
                              cuda_homes=[fake_cuda] if cuda_homes is None else cuda_homes)
        harness.clean_doc(r)
        assert list(tmpdir.iterdir()) == [], "the probe left files in TMPDIR"
        return r.doc
    return run


load_probe_module = harness.load_probe_module


# ---- through the doubles ----------------------------------------------------------------------
def test_healthy_8_v100(probe, fake_cuda):
    before = sorted(p.relative_to(fake_cuda) for p in fake_cuda.rglob("*"))
    doc = probe(node_config("gpu01"))
    cr = doc["cuda_runtime"]
    assert cr["toolkit"] == str(fake_cuda) and cr["nvcc"] == str(fake_cuda / "bin" / "nvcc")
    assert cr["skipped"] is None
    assert cr["compiled"] is True and cr["compile_exit_code"] == 0
    assert cr["ran"] is True and cr["exit_code"] == 0 and cr["run_error"] is None
    assert (cr["runtime_version"], cr["driver_version"], cr["device_count"]) == (12090, 12090, 8)
    assert cr["devices"] == [{"index": i, "compute_capability": "7.0"} for i in range(8)]
    assert cr["sm70"] is True
    assert cr["errors"] == [] and cr["stderr"] == "" and cr["stdout_other"] == []
    assert sorted(p.relative_to(fake_cuda) for p in fake_cuda.rglob("*")) == before

    v = judge_node(exp("gpu01"), doc)
    assert v.ok, v.reasons
    assert v.output()["cuda_runtime"] == {"toolkit": str(fake_cuda), "version": "12.9",
                                          "device_count": 8, "sm70": True}


def test_values_come_from_the_fake_config(probe):
    """Versions and compute capability only this config has: the program really ran."""
    devices = [device("gpu02", i, compute_capability=[8, 0]) for i in range(8)]
    doc = probe(node_config("gpu02", devices=devices, cuda=12080, cuda_runtime_version=12040))
    cr = doc["cuda_runtime"]
    assert (cr["runtime_version"], cr["driver_version"]) == (12040, 12080)
    assert {d["compute_capability"] for d in cr["devices"]} == {"8.0"}
    assert cr["sm70"] is False
    assert judge_node(exp("gpu02"), doc).output()["cuda_runtime"]["sm70"] is False


def test_no_toolkit_is_recorded_not_failed(probe, tmp_path):
    (tmp_path / "not-executable" / "bin").mkdir(parents=True)
    (tmp_path / "not-executable" / "bin" / "nvcc").write_text("#!/bin/sh\n")  # mode 644
    homes = [tmp_path / "missing", tmp_path / "not-executable"]
    doc = probe(node_config("gpu01"), cuda_homes=homes)
    cr = doc["cuda_runtime"]
    assert cr["toolkit"] is None and cr["compiled"] is False and cr["ran"] is False
    assert cr["skipped"] == f"no CUDA toolkit (bin/nvcc) under {homes[0]}, {homes[1]}"
    v = judge_node(exp("gpu01"), doc)
    assert v.ok, v.reasons
    assert v.output()["cuda_runtime"] == {"toolkit": None, "version": None,
                                          "device_count": None, "sm70": None}


def test_first_home_with_a_toolkit_is_used(probe, fake_cuda, tmp_path):
    doc = probe(node_config("gpu01"), cuda_homes=[tmp_path / "missing", fake_cuda])
    assert doc["cuda_runtime"]["toolkit"] == str(fake_cuda)
    assert doc["cuda_runtime"]["device_count"] == 8


def test_runtime_newer_than_the_driver(probe):
    """cudaErrorInsufficientDriver (35): the toolkit's runtime needs a newer driver."""
    doc = probe(node_config("gpu04", cuda_runtime_version=13000, cuda_runtime_error=35))
    cr = doc["cuda_runtime"]
    assert cr["errors"] == [{"call": "cudaGetDeviceCount", "index": None, "code": 35,
                             "text": INSUFFICIENT}]
    assert cr["device_count"] is None and cr["devices"] == [] and cr["sm70"] is None
    assert cr["exit_code"] == 0  # errors are records; the program ran to the end
    v = judge_node(exp("gpu04"), doc)
    assert v.status == "failed"
    assert v.reasons == (
        f"node gpu04: CUDA cudaGetDeviceCount failed with error 35: {INSUFFICIENT} "
        "(runtime 13.0, the driver supports 12.9)",)
    assert v.output()["cuda_runtime"]["version"] == "13.0"


def test_device_count_differs_from_nvml(probe):
    """NVML lists 8 GPUs, one without a usable handle; the CUDA runtime sees 7."""
    devices = [device("gpu03", i) for i in range(8)]
    devices[5]["handle_error"] = 15
    doc = probe(node_config("gpu03", devices=devices))
    assert doc["gpu_count"] == 8 and doc["cuda_runtime"]["device_count"] == 7
    v = judge_node(exp("gpu03"), doc)
    assert v.status == "failed"
    assert "node gpu03: CUDA runtime probe sees 7 devices, NVML 8, the stack declares 8" \
        in v.reasons
    assert v.cuda_device_count == 7


def test_toolkit_that_cannot_compile(probe, fake_cuda, tmp_path):
    """A broken toolkit (its header is gone): the compiler's own message is the reason."""
    broken = tmp_path / "broken-cuda"
    shutil.copytree(fake_cuda, broken)
    (broken / "include" / "cuda_runtime_api.h").unlink()
    doc = probe(node_config("gpu06"), cuda_homes=[broken])
    cr = doc["cuda_runtime"]
    assert cr["toolkit"] == str(broken)
    assert cr["compiled"] is False and cr["ran"] is False
    assert cr["compile_exit_code"] not in (0, None)
    assert "cuda_runtime_api.h" in cr["compile_output"]
    v = judge_node(exp("gpu06"), doc)
    assert v.status == "failed" and len(v.reasons) == 1
    prefix = (f"node gpu06: the CUDA toolkit {broken} cannot compile the runtime probe "
              f"({broken}/bin/nvcc exited {cr['compile_exit_code']}): \"")
    assert v.reasons[0].startswith(prefix)
    assert "cuda_runtime_api.h" in v.reasons[0]


def test_text_on_stderr_fails_the_node(probe):
    """The seed's lesson, for CUDA too: what the runtime prints on stderr is read and judged."""
    text = "CUDA: unable to open /dev/nvidia-uvm (module nvidia_uvm not loaded)"
    doc = probe(node_config("gpu07", cuda_stderr_message=text))
    cr = doc["cuda_runtime"]
    assert cr["stderr"] == text + "\n"
    assert cr["device_count"] == 8 and cr["errors"] == []
    v = judge_node(exp("gpu07"), doc)
    assert v.reasons == (f'node gpu07: the CUDA runtime probe printed on stderr: "{text}"',)


def test_broken_fake_config_is_a_cuda_error(probe):
    """No node configuration: the fake runtime says so on stderr and returns an error."""
    doc = probe(None)
    cr = doc["cuda_runtime"]
    assert "fake-cudart (test double): cannot open" in cr["stderr"]
    assert cr["errors"][0]["code"] == 999
    assert any(r.startswith("node gpu01: CUDA cudaGetDeviceCount failed with error 999")
               for r in judge_node(exp("gpu01"), doc).reasons)


# ---- judged from documents ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def healthy_doc(fake_nvml_lib, fake_cuda, tmp_path_factory) -> dict:
    r = harness.run_probe(fake_nvml_lib, node_config("gpu01"), tmp_path_factory.mktemp("gpu01"),
                          cuda_homes=[fake_cuda])
    return r.doc


def test_counts_compared_with_nvml_and_the_stack(healthy_doc):
    doc = copy.deepcopy(healthy_doc)
    doc["cuda_runtime"].update(device_count=7, devices=doc["cuda_runtime"]["devices"][:7])
    assert judge_node(exp("gpu01"), doc).reasons == (
        "node gpu01: CUDA runtime probe sees 7 devices, NVML 8, the stack declares 8",)
    doc["gpu_count"], doc["gpus"] = 7, doc["gpus"][:7]  # NVML agrees with CUDA: not the stack
    assert judge_node(exp("gpu01"), doc).reasons == (
        "node gpu01 reports 7 GPUs, the stack declares 8",
        "node gpu01: CUDA runtime probe sees 7 devices, the stack declares 8",)


def test_nonzero_exit_quotes_stderr_once(healthy_doc):
    doc = copy.deepcopy(healthy_doc)
    text = "cuda_probe: error while loading shared libraries: libcudart.so.12"
    doc["cuda_runtime"].update(exit_code=127, stderr=text + "\n", device_count=None,
                               devices=[], runtime_version=None, driver_version=None)
    assert judge_node(exp("gpu01"), doc).reasons == (
        f'node gpu01: the CUDA runtime probe exited 127: "{text}"',)


def test_timeout_and_unexpected_stdout(healthy_doc):
    doc = copy.deepcopy(healthy_doc)
    doc["cuda_runtime"].update(ran=False, exit_code=None, device_count=None, devices=[],
                               run_error="cuda_probe did not finish within 30 s")
    assert judge_node(exp("gpu01"), doc).reasons == (
        "node gpu01: the CUDA runtime probe did not run: cuda_probe did not finish within 30 s",)
    doc = copy.deepcopy(healthy_doc)
    doc["cuda_runtime"]["stdout_other"] = ["hello from a library"]
    assert judge_node(exp("gpu01"), doc).reasons == (
        'node gpu01: the CUDA runtime probe printed unexpected text: "hello from a library"',)


def test_ran_without_a_count_fails_closed(healthy_doc):
    doc = copy.deepcopy(healthy_doc)
    doc["cuda_runtime"].update(device_count=None, devices=[], sm70=None)
    assert judge_node(exp("gpu01"), doc).reasons == (
        "node gpu01: the CUDA runtime probe reported no device count",)


# ---- the probe's pieces ------------------------------------------------------------------------
def test_parse_records():
    mod = load_probe_module()
    out = {"devices": [], "errors": [], "stdout_other": [], "device_count": None, "sm70": None}
    mod.parse_cuda_probe("runtime_version 12090\ndevice_count 2\ndevice 0 7 0\n"
                         "error cudaDeviceGetAttribute 1 101 invalid device ordinal\n"
                         "device x 7 0\nsomething else\n", out)
    assert out["runtime_version"] == 12090 and out["device_count"] == 2
    assert out["devices"] == [{"index": 0, "compute_capability": "7.0"}]
    assert out["errors"] == [{"call": "cudaDeviceGetAttribute", "index": 1, "code": 101,
                              "text": "invalid device ordinal"}]
    assert out["stdout_other"] == ["device x 7 0", "something else"]
    assert out["sm70"] is None  # one device of two is unknown


def test_cuda_homes_default(monkeypatch):
    mod = load_probe_module()
    monkeypatch.setenv("CUDA_HOME", "/opt/cuda-12.9")
    assert mod.cuda_homes(None) == ["/opt/cuda-12.9", "/usr/local/cuda"]
    monkeypatch.setenv("CUDA_HOME", "/usr/local/cuda")
    assert mod.cuda_homes(None) == ["/usr/local/cuda"]
    monkeypatch.delenv("CUDA_HOME")
    assert mod.cuda_homes(None) == ["/usr/local/cuda"]
    assert mod.cuda_homes(["/a", "/b"]) == ["/a", "/b"]


def test_timeout_kills_the_whole_process_group():
    """nvcc starts the host compiler: a timeout must not wait for a grandchild."""
    mod = load_probe_module()
    t0 = time.monotonic()
    code, _, _, error = mod._run(["sh", "-c", "sleep 30 & sleep 30"], 1)
    assert code is None and error == "sh did not finish within 1 s"
    assert time.monotonic() - t0 < 10


def test_program_is_strict_c(tmp_path):
    """The embedded program is plain C against the header's declarations (as nvcc compiles a .c)."""
    src = tmp_path / "cuda_probe.c"
    src.write_text(load_probe_module().CUDA_PROBE_C)
    p = subprocess.run(["gcc", "-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror",
                        "-fsyntax-only", "-I", str(cuda_harness.HERE), str(src)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert p.returncode == 0, p.stdout
