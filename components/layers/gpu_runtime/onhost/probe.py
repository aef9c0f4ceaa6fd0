"""GPU runtime probe: run on a node, print ONE JSON document about its GPUs.

Shipped to a node as the program text of `python3 -` (over SSH, on stdin), so
it is self-contained: the standard library and pynvml (nvidia-ml-py) only,
nothing from the `components` package. Read-only: it changes nothing on the
node. It always exits 0 with a JSON document on stdout; every failure (no
pynvml, no library, an NVML error code, text NVML printed) becomes a field,
never a traceback. `components/gpu/baseline.py` turns the document into a
verdict; docs/gpu-probe.md explains every field.

NVML may print to the process's stdout and stderr (the seed's false failure:
per-device records on stderr that a health script never read). Both file
descriptors 1 and 2 are pointed at temporary files around every NVML call, so
that text is captured with the call that produced it, reported, and cannot
corrupt the JSON on stdout.

Where a CUDA toolkit is present (`--cuda-home`, default $CUDA_HOME then
/usr/local/cuda), a tiny CUDA runtime program (CUDA_PROBE_C) is compiled with
its nvcc in a private temporary directory, run, and removed: NVML sees the
driver, this sees what a CUDA job would (runtime version, device count,
compute capability, and the errors a job would hit).

Usage: python3 - [--nvidia-version-file PATH] [--sys-module-dir DIR]
                 [--proc-modules PATH] [--cgroup-controllers PATH]
                 [--cuda-home DIR ...] < probe.py
"""

import argparse
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import traceback
import warnings

SCHEMA = "gpu-fleet/gpu-probe/1"
TEXT_LIMIT = 8192  # captured output kept per stream and per call

# ---- facts outside NVML ---------------------------------------------------------------

_NVRM = re.compile(r"Kernel Module\b.*?\s(\d+\.\d+(?:\.\d+)*)(?:\s|$)")


def parse_nvrm_version(text):
    """The module version from /proc/driver/nvidia/version text, or None.

    'NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.173.02  Tue ...'
    'NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.173.02  Release Build ...'
    """
    for line in text.splitlines():
        if line.startswith("NVRM version:"):
            m = _NVRM.search(line)
            return (m.group(1) if m else None), line.strip()
    return None, None


def read_kernel_module(version_file, sys_module_dir, proc_modules):
    out = {"loaded": False, "loaded_evidence": None, "version": None,
           "version_source": None, "version_line": None, "error": None}
    module_dir = os.path.join(sys_module_dir, "nvidia")
    if os.path.isdir(module_dir):
        out["loaded"], out["loaded_evidence"] = True, module_dir
    else:
        try:
            with open(proc_modules) as f:
                if any(line.split(" ", 1)[0] == "nvidia" for line in f):
                    out["loaded"], out["loaded_evidence"] = True, proc_modules
        except OSError as e:
            out["error"] = "cannot read %s: %s" % (proc_modules, e.strerror or e)
    try:
        with open(version_file) as f:
            version, line = parse_nvrm_version(f.read())
        out["version_source"], out["version_line"] = version_file, line
        out["version"] = version
        if version is None:
            out["error"] = "no NVRM version line in %s" % version_file
    except OSError as e:
        # /sys/module/nvidia/version holds the same version where the proc file is missing
        try:
            with open(os.path.join(module_dir, "version")) as f:
                out["version"] = f.read().strip() or None
            out["version_source"] = os.path.join(module_dir, "version")
        except OSError:
            out["error"] = "cannot read %s: %s" % (version_file, e.strerror or e)
    return out


def read_cgroup(controllers_file):
    try:
        with open(controllers_file) as f:
            return {"file": controllers_file, "v2": True, "controllers": f.read().split(),
                    "error": None}
    except OSError as e:
        return {"file": controllers_file, "v2": False, "controllers": None,
                "error": "cannot read %s: %s" % (controllers_file, e.strerror or e)}


