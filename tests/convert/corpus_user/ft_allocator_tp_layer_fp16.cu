// A tensor-parallel decoder layer in the style of FasterTransformer / early TensorRT-LLM, MPI bootstrap,
// fp16: NCCL wrapped in templates (`ftNcclAllReduceSum<T>`, `ftNcclAllGather<T>`) that take an
// `NcclParam` by value and pick the type with `getNcclDataType<T>()`; every buffer comes from an
// allocator interface (`IAllocator*`, a `CudaAllocator` with a virtual `malloc` over cudaMalloc and a
// pointer map), through the member template `reMalloc(ptr, bytes)` that frees the old pointer and
// returns `(T*)malloc(size)`. The layer allocates its buffers at the start of every forward and frees
// them at the end (`is_free_buffer_after_forward`), as the engines do for memory-tight serving.
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <unordered_map>
#include <mpi.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define check_cuda_error(val) ft_check((val), #val, __FILE__, __LINE__)
static void ft_check(cudaError_t r, const char* what, const char* file, int line) {
  if (r != cudaSuccess) { fprintf(stderr, "[FT][ERROR] CUDA %s at %s:%d: %s\n", cudaGetErrorString(r), file, line, what); exit(1); }
}
#define NCCLCHECK(cmd) do { ncclResult_t r = (cmd); if (r != ncclSuccess) { fprintf(stderr, "Failed, NCCL error %s:%d '%s'\n", __FILE__, __LINE__, ncclGetErrorString(r)); exit(1); } } while (0)

struct NcclParam {
  int rank_{0};
  int world_size_{1};
  ncclComm_t nccl_comm_{nullptr};
};

template <typename T>
ncclDataType_t getNcclDataType() {
  if (std::is_same<T, float>::value) return ncclFloat;
  if (std::is_same<T, half>::value) return ncclHalf;
  return ncclChar;
}

template <typename T>
void ftNcclAllReduceSum(const T* send_buf, T* recv_buf, const int data_size, NcclParam nccl_param, cudaStream_t stream) {
  ncclDataType_t nccl_data_type = getNcclDataType<T>();
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclAllReduce((const void*)send_buf, (void*)recv_buf, data_size, nccl_data_type, ncclSum, nccl_param.nccl_comm_, stream));
  NCCLCHECK(ncclGroupEnd());
}

template <typename T>
void ftNcclAllGather(const T* send_buf, T* recv_buf, const int data_size, const int rank, NcclParam nccl_param, cudaStream_t stream) {
  ncclDataType_t nccl_data_type = getNcclDataType<T>();
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclAllGather(send_buf + rank * data_size, recv_buf, data_size, nccl_data_type, nccl_param.nccl_comm_, stream));
  NCCLCHECK(ncclGroupEnd());
}

class IAllocator {
 public:
  virtual ~IAllocator() {}
  virtual void* malloc(size_t size, const bool is_set_zero = true) = 0;
  virtual void free(void** ptr) = 0;
  template <typename T>
  T* reMalloc(T* ptr, size_t size, const bool is_set_zero = true) {
    if (ptr != nullptr) free((void**)&ptr);
    return (T*)malloc(size, is_set_zero);
  }
};

class CudaAllocator : public IAllocator {
 public:
  ~CudaAllocator() override {
    for (auto& kv : pointer_mapping_) check_cuda_error(cudaFree(kv.first));
  }
  void* malloc(size_t size, const bool is_set_zero = true) override {
    void* ptr = nullptr;
    check_cuda_error(cudaMalloc(&ptr, size));
    if (is_set_zero) check_cuda_error(cudaMemset(ptr, 0, size));
    pointer_mapping_[ptr] = size;
    return ptr;
  }
  void free(void** ptr) override {
    if (*ptr == nullptr) return;
    pointer_mapping_.erase(*ptr);
    check_cuda_error(cudaFree(*ptr));
    *ptr = nullptr;
  }

 private:
  std::unordered_map<void*, size_t> pointer_mapping_;
};

__global__ void attention_stub(half* out, const half* in, size_t n, int rank, int step) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2half(0.5f * __half2float(in[i]) + 0.01f * (float)((i + 7 * rank + step) % 50));
}
__global__ void ffn_stub(half* out, const half* in, size_t n, int rank) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2half(__half2float(in[i]) * (rank % 2 ? 0.25f : -0.125f) + 0.001f * (float)(i % 31));
}
__global__ void lm_head_stub(half* logits_shard, const half* hidden, size_t tokens, size_t hidden_units, size_t vocab_shard) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < tokens * vocab_shard) logits_shard[i] = hidden[(i / vocab_shard) * hidden_units + i % hidden_units];
}

