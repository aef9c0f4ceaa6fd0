"""The GPU probe script, run as a node runs it (`python -`), against the fake NVML double.

The real pynvml (nvidia-ml-py) loads `tests/doubles/fake_nvml` built by gcc
into a temporary directory; every configuration is one fake node.
"""

from __future__ import annotations

import ast
import ctypes.util
import sys
from pathlib import Path

import pytest

from tests.doubles.fake_nvml import harness
from tests.doubles.fake_nvml.fakenode import nvrm_line
from tests.doubles.fake_nvml.harness import DRIVER, V100, device, gpu_uuid, node_config


@pytest.fixture(scope="session")
def fake_nvml_lib(tmp_path_factory) -> Path:
    """The fake libnvidia-ml.so.1, compiled once per test session; returns its directory."""
    out = tmp_path_factory.mktemp("fake-nvml-lib")
    lib = harness.build(out)
    assert lib.is_file()
    return out


@pytest.fixture
def probe(fake_nvml_lib, tmp_path):
    """probe(config, **kw) -> the probe's JSON document, after checking it ran cleanly."""
    def run(config, **kw):
        r = harness.run_probe(fake_nvml_lib, config, tmp_path / "node", **kw)
        harness.clean_doc(r)
        return r.doc
    return run


load_probe_module = harness.load_probe_module


# ---- healthy ----------------------------------------------------------------------------
def test_healthy_8_v100(probe, fake_nvml_lib):
    doc = probe(node_config("gpu01"))
    assert doc["schema"] == "gpu-fleet/gpu-probe/1"
    # pynvml really mapped the double, not some other libnvidia-ml
    assert Path(doc["nvml_library_path"]).resolve() == (fake_nvml_lib / "libnvidia-ml.so.1").resolve()
    assert doc["pynvml"]["importable"] is True
    assert doc["driver_version"] == DRIVER
    assert doc["nvml_version"] == "13.580.173.02"
    assert doc["cuda_driver_version"] == 12090
    assert doc["gpu_count"] == 8
    assert [g["index"] for g in doc["gpus"]] == list(range(8))
    assert {g["name"] for g in doc["gpus"]} == {V100}
    assert [g["uuid"] for g in doc["gpus"]] == [gpu_uuid("gpu01", i) for i in range(8)]
    assert all(g["compute_capability"] == [7, 0] for g in doc["gpus"])
    assert all(g["ecc_uncorrected"] == 0 and g["ok"] for g in doc["gpus"])
    assert [g["minor_number"] for g in doc["gpus"]] == list(range(8))
    assert doc["gpus"][0]["memory_total"] == 17179869184
    assert doc["nvml_errors"] == [] and doc["nvml_output"] == []
    assert doc["nvml_stderr"] == "" and doc["nvml_stdout"] == ""
    assert doc["kernel_module"]["loaded"] is True
    assert doc["kernel_module"]["version"] == DRIVER
    assert doc["kernel_module"]["version_line"].startswith("NVRM version:")
    assert doc["cgroup"]["v2"] is True
    assert {"cpuset", "cpu", "memory", "io", "pids"} <= set(doc["cgroup"]["controllers"])
    assert doc["ntp_synchronized"] is True and doc["ntp_error"] is None
    assert doc["probe_errors"] == []


def test_values_come_from_the_fake_config(probe):
    """A driver string only this config contains proves pynvml read the double."""
    doc = probe(node_config("gpu01", 2, driver="123.45.67", cuda=11040,
                            devices=[device("gpu01", 0, name="Fake A100 double",
                                            compute_capability=[8, 0],
                                            memory_total=42949672960)]))
    assert doc["driver_version"] == "123.45.67"
    assert doc["nvml_version"] == "13.123.45.67"
    assert doc["cuda_driver_version"] == 11040
    assert doc["gpu_count"] == 1
    assert doc["gpus"][0]["name"] == "Fake A100 double"
    assert doc["gpus"][0]["compute_capability"] == [8, 0]
    assert doc["gpus"][0]["memory_total"] == 42949672960