def read_ntp():
    """(synchronized: bool or None, error text or None) from timedatectl."""
    exe = shutil.which("timedatectl")
    if exe is None:
        return None, "timedatectl not found"
    try:
        p = subprocess.run([exe, "show", "-p", "NTPSynchronized", "--value"],
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=10)
    except (OSError, subprocess.SubprocessError) as e:
        return None, "timedatectl: %s" % e
    value = p.stdout.decode(errors="replace").strip()
    if p.returncode != 0 or value not in ("yes", "no"):
        err = p.stderr.decode(errors="replace").strip() or value
        return None, "timedatectl exited %d: %s" % (p.returncode, err[:500])
    return value == "yes", None


# ---- capturing what NVML prints --------------------------------------------------------

def _flush_all():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    try:
        ctypes.CDLL(None).fflush(None)  # C stdio buffers (a library's printf)
    except Exception:
        pass


class FdCapture:
    """Point fds 1 and 2 at temporary files until `close`; `mark`/`since` slice per call."""

    def __init__(self):
        self.files, self.saved = {}, {}
        _flush_all()
        for fd in (1, 2):
            tmp = tempfile.TemporaryFile()
            try:
                self.saved[fd] = os.dup(fd)
            except OSError:
                self.saved[fd] = None  # the fd was closed: capture into the file anyway
            os.dup2(tmp.fileno(), fd)
            self.files[fd] = tmp

    def mark(self):
        _flush_all()
        return {fd: os.lseek(fd, 0, os.SEEK_CUR) for fd in self.files}

    def since(self, mark):
        now = self.mark()
        return {fd: self._read(fd, mark[fd], now[fd]) for fd in self.files}

    def _read(self, fd, start, end):
        if end <= start:
            return ""
        n = min(end - start, TEXT_LIMIT)
        text = os.pread(self.files[fd].fileno(), n, start).decode("utf-8", errors="replace")
        return text + ("\n[... %d more bytes]" % (end - start - n) if end - start > n else "")

    def close(self):
        _flush_all()
        for fd, tmp in self.files.items():
            if self.saved[fd] is not None:
                os.dup2(self.saved[fd], fd)
                os.close(self.saved[fd])
            tmp.close()


# ---- NVML ------------------------------------------------------------------------------

class Nvml:
    """Calls into pynvml, each one recorded: its errors and the text it printed."""

    def __init__(self, pynvml, capture):
        self.p, self.cap = pynvml, capture
        self.errors, self.output = [], []
        self.code_names = {getattr(pynvml, n): n for n in dir(pynvml)
                           if n.startswith("NVML_ERROR_") and isinstance(getattr(pynvml, n), int)}

    def call(self, name, *args, index=None, not_supported_ok=False):
        """(value, ok): value None when the call failed; failures are recorded."""
        mark = self.cap.mark()
        value, ok = None, False
        try:
            value, ok = getattr(self.p, name)(*args), True
        except self.p.NVMLError as e:
            code = getattr(e, "value", None)
            if not (not_supported_ok and code == self.p.NVML_ERROR_NOT_SUPPORTED):
                self.errors.append({"call": name, "index": index, "code": code,
                                    "name": self.code_names.get(code), "text": _nvml_text(e)})
        except Exception as e:  # ctypes trouble, a pynvml/NVML version mismatch, ...
            self.errors.append({"call": name, "index": index, "code": None,
                                "name": type(e).__name__, "text": str(e)[:TEXT_LIMIT]})
        finally:
            for fd, text in self.cap.since(mark).items():
                if text:
                    self.output.append({"call": name, "index": index,
                                        "stream": "stdout" if fd == 1 else "stderr",
                                        "text": text})
        return value, ok


def _nvml_text(e):
    try:
        return str(e)
    except Exception:
        return "NVML error %r" % (getattr(e, "value", None),)


