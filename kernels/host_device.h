// ADACC_HOST_DEVICE marks a function both backends compile: __host__ __device__ under nvcc,
// nothing for the host compiler (the SIMT emulation included).
#pragma once

#if defined(__CUDACC__)
#define ADACC_HOST_DEVICE __host__ __device__
#else
#define ADACC_HOST_DEVICE
#endif
