// Shared by the tensor-parallel serving step (tp_serving_kv_cache.cu), built with `-I include`:
// the activation type chosen by -DUSE_FP16, error checks, and small inline helpers the step calls.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#ifdef USE_FP16
typedef half act_t;
#define NCCL_ACT ncclHalf
#else
typedef float act_t;
#define NCCL_ACT ncclFloat
#endif

#define CUDA_TRY(x)                                                                      \
  do {                                                                                   \
    cudaError_t st = (x);                                                                \
    if (st != cudaSuccess) {                                                             \
      fprintf(stderr, "cuda %s at %s:%d\n", cudaGetErrorString(st), __FILE__, __LINE__); \
      abort();                                                                           \
    }                                                                                    \
  } while (0)
#define NCCL_TRY(x)                                                                      \
  do {                                                                                   \
    ncclResult_t st = (x);                                                               \
    if (st != ncclSuccess) {                                                             \
      fprintf(stderr, "nccl %s at %s:%d\n", ncclGetErrorString(st), __FILE__, __LINE__); \
      abort();                                                                           \
    }                                                                                    \
  } while (0)

struct ServeConfig {
  int layers = 4;
  int hidden = 4096;
  int heads_per_rank = 8;
  int head_dim = 128;
  int max_seq = 1024;
  int batch = 8;
  int vocab_shard = 8000;
};

inline size_t kv_layer_elems(const ServeConfig& c) { return (size_t)c.batch * c.max_seq * c.heads_per_rank * c.head_dim; }

// Row-parallel layers end with a sum of the partial outputs of every tensor-parallel rank.
inline void tp_sum(act_t* x, size_t n, ncclComm_t comm, cudaStream_t s) { NCCL_TRY(ncclAllReduce(x, x, n, NCCL_ACT, ncclSum, comm, s)); }

inline int grid_for(size_t n) { return (int)((n + 255) / 256 < 1024 ? (n + 255) / 256 : 1024); }