def _mapped_library():
    """Where the process mapped libnvidia-ml from (proves which library was loaded)."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.rstrip("\n").split(None, 5)
                if len(parts) == 6 and os.path.basename(parts[5]).startswith("libnvidia-ml.so"):
                    return parts[5]
    except OSError:
        pass
    return None


def _pynvml_version():
    try:
        from importlib import metadata
    except ImportError:
        return None
    for dist in ("nvidia-ml-py", "pynvml"):
        try:
            return metadata.version(dist)
        except Exception:
            continue
    return None


def probe_nvml(doc):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            import pynvml
        except Exception as e:
            doc["pynvml"] = {"importable": False, "version": None,
                             "error": "%s: %s" % (type(e).__name__, e)}
            return
        finally:
            doc["python_warnings"] = ["%s: %s" % (w.category.__name__, w.message) for w in caught]
    doc["pynvml"] = {"importable": True, "version": _pynvml_version(), "error": None}

    cap = FdCapture()
    nv = Nvml(pynvml, cap)
    try:
        _, init_ok = nv.call("nvmlInit")
        if getattr(pynvml, "nvmlLib", None) is not None:  # the library loaded, init or not
            doc["nvml_version"], _ = nv.call("nvmlSystemGetNVMLVersion")
            doc["nvml_library_path"] = _mapped_library()
        if init_ok:
            try:
                _probe_initialized(nv, doc)
            finally:
                nv.call("nvmlShutdown")
    finally:
        cap.close()
        doc["nvml_errors"] = nv.errors
        doc["nvml_output"] = nv.output
        doc["nvml_stdout"] = "".join(o["text"] for o in nv.output if o["stream"] == "stdout")
        doc["nvml_stderr"] = "".join(o["text"] for o in nv.output if o["stream"] == "stderr")


def _probe_initialized(nv, doc):
    p = nv.p
    doc["driver_version"], _ = nv.call("nvmlSystemGetDriverVersion")
    cuda, ok = nv.call("nvmlSystemGetCudaDriverVersion_v2")
    if not ok and nv.errors and nv.errors[-1]["code"] == p.NVML_ERROR_FUNCTION_NOT_FOUND:
        nv.errors.pop()  # an older library: the unversioned call says the same
        cuda, _ = nv.call("nvmlSystemGetCudaDriverVersion")
    doc["cuda_driver_version"] = cuda
    count, _ = nv.call("nvmlDeviceGetCount")
    doc["gpu_count"] = count
    gpus = []
    for i in range(count or 0):
        gpu = {"index": i, "name": None, "uuid": None, "compute_capability": None,
               "minor_number": None, "memory_total": None, "ecc_uncorrected": None,
               "ecc_uncorrected_aggregate": None, "ok": False}
        gpus.append(gpu)
        handle, ok = nv.call("nvmlDeviceGetHandleByIndex", i, index=i)
        if not ok:
            continue
        n_errors = len(nv.errors)
        gpu["name"], _ = nv.call("nvmlDeviceGetName", handle, index=i)
        gpu["uuid"], _ = nv.call("nvmlDeviceGetUUID", handle, index=i)
        cc, _ = nv.call("nvmlDeviceGetCudaComputeCapability", handle, index=i)
        gpu["compute_capability"] = list(cc) if cc else None
        gpu["minor_number"], _ = nv.call("nvmlDeviceGetMinorNumber", handle, index=i)
        mem, _ = nv.call("nvmlDeviceGetMemoryInfo", handle, index=i)
        gpu["memory_total"] = int(mem.total) if mem is not None else None
        uncorrected = p.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        gpu["ecc_uncorrected"], _ = nv.call("nvmlDeviceGetTotalEccErrors", handle, uncorrected,
                                            p.NVML_VOLATILE_ECC, index=i, not_supported_ok=True)
        gpu["ecc_uncorrected_aggregate"], _ = nv.call(
            "nvmlDeviceGetTotalEccErrors", handle, uncorrected, p.NVML_AGGREGATE_ECC,
            index=i, not_supported_ok=True)
        gpu["ok"] = len(nv.errors) == n_errors
    doc["gpus"] = gpus


# ---- the CUDA runtime, where a toolkit is present -------------------------------------

CUDA_COMPILE_TIMEOUT_S = 60  # both well inside the layer's 120 s limit on the whole probe
CUDA_RUN_TIMEOUT_S = 30

#: Plain C (nvcc hands a .c file to the host compiler): one record per line, an error's
#: text last. It exits 0 when it ran to the end: CUDA errors are records, not the exit code.
CUDA_PROBE_C = r"""/* gpu-fleet GPU probe: the CUDA runtime's view of this node */
#include <stdio.h>
#include <cuda_runtime_api.h>