template <typename T>
class ParallelGptDecoderLayer {
 public:
  ParallelGptDecoderLayer(IAllocator* allocator, NcclParam tensor_para, size_t hidden_units, size_t vocab_size,
                          bool is_free_buffer_after_forward)
      : allocator_(allocator), tensor_para_(tensor_para), hidden_units_(hidden_units),
        vocab_size_padded_(vocab_size), is_free_buffer_after_forward_(is_free_buffer_after_forward) {}
  void forward(T* output, const T* input, size_t tokens, cudaStream_t stream, int step) {
    allocateBuffer(tokens);
    const size_t n = tokens * hidden_units_;
    const unsigned blocks = (unsigned)((n + 255) / 256);
    attention_stub<<<blocks, 256, 0, stream>>>(attn_out_, input, n, tensor_para_.rank_, step);
    ftNcclAllReduceSum(attn_out_, attn_out_, (int)n, tensor_para_, stream);
    ffn_stub<<<blocks, 256, 0, stream>>>(output, attn_out_, n, tensor_para_.rank_);
    ftNcclAllReduceSum(output, output, (int)n, tensor_para_, stream);
    const size_t shard = tokens * (vocab_size_padded_ / tensor_para_.world_size_);
    lm_head_stub<<<(unsigned)((shard + 255) / 256), 256, 0, stream>>>(logits_ + tensor_para_.rank_ * shard, output, tokens,
                                                                       hidden_units_, vocab_size_padded_ / tensor_para_.world_size_);
    ftNcclAllGather(logits_, logits_, (int)shard, tensor_para_.rank_, tensor_para_, stream);
    if (is_free_buffer_after_forward_) freeBuffer();
  }
  const T* last_logits() const { return logits_; }

 private:
  void allocateBuffer(size_t tokens) {
    attn_out_ = allocator_->reMalloc(attn_out_, sizeof(T) * tokens * hidden_units_);
    logits_ = allocator_->reMalloc(logits_, sizeof(T) * tokens * vocab_size_padded_);
  }
  void freeBuffer() {
    allocator_->free((void**)(&attn_out_));
    allocator_->free((void**)(&logits_));
  }
  IAllocator* allocator_;
  NcclParam tensor_para_;
  size_t hidden_units_, vocab_size_padded_;
  bool is_free_buffer_after_forward_;
  T* attn_out_ = nullptr;
  T* logits_ = nullptr;
};

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  NcclParam tensor_para;
  MPI_Comm_rank(MPI_COMM_WORLD, &tensor_para.rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &tensor_para.world_size_);
  int device_count = 0;
  check_cuda_error(cudaGetDeviceCount(&device_count));
  check_cuda_error(cudaSetDevice(tensor_para.rank_ % device_count));
  ncclUniqueId id;
  if (tensor_para.rank_ == 0) NCCLCHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  NCCLCHECK(ncclCommInitRank(&tensor_para.nccl_comm_, tensor_para.world_size_, id, tensor_para.rank_));
  cudaStream_t stream;
  check_cuda_error(cudaStreamCreate(&stream));

  const size_t hidden_units = 4096, vocab = 32000, tokens = 8;
  CudaAllocator allocator;
  half* input = (half*)allocator.malloc(sizeof(half) * tokens * hidden_units);
  half* output = (half*)allocator.malloc(sizeof(half) * tokens * hidden_units);
  ParallelGptDecoderLayer<half> layer(&allocator, tensor_para, hidden_units, vocab, true);
  for (int step = 0; step < 4; ++step) {
    layer.forward(output, input, tokens, stream, step);
    check_cuda_error(cudaMemcpyAsync(input, output, sizeof(half) * tokens * hidden_units, cudaMemcpyDeviceToDevice, stream));
  }
  check_cuda_error(cudaStreamSynchronize(stream));
  half h = __float2half(0.f);
  check_cuda_error(cudaMemcpy(&h, output, sizeof(half), cudaMemcpyDeviceToHost));
  if (tensor_para.rank_ == 0) printf("output[0] = %f\n", __half2float(h));
  allocator.free((void**)&input);
  allocator.free((void**)&output);
  NCCLCHECK(ncclCommDestroy(tensor_para.nccl_comm_));
  MPI_Finalize();
  return 0;
}
