"""TEST DOUBLE of NVIDIA's NVML: fake_nvml.c (the library), build.sh, fakenode.py, harness.py."""
