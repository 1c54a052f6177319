// Host/device portability macros shared by the numerics headers.
#pragma once
#if defined(__CUDACC__)
#define UFP4_HD __host__ __device__ __forceinline__
#define UFP4_UNROLL _Pragma("unroll")
#else
#define UFP4_HD inline
#define UFP4_UNROLL
#endif
