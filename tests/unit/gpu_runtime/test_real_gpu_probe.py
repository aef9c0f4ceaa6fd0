"""The verdict over a probe document captured on a real GPU machine (one NVIDIA H200, open
kernel module 580.159.04, CUDA 13.0 toolkit; docs/gpu-probe.md, "Seen on a real GPU").

The fake NVML is written from NVML's documentation; this document is what the real library
answered, so the judge is held to real field shapes (the open module's NVRM line, a real UUID,
NVML's encoding of CUDA 13.0, a real CUDA runtime program's records).
"""

from __future__ import annotations

import json
from pathlib import Path

from components.layers.gpu_runtime.baseline import judge_node
from components.layers.gpu_runtime.verdicts import GpuExpectation

DOC = (Path(__file__).parent / "data" / "h200-probe.json").read_text()
UUID = "GPU-cd47a9f2-bac6-72c6-3297-c7fdc02adad8"


def expect(**kw) -> GpuExpectation:
    base = dict(node="vm", gpu_count=1, gpu_model="NVIDIA H200", driver_version="580.159.04",
                cuda_runtime="13.0")
    base.update(kw)
    return GpuExpectation(**base)  # type: ignore[arg-type]


def test_the_real_document_is_what_the_probe_promises():
    doc = json.loads(DOC)
    assert doc["schema"] == "gpu-fleet/gpu-probe/1"
    assert doc["nvml_errors"] == [] and doc["probe_errors"] == [] and doc["nvml_output"] == []
    assert doc["kernel_module"]["version_line"].startswith("NVRM version: NVIDIA UNIX Open Kernel Module")
    assert doc["cuda_runtime"]["ran"] and doc["cuda_runtime"]["errors"] == []


def test_a_matching_stack_passes_the_real_h200():
    v = judge_node(expect(), DOC)
    assert v.status == "ok", v.reasons
    out = v.output()
    assert out["uuids"] == [UUID]
    assert out["kernel_module"] == out["driver"] == "580.159.04"
    assert out["cuda"] == "13.0" and out["cuda_driver_version"] == 13000
    assert out["compute_capability"] == ["9.0"] and out["bf16"] is True
    assert out["cuda_runtime"] == {"toolkit": "/usr/local/cuda", "version": "13.0",
                                   "device_count": 1, "sm70": False}


def test_the_seed_s_v100_stack_refuses_the_real_h200_naming_each_difference():
    v = judge_node(expect(gpu_count=8, gpu_model="Tesla V100-SXM2-16GB",
                          driver_version="580.173.02", cuda_runtime="12.9.1"), DOC)
    assert v.status == "failed"
    assert "node vm reports 1 GPU, the stack declares 8" in v.reasons
    assert "node vm GPU 0 is 'NVIDIA H200', the stack declares 'Tesla V100-SXM2-16GB'" in v.reasons
    assert "node vm runs driver 580.159.04, the baseline is 580.173.02" in v.reasons
    assert "node vm: CUDA runtime probe sees 1 device, the stack declares 8" in v.reasons


def test_a_runtime_newer_than_the_real_driver_is_refused():
    v = judge_node(expect(cuda_runtime="13.1"), DOC)
    assert v.status == "failed"
    assert any("CUDA driver 13.0 (13000) cannot run the stack's CUDA runtime 13.1" in r
               for r in v.reasons), v.reasons


def test_the_seed_s_production_gate_sees_cgroup_v2_but_no_ntp_answer():
    v = judge_node(expect(required_cgroup_controllers=("cpuset", "cpu", "memory", "io", "pids"),
                          require_ntp=True), DOC)
    assert v.reasons == ("node vm: the clock is of unknown NTP state (timedatectl not found)",)
