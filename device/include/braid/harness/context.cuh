// braid/harness/context.cuh -- the host session of one size (Context: the device communicator,
// buffers with canary bands, streams; all released by the harness) and the Workload and Candidate
// a program supplies. Part of braid/harness.cuh, whose contract applies.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "braid/harness/types.cuh"
#include "braid/runtime.cuh"

namespace braid::dev {

class Context {
 public:
  Problem problem;
  int rank = 0, world = 1;
  ncclComm_t comm = nullptr;
  ncclDevComm dev_comm{};
  bool gin = false;                       // GIN usable on this communicator
  int sm_count = 0;
  cudaStream_t stream = nullptr;          // the timed stream handed to run()
  uint32_t iteration = 0;                 // run() calls since setup: epochs for flags
  ncclDevResourceHandle_t resource{};     // Requirements::resource_bytes
  ncclLLA2AHandle_t ll_a2a{};             // Requirements::ll_a2a_*
  void* workload_state = nullptr;         // free for the workload (handles, scratch)
  void* candidate_state = nullptr;        // free for the candidate

  Buffer& buffer(const std::string& name) {
    for (Buffer& b : buffers_)
      if (b.name == name) return b;
    throw DeviceError("no buffer named '" + name + "'");
  }
  std::deque<Buffer>& buffers() { return buffers_; }

  // Symmetric buffer (an NCCL window). Collective: every rank allocates the same sizes in the same
  // order.
  Buffer& alloc_window(const std::string& name, size_t bytes, Role role = Role::Intermediate, DType dtype = DType::U8) {
    return allocate(name, bytes, role, dtype, true);
  }
  // Plain device buffer.
  Buffer& alloc(const std::string& name, size_t bytes, Role role = Role::Intermediate, DType dtype = DType::U8) {
    return allocate(name, bytes, role, dtype, false);
  }
  // A stream joined into the timed stream at the end of every run().
  cudaStream_t new_stream() {
    cudaStream_t s = nullptr;
    BRAID_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    extra_streams_.push_back(s);
    return s;
  }
  const std::vector<cudaStream_t>& extra_streams() const { return extra_streams_; }

  Buffer& allocate(const std::string& name, size_t bytes, Role role, DType dtype, bool symmetric) {
    for (const Buffer& b : buffers_)
      if (b.name == name) throw DeviceError("buffer '" + name + "' allocated twice");
    Buffer b;
    b.name = name;
    b.role = role;
    b.dtype = dtype;
    b.bytes = bytes;
    b.count = bytes / dtype_size(dtype);
    b.alloc_bytes = kCanaryBand + round_up(std::max<size_t>(bytes, 1), 4096) + kCanaryBand;
    void* base = nullptr;
    if (symmetric) {
      BRAID_NCCL(ncclMemAlloc(&base, b.alloc_bytes));
      b.nccl_memory = true;
    } else {
      BRAID_CUDA(cudaMalloc(&base, b.alloc_bytes));
    }
    b.alloc_base = static_cast<char*>(base);
    b.ptr = b.alloc_base + kCanaryBand;
    BRAID_CUDA(cudaMemset(b.alloc_base, kCanaryByte, b.alloc_bytes));
    BRAID_CUDA(cudaMemset(b.ptr, role == Role::State ? 0 : kPoisonByte, bytes));
    if (symmetric)
      BRAID_NCCL(ncclCommWindowRegister(comm, b.ptr, round_up(std::max<size_t>(bytes, 1), 4096), &b.win, NCCL_WIN_COLL_SYMMETRIC));
    BRAID_CUDA(cudaDeviceSynchronize());
    buffers_.push_back(b);
    return buffers_.back();
  }

  // Frees every buffer, windows deregistered in allocation order (the same on all ranks).
  void release_all() {
    for (Buffer& b : buffers_) {
      if (b.win != nullptr) ncclCommWindowDeregister(comm, b.win);
      if (b.nccl_memory) ncclMemFree(b.alloc_base);
      else cudaFree(b.alloc_base);
    }
    buffers_.clear();
    for (cudaStream_t s : extra_streams_) cudaStreamDestroy(s);
    extra_streams_.clear();
  }

 private:
  std::deque<Buffer> buffers_;
  std::vector<cudaStream_t> extra_streams_;
};

using ContextFn = std::function<void(Context&)>;
using StreamFn = std::function<void(Context&, cudaStream_t)>;

struct Workload {
  std::string name;
  std::function<std::vector<BufferSpec>(const Problem&)> buffers;
  ContextFn init;           // optional: after buffers, before the candidate's setup
  StreamFn reference;       // writes the expected Output buffers by a route other than the candidate
  StreamFn baseline;        // host-driven program (writes the Output buffers)
  StreamFn compute_alone;   // the computation only
  StreamFn comm_alone;      // the communication only (host NCCL collective)
  ContextFn finish;         // optional: release what init made
  std::function<double(const Problem&)> comm_bytes;  // optional: bytes a rank receives, for GB/s
};

struct Candidate {
  std::function<Requirements(const Problem&)> requirements;
  ContextFn setup;
  StreamFn run;
  ContextFn teardown;
};

}  // namespace braid::dev
