"""TEST DOUBLE of a CUDA toolkit: nvcc (a script around $CC), cuda_runtime_api.h, fake_cudart.c, build.sh, harness.py."""