static void report(const char *call, int index, cudaError_t rc) {
    const char *text = cudaGetErrorString(rc);
    printf("error %s %d %d %s\n", call, index, (int)rc, text ? text : "?");
}

int main(void) {
    int value = 0, count = 0, i;
    cudaError_t rc = cudaRuntimeGetVersion(&value);
    if (rc == cudaSuccess) printf("runtime_version %d\n", value);
    else report("cudaRuntimeGetVersion", -1, rc);
    rc = cudaDriverGetVersion(&value);
    if (rc == cudaSuccess) printf("driver_version %d\n", value);
    else report("cudaDriverGetVersion", -1, rc);
    rc = cudaGetDeviceCount(&count);
    if (rc == cudaSuccess) printf("device_count %d\n", count);
    else { report("cudaGetDeviceCount", -1, rc); count = 0; }
    for (i = 0; i < count; i++) {
        int major = -1, minor = -1;
        rc = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, i);
        if (rc == cudaSuccess)
            rc = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, i);
        if (rc == cudaSuccess) printf("device %d %d %d\n", i, major, minor);
        else report("cudaDeviceGetAttribute", i, rc);
    }
    fflush(stdout);
    return 0;
}
"""


def cuda_homes(given):
    """--cuda-home values, else $CUDA_HOME then /usr/local/cuda (duplicates dropped)."""
    homes = given or [os.environ.get("CUDA_HOME") or None, "/usr/local/cuda"]
    return list(dict.fromkeys(h for h in homes if h))


def _text(data):
    """Captured bytes as text, at most TEXT_LIMIT characters kept."""
    text = (data or b"").decode("utf-8", errors="replace")
    return text if len(text) <= TEXT_LIMIT else \
        text[:TEXT_LIMIT] + "\n[... %d more characters]" % (len(text) - TEXT_LIMIT)


def _run(cmd, timeout, merge=False, **kw):
    """(exit code, stdout, stderr, error): error says why there is no exit code.

    Its own session, so a timeout kills nvcc's compiler children too."""
    try:
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT if merge else subprocess.PIPE,
                             start_new_session=True, **kw)
    except OSError as e:
        return None, "", "", "cannot run %s: %s" % (cmd[0], e.strerror or e)
    code, error = None, None
    try:
        out, err = p.communicate(timeout=timeout)
        code = p.returncode
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        out, err = p.communicate()
        error = "%s did not finish within %d s" % (cmd[0], timeout)
    return code, _text(out), _text(err), error


def parse_cuda_probe(text, out):
    """Fill `out` from CUDA_PROBE_C's records; a line that is not one goes to stdout_other."""
    for line in text.splitlines():
        f = line.split(None, 4)
        try:
            if len(f) == 2 and f[0] in ("runtime_version", "driver_version", "device_count"):
                out[f[0]] = int(f[1])
            elif len(f) == 4 and f[0] == "device":
                out["devices"].append({"index": int(f[1]),
                                       "compute_capability": "%d.%d" % (int(f[2]), int(f[3]))})
            elif len(f) >= 4 and f[0] == "error":
                index = int(f[2])
                out["errors"].append({"call": f[1], "index": None if index < 0 else index,
                                      "code": int(f[3]), "text": f[4] if len(f) > 4 else ""})
            elif line.strip():
                out["stdout_other"].append(line)
        except ValueError:
            out["stdout_other"].append(line)
    devices = out["devices"]
    if devices and len(devices) == out["device_count"]:
        out["sm70"] = all(d["compute_capability"] == "7.0" for d in devices)


