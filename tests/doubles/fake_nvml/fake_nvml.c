/*
 * fake_nvml.c -- TEST DOUBLE of NVIDIA's libnvidia-ml.so.1 (NVML).
 *
 * This is not product code. It stands in for the one piece of hardware the
 * test machines lack: the real pynvml (nvidia-ml-py) loads it with
 * ctypes.CDLL("libnvidia-ml.so.1") when its directory comes first in
 * LD_LIBRARY_PATH, and it presents the devices of a JSON configuration:
 *
 *   FAKE_NVML_CONFIG=/path/to/node.json   (default /etc/fake-nvml.json)
 *
 *   {
 *     "driver_version": "580.173.02",          nvmlSystemGetDriverVersion
 *     "nvml_version": "13.580.173.02",         nvmlSystemGetNVMLVersion
 *     "cuda_driver_version": 12090,            nvmlSystemGetCudaDriverVersion(_v2)
 *     "init_error": 18,                        optional: nvmlInit* returns this code
 *     "stderr_message": "text",                optional: written to fd 2 by every nvmlInit*
 *     "stdout_message": "text",                optional: written to stdout (C stdio) by nvmlInit*
 *     "devices": [ {
 *         "name": "Tesla V100-SXM2-16GB",      nvmlDeviceGetName
 *         "uuid": "GPU-...",                   nvmlDeviceGetUUID
 *         "compute_capability": [7, 0],        nvmlDeviceGetCudaComputeCapability
 *         "ecc_uncorrected": 0,                nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)
 *         "ecc_uncorrected_aggregate": 0,      ... (UNCORRECTED, AGGREGATE); default ecc_uncorrected
 *         "ecc_corrected": 0,                  ... (CORRECTED, any counter)
 *         "ecc_supported": true,               false: the ECC call returns NOT_SUPPORTED
 *         "memory_total": 17179869184,         nvmlDeviceGetMemoryInfo (bytes)
 *         "memory_used": 0,
 *         "minor_number": 0,                   nvmlDeviceGetMinorNumber; default: the index
 *         "handle_error": 15,                  optional: nvmlDeviceGetHandleByIndex returns this
 *         "stderr_message": "text",            optional: written to fd 2 when the handle is taken
 *         "temperature": 40,                   nvmlDeviceGetTemperature (C), read from the file
 *                                              at every call: a live sensor the tests heat
 *         "temperature_error": 15,             optional: nvmlDeviceGetTemperature returns this
 *         "processes": [ {"pid": 4242, "used_memory": 8589934592} ]
 *                                              nvmlDeviceGetComputeRunningProcesses_v3, read
 *                                              from the file at every call too
 *     } ]
 *   }
 *
 * Other keys (kernel_module_version, ntp_synchronized, ...) are ignored here;
 * fakenode.py reads them to lay out the files a node would have. Only the
 * entry points pynvml resolves for the probe exist; pynvml looks symbols up
 * lazily, so any other call fails with NVML_ERROR_FUNCTION_NOT_FOUND.
 *
 * The JSON reader is fake_json.h (shared with the fake CUDA runtime, which
 * reads the same node configuration: tests/doubles/fake_cuda/).
 *
 * Build: tests/doubles/fake_nvml/build.sh OUTDIR
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_UNKNOWN = 999,
};
enum { NVML_MEMORY_ERROR_TYPE_CORRECTED = 0, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1 };
enum { NVML_VOLATILE_ECC = 0, NVML_AGGREGATE_ECC = 1 };

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {  /* nvmlProcessInfo_v2_t / _v3_t (the same layout) */
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

#include "fake_json.h"

/* ---- the fake's state ---------------------------------------------------- */

typedef struct fake_device {
    unsigned index;
    char name[96];
    char uuid[96];
    int cc_major, cc_minor;
    unsigned long long ecc_uncorrected, ecc_uncorrected_aggregate, ecc_corrected;
    int ecc_supported;
    unsigned long long memory_total, memory_used;
    unsigned minor_number;
    int handle_error;
    char *stderr_message;
} fake_device;

