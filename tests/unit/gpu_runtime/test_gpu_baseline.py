"""The GPU baseline verdict over real probe output from fake nodes (the NVML double).

Each fake node runs the product's probe script under the real pynvml with the
fake libnvidia-ml; the verdict must name the node and the exact mismatch.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from components.config.load import parse_fleet_config
from components.layers.gpu_runtime.baseline import (
    GpuExpectation, cuda_version_number, cuda_version_text, expectations, judge_fleet,
    judge_node, judge_stack, nvml_library_driver, pending_nodes,
)
from tests.doubles.fake_nvml import harness
from tests.doubles.fake_nvml.harness import DRIVER, V100, device, gpu_uuid, node_config

FLEET = ["gpu01", "gpu02", "gpu03", "gpu04", "gpu05", "gpu07"]


@pytest.fixture(scope="session")
def fake_nvml_lib(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fake-nvml-lib")
    harness.build(out)
    return out


@pytest.fixture
def cfg(fleet14_config):
    return parse_fleet_config(fleet14_config, "stacks/Pulumi.full.yaml")


@pytest.fixture(scope="session")
def run_fleet(fake_nvml_lib, tmp_path_factory):
    """run_fleet({node: config}) -> {node: the probe's stdout}, as the layer would collect it.

    A configuration is probed once per session (the healthy nodes recur in every test).
    """
    cache: dict = {}

    def run(configs: dict) -> dict:
        out = {}
        for node, config in configs.items():
            key = json.dumps(config, sort_keys=True)
            if key not in cache:
                r = harness.run_probe(fake_nvml_lib, config, tmp_path_factory.mktemp(node))
                assert r.returncode == 0 and r.stderr == "", r.stderr
                cache[key] = r.stdout
            out[node] = cache[key]
        return out
    return run


def healthy(nodes=FLEET) -> dict:
    return {n: node_config(n) for n in nodes}


def judge(cfg, probes, nodes=FLEET):
    return judge_fleet(expectations(cfg, nodes), probes)


@pytest.fixture(scope="module")
def healthy_doc(fake_nvml_lib, tmp_path_factory) -> dict:
    r = harness.run_probe(fake_nvml_lib, node_config("gpu01"), tmp_path_factory.mktemp("gpu01"))
    return json.loads(r.stdout)


# ---- the configurations -------------------------------------------------------------
def test_healthy_fleet_passes(cfg, run_fleet):
    v = judge(cfg, run_fleet(healthy()))
    assert v.ok, v.report()
    assert v.passed == FLEET and v.failed == [] and v.problems == ()
    out = v.nodes["gpu01"].output()
    assert out["verdict"] == "ok" and out["reasons"] == []
    assert out["count"] == 8
    assert out["uuids"] == [gpu_uuid("gpu01", i) for i in range(8)]
    assert out["models"] == [V100]
    assert out["driver"] == DRIVER and out["kernel_module"] == DRIVER
    assert out["cuda"] == "12.9" and out["cuda_driver_version"] == 12090
    assert out["compute_capability"] == ["7.0"]
    assert out["bf16"] is False  # SM70: no BF16, the workload layer needs to know


def test_seven_of_eight_visible(cfg, run_fleet):
    configs = healthy()
    configs["gpu03"] = node_config("gpu03", 7)
    v = judge(cfg, run_fleet(configs))
    assert v.failed == ["gpu03"]
    assert v.nodes["gpu03"].reasons == ("node gpu03 reports 7 GPUs, the stack declares 8",)
    assert v.nodes["gpu03"].gpu_count == 7
    assert not v.ok


def test_driver_kernel_module_mismatch(cfg, run_fleet):
    configs = healthy()
    configs["gpu05"] = node_config("gpu05", kernel_module_version="570.158.01")
    probes = run_fleet(configs)
    v = judge(cfg, probes)
    source = json.loads(probes["gpu05"])["kernel_module"]["version_source"]
    assert v.failed == ["gpu05"]
    assert v.nodes["gpu05"].reasons == (
        "node gpu05: driver/kernel module mismatch: user space has driver 580.173.02, "
        f"the loaded kernel module is 570.158.01 ({source})",)
    assert v.problems == ("nvidia kernel module versions differ across the fleet: "
                          "580.173.02 on gpu01, gpu02, gpu03, gpu04, gpu07; 570.158.01 on gpu05",)


def test_driver_kernel_module_mismatch_as_the_real_library_reports_it(cfg, run_fleet):
    """With a mismatch the real NVML refuses nvmlInit; the verdict still names both versions."""
    configs = healthy()
    configs["gpu05"] = node_config("gpu05", kernel_module_version="570.158.01", init_error=18)
    probes = run_fleet(configs)
    v = judge(cfg, probes)
    source = json.loads(probes["gpu05"])["kernel_module"]["version_source"]
    assert v.failed == ["gpu05"]
    assert v.nodes["gpu05"].reasons == (
        "node gpu05: NVML nvmlInit failed: NVML_ERROR_LIB_RM_VERSION_MISMATCH (18): "
        "RM has detected an NVML/RM version mismatch.",
        "node gpu05: driver/kernel module mismatch: user space has NVML library "
        f"13.580.173.02, the loaded kernel module is 570.158.01 ({source})",
    )
    assert v.nodes["gpu05"].gpu_count is None


def test_driver_drift_from_the_baseline(cfg, run_fleet):
    """The seed: one node still on the 570 branch."""
    configs = healthy()
    configs["gpu04"] = node_config("gpu04", driver="570.158.01", cuda=12080)
    v = judge(cfg, run_fleet(configs))
    assert v.failed == ["gpu04"]
    assert v.nodes["gpu04"].reasons == (
        "node gpu04 runs driver 570.158.01, the baseline is 580.173.02",
        "node gpu04 CUDA driver 12.8 (12080) cannot run the stack's CUDA runtime 12.9.1 "
        "(needs 12.9 or newer)",
    )
    assert v.problems == (
        "driver versions differ across the fleet: "
        "580.173.02 on gpu01, gpu02, gpu03, gpu05, gpu07; 570.158.01 on gpu04",
        "nvidia kernel module versions differ across the fleet: "
        "580.173.02 on gpu01, gpu02, gpu03, gpu05, gpu07; 570.158.01 on gpu04",
        "CUDA driver versions differ across the fleet: "
        "12090 on gpu01, gpu02, gpu03, gpu05, gpu07; 12080 on gpu04",
    )


def test_nvml_error_on_stderr_fails_the_node(cfg, run_fleet):
    """The seed's false failure came from never reading stderr: here it is read, and judged."""
    text = "Unable to determine the device handle for GPU0000:8A:00.0: Unknown Error"
    configs = healthy()
    configs["gpu07"] = node_config("gpu07", stderr_message=text)
    v = judge(cfg, run_fleet(configs))
    assert v.failed == ["gpu07"]
    assert v.nodes["gpu07"].reasons == (
        f'node gpu07: NVML printed on stderr during nvmlInit: "{text}"',)
    assert v.nodes["gpu07"].gpu_count == 8  # counted by field, not by parsing text


def test_duplicate_uuid_across_two_nodes(cfg, run_fleet):
    configs = healthy()
    dup = gpu_uuid("gpu01", 5)
    devices = [device("gpu02", i) for i in range(8)]
    devices[3]["uuid"] = dup
    configs["gpu02"] = node_config("gpu02", devices=devices)
    v = judge(cfg, run_fleet(configs))
    assert v.problems == (f"GPU UUID {dup} is reported by both gpu01 (GPU 5) and gpu02 (GPU 3)",)
    assert v.failed == ["gpu01", "gpu02"]  # which one is wrong cannot be told: both stay out
    assert v.nodes["gpu01"].reasons == (
        f"node gpu01 GPU 5 UUID {dup} is also reported by gpu02 (GPU 3)",)
    assert v.nodes["gpu02"].reasons == (
        f"node gpu02 GPU 3 UUID {dup} is also reported by gpu01 (GPU 5)",)


# ---- more faults through the double ------------------------------------------------------------
def test_wrong_model_and_uncorrected_ecc(cfg, run_fleet):
    devices = [device("gpu03", i) for i in range(8)]
    devices[1]["name"] = devices[2]["name"] = "Tesla V100-PCIE-32GB"
    devices[4]["ecc_uncorrected"] = 2
    v = judge(cfg, run_fleet({"gpu03": node_config("gpu03", devices=devices)}), ["gpu03"])
    assert v.nodes["gpu03"].reasons == (
        f"node gpu03 GPU 4 ({gpu_uuid('gpu03', 4)}) has 2 uncorrected ECC errors "
        "(volatile count), the baseline is 0",
        "node gpu03 GPUs 1, 2 are 'Tesla V100-PCIE-32GB', the stack declares "
        "'Tesla V100-SXM2-16GB'",
    )


def test_lost_gpu(cfg, run_fleet):
    devices = [device("gpu02", i) for i in range(8)]
    devices[6]["handle_error"] = 15
    v = judge(cfg, run_fleet({"gpu02": node_config("gpu02", devices=devices)}), ["gpu02"])
    assert v.nodes["gpu02"].reasons == (
        "node gpu02 GPU 6: NVML nvmlDeviceGetHandleByIndex failed: "
        "NVML_ERROR_GPU_IS_LOST (15): GPU is lost",)
    assert len(v.nodes["gpu02"].uuids) == 7


def test_full_stack_healthy_and_unreachable_node_pending(cfg, run_fleet):
    names = [n.name for n in cfg.nodes if n.owner != "unreachable"]
    probes = run_fleet(healthy(names))
    probes["gpu15"] = probes["gpu01"]  # stale text for the unreachable node is never used
    v = judge_stack(cfg, probes)
    assert v.ok, v.report()
    assert v.passed == names and len(names) == 14
    assert v.pending == ["gpu15"]
    assert v.nodes["gpu15"].reasons == (
        "node gpu15 is unreachable and stays pending: it is not probed and never joins "
        "Slurm from stale inventory",)
    assert sum(v.nodes[n].gpu_count for n in v.passed) == 112


# ---- judged from documents -------------------------------------------------------------------
EXP = GpuExpectation(node="gpu01", gpu_count=8, gpu_model=V100, driver_version=DRIVER,
                     cuda_runtime="12.9.1")


@pytest.mark.parametrize("doc, reason", [
    (None, "node gpu01: no probe output (the probe did not run or printed nothing)"),
    ("", "node gpu01: no probe output (the probe printed nothing)"),
    ("Traceback (most recent call last):", "node gpu01: the probe output is not one JSON document"),
    ("[1]", "node gpu01: the probe output is a list, not a JSON object"),
    ('{"schema": "other"}', "node gpu01: the probe output has schema 'other'"),
])
def test_missing_or_unreadable_probe_fails_closed(doc, reason):
    v = judge_node(EXP, doc)
    assert v.status == "failed" and len(v.reasons) == 1
    assert v.reasons[0].startswith(reason)


def test_newer_cuda_driver_is_fine_older_is_not(healthy_doc):
    doc = copy.deepcopy(healthy_doc)
    doc["cuda_driver_version"] = 13000  # a 580 driver really reports CUDA 13.0
    assert judge_node(EXP, doc).ok
    doc["cuda_driver_version"] = 12020
    assert judge_node(EXP, doc).reasons == (
        "node gpu01 CUDA driver 12.2 (12020) cannot run the stack's CUDA runtime 12.9.1 "
        "(needs 12.9 or newer)",)


def test_count_comes_from_the_count_field_and_the_records(healthy_doc):
    doc = copy.deepcopy(healthy_doc)
    del doc["gpus"][7]
    assert judge_node(EXP, doc).reasons == (
        "node gpu01: NVML counts 8 GPUs but the probe listed 7",)


def test_no_pynvml_on_the_node(healthy_doc):
    doc = copy.deepcopy(healthy_doc)
    doc.update(pynvml={"importable": False, "version": None,
                       "error": "ModuleNotFoundError: No module named 'pynvml'"},
               driver_version=None, nvml_version=None, cuda_driver_version=None,
               gpu_count=None, gpus=[])
    assert judge_node(EXP, doc).reasons == (
        "node gpu01: pynvml is not importable (ModuleNotFoundError: No module named 'pynvml'); "
        "install nvidia-ml-py on the node",)


def test_kernel_module_not_loaded(healthy_doc):
    doc = copy.deepcopy(healthy_doc)
    doc["kernel_module"].update(loaded=False, version=None,
                                error="cannot read /proc/driver/nvidia/version: No such file")
    assert judge_node(EXP, doc).reasons == (
        "node gpu01: the nvidia kernel module is not loaded "
        "(cannot read /proc/driver/nvidia/version: No such file)",
        "node gpu01: cannot tell the loaded nvidia kernel module version "
        "(cannot read /proc/driver/nvidia/version: No such file)",
    )


def test_probe_error_fails_the_node(healthy_doc):
    doc = copy.deepcopy(healthy_doc)
    doc["probe_errors"] = [{"step": "cgroup", "text": "Traceback ...\nOSError: boom\n"}]
    assert judge_node(EXP, doc).reasons == (
        "node gpu01: the probe failed at step cgroup: OSError: boom",)


def test_cgroup_and_ntp_are_gated_only_when_asked(healthy_doc):
    doc = copy.deepcopy(healthy_doc)
    doc["cgroup"]["controllers"] = ["cpuset", "cpu", "memory"]
    doc["ntp_synchronized"] = False
    assert judge_node(EXP, doc).ok
    strict = GpuExpectation(**{**EXP.__dict__, "require_ntp": True,
                               "required_cgroup_controllers": ("cpuset", "cpu", "memory",
                                                               "io", "pids")})
    assert judge_node(strict, doc).reasons == (
        "node gpu01 lacks cgroup v2 controllers io pids (has: cpuset cpu memory)",
        "node gpu01: the clock is not NTP-synchronized",
    )
    doc["cgroup"] = {"file": "/sys/fs/cgroup/cgroup.controllers", "v2": False,
                     "controllers": None, "error": "cannot read it"}
    assert judge_node(strict, doc).reasons[0] == (
        "node gpu01 has no cgroup v2 controllers to check (cannot read it); "
        "needs cpuset cpu memory io pids")


def test_bf16_from_compute_capability(healthy_doc):
    doc = copy.deepcopy(healthy_doc)
    for g in doc["gpus"]:
        g["compute_capability"] = [8, 0]
    assert judge_node(EXP, doc).bf16 is True
    doc["gpus"][0]["compute_capability"] = None
    assert judge_node(EXP, doc).bf16 is None


def test_report_lists_every_reason(cfg, healthy_doc):
    doc = copy.deepcopy(healthy_doc)
    doc["gpu_count"], doc["gpus"] = 7, doc["gpus"][:7]
    v = judge_fleet(expectations(cfg, ["gpu01"]), {"gpu01": doc})
    assert v.report() == ("GPU baseline: 0 ok, 1 failed, 0 pending\n"
                          "  gpu01 [failed]: node gpu01 reports 7 GPUs, the stack declares 8")


# ---- expectations and version helpers ----------------------------------------------------------
def test_expectations_from_the_stack(cfg):
    exp = expectations(cfg)
    assert list(exp) == [f"gpu{i:02d}" for i in range(1, 15)]
    assert exp["gpu03"] == GpuExpectation(node="gpu03", gpu_count=8, gpu_model=V100,
                                          driver_version="580.173.02", cuda_runtime="12.9.1")
    assert pending_nodes(cfg) == ["gpu15"]
    assert list(expectations(cfg, ["gpu02", "gpu15"])) == ["gpu02"]


def test_version_helpers():
    assert cuda_version_number("12.9.1") == 12090
    assert cuda_version_number("13.0") == 13000
    assert cuda_version_text(12090) == "12.9"
    assert nvml_library_driver("13.580.173.02") == "580.173.02"
    assert nvml_library_driver("580") is None and nvml_library_driver(None) is None
    with pytest.raises(ValueError):
        cuda_version_number("twelve")


# ---- a refresh that finds the layer's own prerequisite missing -------------------------------

def _no_pynvml(doc: dict) -> str:
    doc = copy.deepcopy(doc)
    doc.update(pynvml={"importable": False, "version": None,
                       "error": "ModuleNotFoundError: No module named 'pynvml'"},
               driver_version=None, nvml_version=None, cuda_driver_version=None, gpu_count=None, gpus=[])
    return json.dumps(doc)


def _props() -> dict:
    return {"nodes": [{"name": n, "gpu_count": 8, "gpu_model": "Tesla V100-SXM2-16GB"} for n in ("gpu01", "gpu02")],
            "driver_version": DRIVER, "cuda_runtime": "12.9.1", "pending": [], "pynvml_dir": "/opt/gpu-fleet/lib"}


def test_refresh_without_pynvml_is_not_known_yet_and_the_next_up_probes_again(healthy_doc):
    """A node re-imaged under the same name: refresh finds no pynvml. That is `unknown`, never
    `failed`, and diff makes the next `up` probe again (after the layer put pynvml back)."""
    from components.layers.gpu_runtime.component import (
        UNKNOWN, GpuBaselineProvider, ProbeRun, baseline_outputs, fleet_verdict, not_known_yet,
    )

    props = _props()
    ok = json.dumps({**healthy_doc, "hostname": "gpu02"})
    runs = {"gpu01": ProbeRun("gpu01", document=_no_pynvml(healthy_doc)), "gpu02": ProbeRun("gpu02", document=ok)}
    applied = fleet_verdict(props, runs)           # create/update: the layer's files are there
    assert applied.nodes["gpu01"].status == "failed"
    refreshed = not_known_yet(props, runs, applied)  # read (refresh)
    assert refreshed.nodes["gpu01"].status == UNKNOWN
    assert "not known yet" in refreshed.nodes["gpu01"].reasons[0]
    outs = baseline_outputs(refreshed)
    assert "gpu01" not in outs["healthy_nodes"] and outs["unknown_nodes"] == ["gpu01"]
    assert "gpu01" not in outs["failed_nodes"]
    inputs = {k: props.get(k) for k in ("nodes", "pending", "driver_version", "cuda_runtime")}
    diff = GpuBaselineProvider().diff("gpu-baseline", {**inputs, **outs}, inputs)
    assert diff.changes is True
    # with every verdict known and inputs unchanged, no probe runs
    settled = baseline_outputs(applied)
    assert GpuBaselineProvider().diff("gpu-baseline", {**inputs, **settled}, inputs).changes is False
