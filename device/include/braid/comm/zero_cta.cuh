// braid/comm/zero_cta.cuh -- NCCL's host collectives on copy engines (NCCL_CTA_POLICY_ZERO), an
// RAII communicator. Part of braid/comm.cuh, whose contract applies.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <vector>

#include "braid/runtime.cuh"

namespace braid::dev {

// NCCL's host collectives with NCCL_CTA_POLICY_ZERO: a communicator split from `parent` that uses
// copy engines and no SMs where it can. Buffers passed to its collectives should be registered
// on *this* communicator with register_window (symmetric registration enables the CE path).
class ZeroCtaComm {
 public:
  explicit ZeroCtaComm(ncclComm_t parent, int rank) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.CTAPolicy = NCCL_CTA_POLICY_ZERO;
    BRAID_NCCL(ncclCommSplit(parent, 0, rank, &comm_, &cfg));
  }
  ~ZeroCtaComm() {
    for (ncclWindow_t w : windows_) ncclCommWindowDeregister(comm_, w);
    if (comm_ != nullptr) ncclCommDestroy(comm_);
  }
  ZeroCtaComm(const ZeroCtaComm&) = delete;
  ZeroCtaComm& operator=(const ZeroCtaComm&) = delete;
  ncclComm_t get() const { return comm_; }
  ncclWindow_t register_window(void* ptr, size_t bytes) {
    ncclWindow_t w = nullptr;
    BRAID_NCCL(ncclCommWindowRegister(comm_, ptr, bytes, &w, NCCL_WIN_COLL_SYMMETRIC));
    windows_.push_back(w);
    return w;
  }
  void all_gather(const void* send, void* recv, size_t count, ncclDataType_t type, cudaStream_t stream) {
    BRAID_NCCL(ncclAllGather(send, recv, count, type, comm_, stream));
  }

 private:
  ncclComm_t comm_ = nullptr;
  std::vector<ncclWindow_t> windows_;
};

}  // namespace braid::dev