typedef fake_device *nvmlDevice_t;

static struct {
    int loaded;       /* 1: parsed; -1: failed (load_error says why) */
    char load_error[512];
    char driver_version[80];
    char nvml_version[80];
    int cuda_driver_version;
    int init_error;
    char *stderr_message;
    char *stdout_message;
    unsigned ndev;
    fake_device *dev;
} cfg;

static int init_refcount;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void copy_str(char *dst, size_t cap, const jval *v, const char *dflt) {
    const char *s = (v && v->t == J_STR) ? v->str : dflt;
    snprintf(dst, cap, "%s", s);
}

static char *dup_str(const jval *v) {
    return (v && v->t == J_STR && v->str[0]) ? strdup(v->str) : NULL;
}

static double num_or(const jval *v, double dflt) {
    return (v && v->t == J_NUM) ? v->num : dflt;
}

static void load_failed(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cfg.load_error, sizeof cfg.load_error, fmt, ap);
    va_end(ap);
    cfg.loaded = -1;
}

static const char *config_path(void) {
    const char *path = getenv("FAKE_NVML_CONFIG");
    return (path && *path) ? path : "/etc/fake-nvml.json";
}

/* Read the configuration once per process; call with `lock` held. */
static void load_config(void) {
    if (cfg.loaded) return;
    const char *path = config_path();
    jval *root = jload_object(path, cfg.load_error, sizeof cfg.load_error);
    if (!root) { cfg.loaded = -1; return; }

    copy_str(cfg.driver_version, sizeof cfg.driver_version, jget(root, "driver_version"), "580.173.02");
    copy_str(cfg.nvml_version, sizeof cfg.nvml_version, jget(root, "nvml_version"), "13.580.173.02");
    cfg.cuda_driver_version = (int)num_or(jget(root, "cuda_driver_version"), 12090);
    cfg.init_error = (int)num_or(jget(root, "init_error"), 0);
    cfg.stderr_message = dup_str(jget(root, "stderr_message"));
    cfg.stdout_message = dup_str(jget(root, "stdout_message"));

    const jval *devs = jget(root, "devices");
    if (devs && devs->t != J_ARR) {
        load_failed("%s: \"devices\" must be a list", path);
        jfree(root);
        return;
    }
    cfg.ndev = devs ? (unsigned)devs->n : 0;
    cfg.dev = calloc(cfg.ndev ? cfg.ndev : 1, sizeof *cfg.dev);
    if (!cfg.dev) { load_failed("out of memory"); jfree(root); return; }
    for (unsigned i = 0; i < cfg.ndev; i++) {
        const jval *d = devs->items[i];
        fake_device *fd = &cfg.dev[i];
        if (d->t != J_OBJ) { load_failed("%s: devices[%u] must be an object", path, i); jfree(root); return; }
        fd->index = i;
        copy_str(fd->name, sizeof fd->name, jget(d, "name"), "Tesla V100-SXM2-16GB");
        char dflt_uuid[64];
        snprintf(dflt_uuid, sizeof dflt_uuid, "GPU-fa4e0000-0000-4000-8000-%012u", i);
        copy_str(fd->uuid, sizeof fd->uuid, jget(d, "uuid"), dflt_uuid);
        const jval *cc = jget(d, "compute_capability");
        fd->cc_major = 7;
        fd->cc_minor = 0;
        if (cc && cc->t == J_ARR && cc->n == 2) {
            fd->cc_major = (int)num_or(cc->items[0], 7);
            fd->cc_minor = (int)num_or(cc->items[1], 0);
        }
        fd->ecc_uncorrected = (unsigned long long)num_or(jget(d, "ecc_uncorrected"), 0);
        fd->ecc_uncorrected_aggregate =
            (unsigned long long)num_or(jget(d, "ecc_uncorrected_aggregate"), (double)fd->ecc_uncorrected);
        fd->ecc_corrected = (unsigned long long)num_or(jget(d, "ecc_corrected"), 0);
        const jval *sup = jget(d, "ecc_supported");
        fd->ecc_supported = !(sup && sup->t == J_BOOL && !sup->b);
        fd->memory_total = (unsigned long long)num_or(jget(d, "memory_total"), 17179869184.0);
        fd->memory_used = (unsigned long long)num_or(jget(d, "memory_used"), 0);
        fd->minor_number = (unsigned)num_or(jget(d, "minor_number"), i);
        fd->handle_error = (int)num_or(jget(d, "handle_error"), 0);
        fd->stderr_message = dup_str(jget(d, "stderr_message"));
    }
    jfree(root);
    cfg.loaded = 1;
}

