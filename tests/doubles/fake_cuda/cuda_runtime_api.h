/*
 * cuda_runtime_api.h -- TEST DOUBLE of the CUDA toolkit's header of that name.
 *
 * Not product code. It declares only what the GPU probe's CUDA program
 * (components/layers/gpu_runtime/probe.py, CUDA_PROBE_C) uses, with the real toolkit's
 * enumerator values, so the same program text compiles against a real
 * toolkit and against this double (tests/doubles/fake_cuda/).
 */
#ifndef CUDA_RUNTIME_API_H_FAKE
#define CUDA_RUNTIME_API_H_FAKE

enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorUnknown = 999
};
typedef enum cudaError cudaError_t;

enum cudaDeviceAttr {
    cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrComputeCapabilityMinor = 76
};

cudaError_t cudaRuntimeGetVersion(int *runtimeVersion);
cudaError_t cudaDriverGetVersion(int *driverVersion);
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device);
const char *cudaGetErrorString(cudaError_t error);

#endif
