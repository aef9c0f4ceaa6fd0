/*
 * fake_cudart.c -- TEST DOUBLE of NVIDIA's CUDA runtime library (libcudart.so).
 *
 * Not product code. The GPU probe compiles its tiny CUDA program with the
 * toolkit it finds; in tests that toolkit is this directory's double
 * (build.sh lays out bin/nvcc, include/cuda_runtime_api.h, lib64/libcudart.so)
 * and the program links this library. It reads the same fake node
 * configuration as the fake NVML (tests/doubles/fake_nvml/fake_nvml.c):
 *
 *   FAKE_NVML_CONFIG=/path/to/node.json   (default /etc/fake-nvml.json)
 *
 *   {
 *     "cuda_runtime_version": 12090,   cudaRuntimeGetVersion (default 12090)
 *     "cuda_driver_version": 12090,    cudaDriverGetVersion (the NVML key; default 12090)
 *     "cuda_runtime_error": 35,        optional: cudaGetDeviceCount and cudaDeviceGetAttribute
 *                                      return this code (35: runtime newer than the driver)
 *     "cuda_stderr_message": "text",   optional: written to fd 2 by cudaGetDeviceCount
 *     "devices": [ {"compute_capability": [7, 0], "handle_error": 15}, ... ]
 *   }
 *
 * The device count is the devices without a "handle_error" (a GPU NVML lists
 * but cannot take a handle of is not usable by CUDA either); their compute
 * capability defaults to [7, 0], as in the fake NVML. Only the entry points
 * the probe calls exist: cudaRuntimeGetVersion, cudaDriverGetVersion,
 * cudaGetDeviceCount, cudaDeviceGetAttribute (compute capability major/minor)
 * and cudaGetErrorString.
 *
 * Build: tests/doubles/fake_cuda/build.sh OUTDIR
 */
#define _GNU_SOURCE
#include <pthread.h>

#include "cuda_runtime_api.h"
#include "../fake_nvml/fake_json.h"

#define EXPORT __attribute__((visibility("default")))

static struct {
    int loaded;  /* 1: parsed; -1: failed (load_error says why) */
    char load_error[512];
    int runtime_version, driver_version, runtime_error;
    char *stderr_message;
    int ndev;
    int (*cc)[2];
} cfg;

static pthread_once_t once = PTHREAD_ONCE_INIT;

static int int_or(const jval *v, int dflt) {
    return (v && v->t == J_NUM) ? (int)v->num : dflt;
}

static void load_config(void) {
    const char *path = getenv("FAKE_NVML_CONFIG");
    if (!path || !*path) path = "/etc/fake-nvml.json";
    cfg.runtime_version = 12090;
    jval *root = jload_object(path, cfg.load_error, sizeof cfg.load_error);
    if (!root) { cfg.loaded = -1; return; }
    cfg.runtime_version = int_or(jget(root, "cuda_runtime_version"), 12090);
    cfg.driver_version = int_or(jget(root, "cuda_driver_version"), 12090);
    cfg.runtime_error = int_or(jget(root, "cuda_runtime_error"), 0);
    const jval *msg = jget(root, "cuda_stderr_message");
    if (msg && msg->t == J_STR && msg->str[0]) cfg.stderr_message = strdup(msg->str);
    const jval *devs = jget(root, "devices");
    size_t n = (devs && devs->t == J_ARR) ? devs->n : 0;
    cfg.cc = calloc(n ? n : 1, sizeof *cfg.cc);
    if (!cfg.cc) { snprintf(cfg.load_error, sizeof cfg.load_error, "out of memory"); cfg.loaded = -1; jfree(root); return; }
    for (size_t i = 0; i < n; i++) {
        const jval *d = devs->items[i];
        if (int_or(jget(d, "handle_error"), 0)) continue;
        const jval *cc = jget(d, "compute_capability");
        int ok = cc && cc->t == J_ARR && cc->n == 2;
        cfg.cc[cfg.ndev][0] = ok ? int_or(cc->items[0], 7) : 7;
        cfg.cc[cfg.ndev][1] = ok ? int_or(cc->items[1], 0) : 0;
        cfg.ndev++;
    }
    jfree(root);
    cfg.loaded = 1;
}

/* The configuration, read once; a broken one says so on stderr, as a broken driver would. */
static int ready(void) {
    pthread_once(&once, load_config);
    return cfg.loaded == 1;
}

EXPORT cudaError_t cudaRuntimeGetVersion(int *runtimeVersion) {
    if (!runtimeVersion) return cudaErrorInvalidValue;
    ready();
    *runtimeVersion = cfg.runtime_version;  /* compiled into the real library: no driver needed */
    return cudaSuccess;
}

EXPORT cudaError_t cudaDriverGetVersion(int *driverVersion) {
    if (!driverVersion) return cudaErrorInvalidValue;
    *driverVersion = ready() ? cfg.driver_version : 0;  /* 0: no driver, as the real one says */
    return cudaSuccess;
}

EXPORT cudaError_t cudaGetDeviceCount(int *count) {
    if (!count) return cudaErrorInvalidValue;
    *count = 0;
    if (!ready()) {
        fprintf(stderr, "fake-cudart (test double): %s\n", cfg.load_error);
        return cudaErrorUnknown;
    }
    if (cfg.stderr_message) fprintf(stderr, "%s\n", cfg.stderr_message);
    if (cfg.runtime_error) return (cudaError_t)cfg.runtime_error;
    *count = cfg.ndev;
    return cudaSuccess;
}

EXPORT cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
    if (!value) return cudaErrorInvalidValue;
    if (!ready()) return cudaErrorUnknown;
    if (cfg.runtime_error) return (cudaError_t)cfg.runtime_error;
    if (device < 0 || device >= cfg.ndev) return cudaErrorInvalidDevice;
    if (attr == cudaDevAttrComputeCapabilityMajor) *value = cfg.cc[device][0];
    else if (attr == cudaDevAttrComputeCapabilityMinor) *value = cfg.cc[device][1];
    else return cudaErrorInvalidValue;
    return cudaSuccess;
}

/* The real library's texts for the codes the double can return. */
EXPORT const char *cudaGetErrorString(cudaError_t error) {
    switch ((int)error) {
    case 0: return "no error";
    case 1: return "invalid argument";
    case 3: return "initialization error";
    case 35: return "CUDA driver version is insufficient for CUDA runtime version";
    case 100: return "no CUDA-capable device is detected";
    case 101: return "invalid device ordinal";
    case 999: return "unknown error";
    default: return "unrecognized error code";
    }
}