static nvmlReturn_t put_str(char *dst, unsigned int cap, const char *src) {
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > cap) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

static int initialized(void) {
    pthread_mutex_lock(&lock);
    int ok = init_refcount > 0 && cfg.loaded == 1;
    pthread_mutex_unlock(&lock);
    return ok;
}

static int valid(nvmlDevice_t d) {
    return d && cfg.dev && d >= cfg.dev && d < cfg.dev + cfg.ndev;
}

/* ---- NVML entry points --------------------------------------------------- */

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    pthread_mutex_lock(&lock);
    load_config();
    if (cfg.loaded != 1) {
        fprintf(stderr, "fake-nvml (test double): %s\n", cfg.load_error);
        pthread_mutex_unlock(&lock);
        return NVML_ERROR_UNKNOWN;
    }
    if (cfg.stdout_message) fprintf(stdout, "%s\n", cfg.stdout_message);
    if (cfg.stderr_message) fprintf(stderr, "%s\n", cfg.stderr_message);
    nvmlReturn_t rc = cfg.init_error;
    if (rc == NVML_SUCCESS) init_refcount++;
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

EXPORT nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&lock);
    nvmlReturn_t rc = NVML_SUCCESS;
    if (init_refcount > 0) init_refcount--;
    else rc = NVML_ERROR_UNINITIALIZED;
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 8: return "Insufficient External Power";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 11: return "Interrupt Request Issue";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 14: return "Corrupted infoROM";
    case 15: return "GPU is lost";
    case 16: return "GPU requires restart";
    case 17: return "The operating system has blocked the request.";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    case 19: return "In use by another client";
    case 20: return "Insufficient Memory";
    case 21: return "No data";
    default: return "Unknown Error";
    }
}

/* The library's own version is known without nvmlInit, as with the real one. */
EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    pthread_mutex_lock(&lock);
    load_config();
    int ok = cfg.loaded == 1;
    pthread_mutex_unlock(&lock);
    if (!ok) return NVML_ERROR_UNKNOWN;
    return put_str(version, length, cfg.nvml_version);
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    if (!initialized()) return NVML_ERROR_UNINITIALIZED;
    return put_str(version, length, cfg.driver_version);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion) {
    if (!initialized()) return NVML_ERROR_UNINITIALIZED;
    if (!cudaDriverVersion) return NVML_ERROR_INVALID_ARGUMENT;
    *cudaDriverVersion = cfg.cuda_driver_version;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion) {
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
    if (!initialized()) return NVML_ERROR_UNINITIALIZED;
    if (!deviceCount) return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = cfg.ndev;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount) {
    return nvmlDeviceGetCount_v2(deviceCount);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!initialized()) return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= cfg.ndev) return NVML_ERROR_INVALID_ARGUMENT;
    fake_device *d = &cfg.dev[index];
    if (d->stderr_message) fprintf(stderr, "%s\n", d->stderr_message);
    if (d->handle_error) return d->handle_error;
    *device = d;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    if (!initialized()) return NVML_ERROR_UNINITIALIZED;
    if (!valid(device)) return NVML_ERROR_INVALID_ARGUMENT;
    return put_str(name, length, device->name);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    if (!initialized()) return NVML_ERROR_UNINITIALIZED;
    if (!valid(device)) return NVML_ERROR_INVALID_ARGUMENT;
    return put_str(uuid, length, device->uuid);
}

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
    if (!initialized()) return NVML_ERROR_UNINITIALIZED;
    if (!valid(device) || !major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
    *major = device->cc_major;
    *minor = device->cc_minor;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int errorType, int counterType,
                                                unsigned long long *eccCounts) {
    if (!initialized()) return NVML_ERROR_UNINITIALIZED;
    if (!valid(device) || !eccCounts) return NVML_ERROR_INVALID_ARGUMENT;
    if (!device->ecc_supported) return NVML_ERROR_NOT_SUPPORTED;
    if (errorType == NVML_MEMORY_ERROR_TYPE_CORRECTED)
        *eccCounts = device->ecc_corrected;
    else if (errorType == NVML_MEMORY_ERROR_TYPE_UNCORRECTED)
        *eccCounts = counterType == NVML_AGGREGATE_ECC ? device->ecc_uncorrected_aggregate
                                                       : device->ecc_uncorrected;
    else
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    if (!initialized()) return NVML_ERROR_UNINITIALIZED;
    if (!valid(device) || !memory) return NVML_ERROR_INVALID_ARGUMENT;
    memory->total = device->memory_total;
    memory->used = device->memory_used;
    memory->free = device->memory_total - device->memory_used;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber) {
    if (!initialized()) return NVML_ERROR_UNINITIALIZED;
    if (!valid(device) || !minorNumber) return NVML_ERROR_INVALID_ARGUMENT;
    *minorNumber = device->minor_number;
    return NVML_SUCCESS;
}

