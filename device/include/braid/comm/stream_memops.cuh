// braid/comm/stream_memops.cuh -- stream memory operations (waits and writes on flags by the
// stream itself, no SM). Part of braid/comm.cuh, whose contract applies.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "braid/runtime.cuh"

namespace braid::dev {

// Stream memory operations (no SM used): the stream waits until *flag >= value, or writes a value
// after all earlier work of the stream (with a memory barrier). `flag` may be a peer's symmetric
// address obtained through host_lsa_pointers. Driver entry points are looked up at run time so
// that no libcuda link is needed.
class StreamMemOps {
 public:
  StreamMemOps() {
    cudaDriverEntryPointQueryResult q{};
    BRAID_CUDA(cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", reinterpret_cast<void**>(&wait_), 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || wait_ == nullptr) throw DeviceError("cuStreamWaitValue32 not available");
    BRAID_CUDA(cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", reinterpret_cast<void**>(&write_), 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || write_ == nullptr) throw DeviceError("cuStreamWriteValue32 not available");
    BRAID_CUDA(cudaGetDriverEntryPointByVersion("cuStreamBatchMemOp", reinterpret_cast<void**>(&batch_), 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess) batch_ = nullptr;
  }
  void wait_geq(cudaStream_t s, uint32_t* flag, uint32_t value) const {
    check(wait_(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(flag), value, CU_STREAM_WAIT_VALUE_GEQ), "cuStreamWaitValue32");
  }
  // Always with the memory barrier: CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER is refused
  // (CUDA_ERROR_INVALID_VALUE) for these flags on H200 with CUDA 13.
  void write(cudaStream_t s, uint32_t* flag, uint32_t value) const {
    check(write_(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(flag), value, CU_STREAM_WRITE_VALUE_DEFAULT), "cuStreamWriteValue32");
  }

  // One submission of several operations, in order: writes (each after a memory barrier unless
  // `barrier` is false), then waits (>=). Returns false, enqueueing nothing, where the driver
  // refuses the batch (no cuStreamBatchMemOp, or unbarriered writes not allowed).
  struct Write {
    uint32_t* flag;
    uint32_t value;
  };
  bool try_batch(cudaStream_t s, const std::vector<Write>& writes, bool barrier, const std::vector<Write>& waits) const {
    if (batch_ == nullptr) return false;
    std::vector<CUstreamBatchMemOpParams> ops(writes.size() + waits.size());
    size_t i = 0;
    for (const Write& w : writes) {
      std::memset(&ops[i], 0, sizeof(ops[i]));
      ops[i].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
      ops[i].writeValue.address = reinterpret_cast<CUdeviceptr>(w.flag);
      ops[i].writeValue.value = w.value;
      ops[i++].writeValue.flags = barrier ? CU_STREAM_WRITE_VALUE_DEFAULT : CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER;
    }
    for (const Write& w : waits) {
      std::memset(&ops[i], 0, sizeof(ops[i]));
      ops[i].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
      ops[i].waitValue.address = reinterpret_cast<CUdeviceptr>(w.flag);
      ops[i].waitValue.value = w.value;
      ops[i++].waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
    }
    return batch_(reinterpret_cast<CUstream>(s), (unsigned)ops.size(), ops.data(), 0) == CUDA_SUCCESS;
  }

 private:
  using Fn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
  using BatchFn = CUresult (*)(CUstream, unsigned int, CUstreamBatchMemOpParams*, unsigned int);
  static void check(CUresult r, const char* what) {
    if (r != CUDA_SUCCESS) throw DeviceError(std::string(what) + " failed with CUresult " + std::to_string((int)r));
  }
  Fn wait_ = nullptr;
  Fn write_ = nullptr;
  BatchFn batch_ = nullptr;
};

}  // namespace braid::dev