# ---- the fault configurations -----------------------------------------------------
def test_seven_of_eight_visible(probe):
    doc = probe(node_config("gpu03", 7))
    assert doc["gpu_count"] == 7
    assert len(doc["gpus"]) == 7
    assert doc["nvml_errors"] == []


def test_driver_kernel_module_mismatch(probe):
    doc = probe(node_config("gpu05", kernel_module_version="570.158.01"))
    assert doc["driver_version"] == DRIVER
    assert doc["kernel_module"]["version"] == "570.158.01"


def test_driver_kernel_module_mismatch_fails_nvml_init(probe):
    """The real library refuses to start on a mismatch (NVML_ERROR_LIB_RM_VERSION_MISMATCH):
    a field, not a traceback, and the library's own version is still reported."""
    doc = probe(node_config("gpu05", kernel_module_version="570.158.01", init_error=18))
    assert doc["nvml_errors"] == [{
        "call": "nvmlInit", "index": None, "code": 18,
        "name": "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
        "text": "RM has detected an NVML/RM version mismatch."}]
    assert doc["nvml_version"] == "13.580.173.02"
    assert doc["driver_version"] is None and doc["gpu_count"] is None and doc["gpus"] == []
    assert doc["kernel_module"]["version"] == "570.158.01"


def test_nvml_error_on_stderr_is_captured(probe):
    text = ("Unable to determine the device handle for GPU0000:8A:00.0: GPU is lost.  "
            "Reboot the system to recover this GPU")
    doc = probe(node_config("gpu07", stderr_message=text))
    assert doc["nvml_stderr"] == text + "\n"
    assert doc["nvml_output"] == [
        {"call": "nvmlInit", "index": None, "stream": "stderr", "text": text + "\n"}]
    assert doc["gpu_count"] == 8  # the devices still enumerate: the text is the only signal


def test_per_device_stderr_records_are_attributed(probe):
    devices = [device("gpu07", i) for i in range(8)]
    devices[3]["stderr_message"] = "GPU 00000000:3B:00.0: Detected Critical Xid Error"
    doc = probe(node_config("gpu07", devices=devices))
    assert doc["nvml_output"] == [{"call": "nvmlDeviceGetHandleByIndex", "index": 3,
                                   "stream": "stderr",
                                   "text": "GPU 00000000:3B:00.0: Detected Critical Xid Error\n"}]


def test_nvml_stdout_text_cannot_corrupt_the_document(probe):
    """What the library prints on fd 1 goes into the capture, never onto the JSON line."""
    doc = probe(node_config("gpu01", stdout_message="NVML says hello on stdout"))
    assert doc["nvml_stdout"] == "NVML says hello on stdout\n"
    assert doc["gpu_count"] == 8


def test_lost_gpu_is_a_device_error(probe):
    devices = [device("gpu02", i) for i in range(8)]
    devices[6]["handle_error"] = 15
    doc = probe(node_config("gpu02", devices=devices))
    assert doc["gpu_count"] == 8
    assert doc["gpus"][6]["ok"] is False and doc["gpus"][6]["uuid"] is None
    assert doc["nvml_errors"] == [{"call": "nvmlDeviceGetHandleByIndex", "index": 6,
                                   "code": 15, "name": "NVML_ERROR_GPU_IS_LOST",
                                   "text": "GPU is lost"}]


def test_ecc_counts_and_unsupported_ecc(probe):
    devices = [device("gpu02", 0, ecc_uncorrected=3, ecc_uncorrected_aggregate=5),
               device("gpu02", 1, ecc_supported=False)]
    doc = probe(node_config("gpu02", devices=devices))
    assert (doc["gpus"][0]["ecc_uncorrected"], doc["gpus"][0]["ecc_uncorrected_aggregate"]) == (3, 5)
    assert doc["gpus"][1]["ecc_uncorrected"] is None
    assert doc["nvml_errors"] == []  # NOT_SUPPORTED is an answer, not an error