/* The device's entry of the configuration as it is now in the file (the caller jfree()s `*root`). */
static const jval *live_device(nvmlDevice_t device, jval **root) {
    char err[256];
    *root = jload_object(config_path(), err, sizeof err);
    if (!*root) return NULL;
    const jval *devs = jget(*root, "devices");
    return (devs && devs->t == J_ARR && device->index < (unsigned)devs->n) ? devs->items[device->index] : NULL;
}

/* What runs on the GPU now: read from the file at every call (the tests start and end jobs). */
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                             nvmlProcessInfo_t *infos) {
    if (!initialized()) return NVML_ERROR_UNINITIALIZED;
    if (!valid(device) || !infoCount) return NVML_ERROR_INVALID_ARGUMENT;
    jval *root;
    const jval *d = live_device(device, &root);
    if (!root) return NVML_ERROR_UNKNOWN;
    const jval *procs = d ? jget(d, "processes") : NULL;
    unsigned n = (procs && procs->t == J_ARR) ? (unsigned)procs->n : 0;
    nvmlReturn_t rc = NVML_SUCCESS;
    if (n > *infoCount || (n && !infos)) {
        rc = NVML_ERROR_INSUFFICIENT_SIZE;
    } else {
        for (unsigned i = 0; i < n; i++) {
            infos[i].pid = (unsigned)num_or(jget(procs->items[i], "pid"), 0);
            infos[i].usedGpuMemory = (unsigned long long)num_or(jget(procs->items[i], "used_memory"), 0);
            infos[i].gpuInstanceId = infos[i].computeInstanceId = 0xFFFFFFFFu;
        }
    }
    *infoCount = n;
    jfree(root);
    return rc;
}

/* A sensor, not a fact fixed at nvmlInit: the value is read from the file at every call, so a
 * test heats a GPU by rewriting the node's configuration while a long-running reader (the
 * guard) keeps NVML initialised. */
EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensorType, unsigned int *temp) {
    (void)sensorType;
    if (!initialized()) return NVML_ERROR_UNINITIALIZED;
    if (!valid(device) || !temp) return NVML_ERROR_INVALID_ARGUMENT;
    jval *root;
    const jval *d = live_device(device, &root);
    if (!root) return NVML_ERROR_UNKNOWN;
    nvmlReturn_t rc = (nvmlReturn_t)num_or(d ? jget(d, "temperature_error") : NULL, 0);
    if (rc == NVML_SUCCESS) *temp = (unsigned int)num_or(d ? jget(d, "temperature") : NULL, 40);
    jfree(root);
    return rc;
}
