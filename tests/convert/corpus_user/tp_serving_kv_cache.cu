// Tensor-parallel inference server, one decode step per loop iteration; built with
// `-I include -DUSE_FP16` (include/tp_serving.h picks the activation type and holds the check
// macros and inline helpers). The KV cache is `act_t** k_cache`: an array allocated on the host
// whose entries are cudaMalloc'd per layer. Each layer's attention output and MLP output are summed
// across the tensor-parallel ranks (attention through the header's `tp_sum`, MLP in place here);
// the vocabulary-sharded logits are all-gathered, rank 0 samples the next token ids (int64) and
// broadcasts them so every rank appends the same token. Ranks from the environment (torchrun's
// RANK/WORLD_SIZE), NCCL id through a file.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include "tp_serving.h"

__global__ void attention_decode(const act_t* x, act_t* k, act_t* v, act_t* out, int hidden, size_t cache_elems, int pos) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < hidden; i += gridDim.x * blockDim.x) {
    const size_t slot = ((size_t)pos * hidden + i) % cache_elems;
    k[slot] = x[i];
    v[slot] = x[i];
    out[i] = (act_t)((float)x[i] * 0.5f);
  }
}
__global__ void mlp_partial(const act_t* x, act_t* out, int hidden, int rank) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < hidden; i += gridDim.x * blockDim.x)
    out[i] = (act_t)((float)x[i] * 0.25f + 0.001f * rank);
}
__global__ void lm_head_shard(const act_t* x, float* logits, int vocab_shard, int batch) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < vocab_shard * batch; i += gridDim.x * blockDim.x)
    logits[i] = (float)x[i % 4096] * (float)(i % 7);
}
__global__ void greedy_sample(const float* logits, int64_t* tokens, int vocab, int batch) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  int64_t best = 0;
  for (int t = 1; t < vocab; ++t)
    if (logits[(size_t)b * vocab + t] > logits[(size_t)b * vocab + best]) best = t;
  tokens[b] = best;
}
__global__ void embed(const int64_t* tokens, act_t* x, int hidden) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < hidden; i += gridDim.x * blockDim.x)
    x[i] = (act_t)(0.001f * (float)((tokens[0] + i) % 1000));
}

static int env_int(const char* name, int fallback) {
  const char* v = getenv(name);
  return v ? atoi(v) : fallback;
}

static ncclUniqueId shared_id(int rank) {
  const char* path = getenv("NCCL_ID_FILE") ? getenv("NCCL_ID_FILE") : "/tmp/tp_serving.id";
  ncclUniqueId id;
  if (rank == 0) {
    NCCL_TRY(ncclGetUniqueId(&id));
    FILE* f = fopen(path, "wb");
    fwrite(&id, sizeof(id), 1, f);
    fclose(f);
  } else {
    for (;;) {
      FILE* f = fopen(path, "rb");
      if (f && fread(&id, sizeof(id), 1, f) == 1) {
        fclose(f);
        break;
      }
      if (f) fclose(f);
      usleep(10000);
    }
  }
  return id;
}

int main(int argc, char** argv) {
  const int rank = env_int("RANK", 0), world = env_int("WORLD_SIZE", 1);
  int ndev = 1;
  CUDA_TRY(cudaGetDeviceCount(&ndev));
  CUDA_TRY(cudaSetDevice(env_int("LOCAL_RANK", rank) % ndev));
  ncclUniqueId id = shared_id(rank);
  ncclComm_t tp;
  NCCL_TRY(ncclCommInitRank(&tp, world, id, rank));
  cudaStream_t stream;
  CUDA_TRY(cudaStreamCreate(&stream));

  ServeConfig cfg;
  const int new_tokens = argc > 1 ? atoi(argv[1]) : 16;
  const size_t cache_elems = kv_layer_elems(cfg);
  const int vocab = cfg.vocab_shard * world;

  act_t** k_cache = (act_t**)malloc(cfg.layers * sizeof(act_t*));
  act_t** v_cache = (act_t**)malloc(cfg.layers * sizeof(act_t*));
  for (int l = 0; l < cfg.layers; ++l) {
    CUDA_TRY(cudaMalloc(&k_cache[l], cache_elems * sizeof(act_t)));
    CUDA_TRY(cudaMalloc(&v_cache[l], cache_elems * sizeof(act_t)));
  }
  act_t *x, *attn_out, *mlp_out;
  float *logits_shard, *logits;
  int64_t* next_tokens;
  CUDA_TRY(cudaMalloc(&x, cfg.hidden * sizeof(act_t)));
  CUDA_TRY(cudaMalloc(&attn_out, cfg.hidden * sizeof(act_t)));
  CUDA_TRY(cudaMalloc(&mlp_out, cfg.hidden * sizeof(act_t)));
  CUDA_TRY(cudaMalloc(&logits_shard, (size_t)cfg.vocab_shard * cfg.batch * sizeof(float)));
  CUDA_TRY(cudaMalloc(&logits, (size_t)vocab * cfg.batch * sizeof(float)));
  CUDA_TRY(cudaMalloc(&next_tokens, cfg.batch * sizeof(int64_t)));
  CUDA_TRY(cudaMemset(x, 0, cfg.hidden * sizeof(act_t)));
  CUDA_TRY(cudaMemset(next_tokens, 0, cfg.batch * sizeof(int64_t)));

  for (int pos = 0; pos < new_tokens; ++pos) {
    embed<<<16, 256, 0, stream>>>(next_tokens, x, cfg.hidden);
    for (int l = 0; l < cfg.layers; ++l) {
      attention_decode<<<grid_for(cfg.hidden), 256, 0, stream>>>(x, k_cache[l], v_cache[l], attn_out, cfg.hidden, cache_elems, pos);
      tp_sum(attn_out, cfg.hidden, tp, stream);
      mlp_partial<<<grid_for(cfg.hidden), 256, 0, stream>>>(attn_out, mlp_out, cfg.hidden, rank);
      NCCL_TRY(ncclAllReduce(mlp_out, x, cfg.hidden, NCCL_ACT, ncclSum, tp, stream));
    }
    lm_head_shard<<<64, 256, 0, stream>>>(x, logits_shard, cfg.vocab_shard, cfg.batch);
    NCCL_TRY(ncclAllGather(logits_shard, logits, (size_t)cfg.vocab_shard * cfg.batch, ncclFloat, tp, stream));
    if (rank == 0) greedy_sample<<<1, 32, 0, stream>>>(logits, next_tokens, vocab, cfg.batch);
    NCCL_TRY(ncclBroadcast(next_tokens, next_tokens, cfg.batch, ncclInt64, 0, tp, stream));
  }
  CUDA_TRY(cudaStreamSynchronize(stream));
  int64_t tok[8];
  CUDA_TRY(cudaMemcpy(tok, next_tokens, sizeof(tok), cudaMemcpyDeviceToHost));
  printf("rank %d/%d: %d tokens decoded, last token of sequence 0: %lld\n", rank, world, new_tokens, (long long)tok[0]);

  for (int l = 0; l < cfg.layers; ++l) {
    CUDA_TRY(cudaFree(k_cache[l]));
    CUDA_TRY(cudaFree(v_cache[l]));
  }
  free(k_cache);
  free(v_cache);
  CUDA_TRY(cudaFree(x));
  CUDA_TRY(cudaFree(attn_out));
  CUDA_TRY(cudaFree(mlp_out));
  CUDA_TRY(cudaFree(logits_shard));
  CUDA_TRY(cudaFree(logits));
  CUDA_TRY(cudaFree(next_tokens));
  NCCL_TRY(ncclCommDestroy(tp));
  return 0;
}