# ---- the rest of the node -----------------------------------------------------------------
def test_module_not_loaded_no_cgroup_v2_ntp_unknown(probe):
    doc = probe(node_config("gpu09", kernel_module_loaded=False, kernel_module_version=None,
                            cgroup_controllers=None, ntp_synchronized=None))
    km = doc["kernel_module"]
    assert km["loaded"] is False and km["version"] is None
    assert "cannot read" in km["error"]
    assert doc["cgroup"]["v2"] is False and doc["cgroup"]["controllers"] is None
    assert doc["ntp_synchronized"] is None
    assert "System has not been booted with systemd" in doc["ntp_error"]


def test_ntp_not_synchronized(probe):
    assert probe(node_config("gpu09", ntp_synchronized=False))["ntp_synchronized"] is False


def test_open_kernel_module_line(probe):
    doc = probe(node_config("gpu09", kernel_module_flavor="open"))
    assert doc["kernel_module"]["version"] == DRIVER
    assert "Open Kernel Module" in doc["kernel_module"]["version_line"]


# ---- failures of the probe's own environment ------------------------------------------------
def test_broken_double_config_is_reported_not_raised(probe, fake_nvml_lib):
    doc = probe(None)  # FAKE_NVML_CONFIG names a missing file
    assert doc["nvml_errors"][0]["call"] == "nvmlInit"
    assert doc["nvml_errors"][0]["code"] == 999
    assert "fake-nvml (test double): cannot open" in doc["nvml_stderr"]


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None,
                    reason="a real libnvidia-ml is installed here")
def test_no_nvml_library(fake_nvml_lib, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    r = harness.run_probe(empty, harness.node_config("gpu01"), tmp_path / "node")
    assert r.returncode == 0 and r.stderr == ""
    doc = r.doc
    assert [(e["call"], e["name"]) for e in doc["nvml_errors"]] == [
        ("nvmlInit", "NVML_ERROR_LIBRARY_NOT_FOUND")]
    assert doc["nvml_library_path"] is None and doc["gpu_count"] is None


def test_no_pynvml(fake_nvml_lib, tmp_path):
    """`python -S` has no site-packages: what a node without nvidia-ml-py looks like."""
    r = harness.run_probe(fake_nvml_lib, node_config("gpu01"), tmp_path / "node",
                          python=(sys.executable, "-S"))
    assert r.returncode == 0 and r.stderr == ""
    doc = r.doc
    assert doc["pynvml"]["importable"] is False
    assert "No module named 'pynvml'" in doc["pynvml"]["error"]
    assert doc["kernel_module"]["version"] == DRIVER  # the rest is still probed


def test_bad_arguments_still_print_json(fake_nvml_lib, tmp_path):
    r = harness.run_probe(fake_nvml_lib, node_config("gpu01"), tmp_path / "node",
                          extra_args=["--no-such-flag"])
    assert r.returncode == 0
    assert r.doc["probe_errors"][0]["step"] == "arguments"


# ---- the script itself -----------------------------------------------------------------------
def test_probe_is_self_contained():
    """Shipped alone as `python3 -`: the standard library and pynvml only."""
    tree = ast.parse(harness.PROBE.read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative import in the probe"
            imported.add(node.module.split(".")[0])
    assert imported - set(sys.stdlib_module_names) == {"pynvml"}


@pytest.mark.parametrize("line, version", [
    (nvrm_line("580.173.02"), "580.173.02"),
    (nvrm_line("580.173.02", "open"), "580.173.02"),
    ("NVRM version: NVIDIA UNIX aarch64 Kernel Module  570.158.01  Wed May 14 2025", "570.158.01"),
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  390.144  Thu Jun 17 2021", "390.144"),
    ("NVRM version: something else entirely", None),
])
def test_parse_nvrm_version(line, version):
    mod = load_probe_module()
    assert mod.parse_nvrm_version(line + "\nGCC version: gcc 12\n") == (version, line)
    assert mod.parse_nvrm_version("no such line\n") == (None, None)

