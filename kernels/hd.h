// Host/device portability macro shared by the numerics headers.
#pragma once
#if defined(__CUDACC__)
#define UFP4_HD __host__ __device__ __forceinline__
#else
#define UFP4_HD inline
#endif