def probe_cuda_runtime(homes):
    """Compile and run CUDA_PROBE_C with the first toolkit in `homes` that has bin/nvcc.

    NVML answers for the driver; only a CUDA program shows what a job will meet (a
    runtime newer than the driver, devices CUDA cannot use). Everything it writes is in
    one private temporary directory, removed afterwards; no toolkit is not an error.
    """
    out = {"homes": homes, "toolkit": None, "nvcc": None, "skipped": None,
           "compiled": False, "compile_exit_code": None, "compile_error": None,
           "compile_output": "", "ran": False, "exit_code": None, "run_error": None,
           "runtime_version": None, "driver_version": None, "device_count": None,
           "devices": [], "sm70": None, "errors": [], "stdout_other": [], "stderr": ""}
    for home in homes:
        nvcc = os.path.join(home, "bin", "nvcc")
        if os.path.isfile(nvcc) and os.access(nvcc, os.X_OK):
            out["toolkit"], out["nvcc"] = home, nvcc
            break
    else:
        out["skipped"] = "no CUDA toolkit (bin/nvcc) under %s" % ", ".join(homes)
        return out
    tmp = tempfile.mkdtemp(prefix="gpu-fleet-cuda-probe-")  # mode 0700: private
    try:
        src, exe = os.path.join(tmp, "cuda_probe.c"), os.path.join(tmp, "cuda_probe")
        with open(src, "w") as f:
            f.write(CUDA_PROBE_C)
        # nvcc's intermediate files go to TMPDIR: keep them in the private directory too
        env = dict(os.environ, TMPDIR=tmp)
        code, text, _, error = _run([out["nvcc"], "-o", exe, src], CUDA_COMPILE_TIMEOUT_S,
                                    merge=True, cwd=tmp, env=env)
        out["compile_exit_code"], out["compile_output"] = code, text.strip()
        out["compile_error"] = error
        out["compiled"] = code == 0 and os.path.isfile(exe)
        if not out["compiled"]:
            return out
        # NVML ignores CUDA_VISIBLE_DEVICES; so must this, or the counts cannot be compared
        env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
        code, stdout, stderr, error = _run([exe], CUDA_RUN_TIMEOUT_S, cwd=tmp, env=env)
        out["ran"], out["exit_code"], out["run_error"] = code is not None, code, error
        out["stderr"] = stderr
        parse_cuda_probe(stdout, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


# ---- the document ----------------------------------------------------------------------

def parse_args(argv):
    ap = argparse.ArgumentParser(prog="probe.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--nvidia-version-file", default="/proc/driver/nvidia/version")
    ap.add_argument("--sys-module-dir", default="/sys/module")
    ap.add_argument("--proc-modules", default="/proc/modules")
    ap.add_argument("--cgroup-controllers", default="/sys/fs/cgroup/cgroup.controllers")
    ap.add_argument("--cuda-home", action="append", metavar="DIR",
                    help="a CUDA toolkit to try (repeatable; default $CUDA_HOME, /usr/local/cuda)")
    return ap.parse_args(argv)


def probe(args):
    doc = {
        "schema": SCHEMA,
        "hostname": socket.gethostname(),
        "pynvml": None,
        "python_warnings": [],
        "nvml_library_path": None,
        "nvml_version": None,
        "driver_version": None,
        "cuda_driver_version": None,
        "gpu_count": None,
        "gpus": [],
        "nvml_errors": [],
        "nvml_output": [],
        "nvml_stdout": "",
        "nvml_stderr": "",
        "kernel_module": None,
        "cgroup": None,
        "ntp_synchronized": None,
        "ntp_error": None,
        "cuda_runtime": None,
        "probe_errors": [],
    }
    steps = [
        ("nvml", lambda: probe_nvml(doc)),
        ("kernel_module", lambda: doc.__setitem__("kernel_module", read_kernel_module(
            args.nvidia_version_file, args.sys_module_dir, args.proc_modules))),
        ("cgroup", lambda: doc.__setitem__("cgroup", read_cgroup(args.cgroup_controllers))),
        ("ntp", lambda: doc.update(zip(("ntp_synchronized", "ntp_error"), read_ntp()))),
        ("cuda_runtime", lambda: doc.__setitem__("cuda_runtime", probe_cuda_runtime(
            cuda_homes(args.cuda_home)))),
    ]
    for name, step in steps:
        try:
            step()
        except Exception:
            doc["probe_errors"].append({"step": name, "text": traceback.format_exc(limit=5)})
    return doc


def main(argv=None):
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as e:
        if e.code in (0, None):
            raise
        doc = {"schema": SCHEMA, "probe_errors": [
            {"step": "arguments", "text": "bad arguments: %r" % (sys.argv[1:],)}]}
    else:
        doc = probe(args)
    sys.stdout.write(json.dumps(doc, sort_keys=True) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
