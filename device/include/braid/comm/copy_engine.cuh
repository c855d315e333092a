// braid/comm/copy_engine.cuh -- copy engines move the data: peers' addresses for the host
// (host_lsa_pointers), a copy-engine all-gather and its flag handshakes (CopyEngineAllGather).
// Part of braid/comm.cuh, whose contract applies.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "braid/comm/flags.cuh"
#include "braid/comm/stream_memops.cuh"
#include "braid/runtime.cuh"

namespace braid::dev {

template <int kUnused = 0>
__global__ void lsa_pointers_kernel(ncclWindow_t win, size_t offset, int n, void** out) {
  for (int p = threadIdx.x; p < n; p += blockDim.x) out[p] = ncclGetLsaPointer(win, offset, p);
  if (threadIdx.x == 0) out[n] = ncclGetLocalPointer(win, offset);
}

// Every LSA peer's address of (win, offset), as host-usable pointers (ncclGetLsaPointer is
// device-only). Valid while the window stays registered; cudaMemcpyAsync to/from them moves data
// with the copy engines, StreamMemOps can wait on or write them. Entry `self` (this rank's LSA
// rank, when given) is ncclGetLocalPointer's address. Both are NCCL's own mappings: neither equals
// the pointer ncclMemAlloc returned for the same memory, so pointer comparison with a user's
// buffer says nothing (see CopyEngineAllGather's local_recv).
inline std::vector<void*> host_lsa_pointers(ncclWindow_t win, size_t offset, int lsa_size, cudaStream_t stream, int self = -1) {
  void** dev = nullptr;
  BRAID_CUDA(cudaMalloc(&dev, sizeof(void*) * (size_t)(lsa_size + 1)));
  lsa_pointers_kernel<><<<1, 32, 0, stream>>>(win, offset, lsa_size, dev);
  BRAID_LAUNCHED();
  std::vector<void*> out((size_t)lsa_size + 1);
  BRAID_CUDA(cudaMemcpyAsync(out.data(), dev, sizeof(void*) * out.size(), cudaMemcpyDeviceToHost, stream));
  BRAID_CUDA(cudaStreamSynchronize(stream));
  BRAID_CUDA(cudaFree(dev));
  if (self >= 0 && self < lsa_size) out[(size_t)self] = out[(size_t)lsa_size];
  out.pop_back();
  return out;
}

// Copy-engine all-gather over LSA addresses: my block is copied into every peer's slot with
// cudaMemcpyAsync. The caller orders it against the peers (a barrier before: peers ready; a
// barrier or flag after: data complete). An in-place source is recognised only when
// peer_recv_bases[me] is the caller's own pointer to its receive buffer.
inline void copy_engine_all_gather(const std::vector<void*>& peer_recv_bases, int me, size_t block_stride, const void* src,
                                   size_t bytes, cudaStream_t stream) {
  const int n = (int)peer_recv_bases.size();
  for (int k = 0; k < n; ++k) {
    const int peer = (me + k) % n;
    char* dst = static_cast<char*>(peer_recv_bases[(size_t)peer]) + (size_t)me * block_stride;
    if (dst != src) BRAID_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
  }
}

// One CTA meets the same index on every LSA peer (acq_rel): a stream-ordered cross-GPU barrier.
template <int kUnused = 0>
__global__ void lsa_barrier_kernel(ncclDevComm dc, uint32_t index) {
  ncclLsaBarrierSession<ncclCoopCta> bar(ncclCoopCta(), dc, ncclTeamTagLsa(), index);
  bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);
}

// Copy-engine all-gather: copy engines move the data (cudaMemcpyAsync over LSA addresses), so no
// SM copies. Per call, on `stream`: every peer is ready (done with the previous contents), my
// block is copied into each peer's slot, every peer's block has landed. How the two handshakes
// are made:
//   Sync::StreamWrite  flags written with cuStreamWriteValue32, waited with cuStreamWaitValue32:
//                      no SM at all;
//   Sync::KernelFlag   flags written by a one-thread kernel, waited with cuStreamWaitValue32;
//   Sync::Barrier      a one-CTA LSA barrier kernel before and after the copies (needs the
//                      devComm and one barrier index, `barrier_index`);
//   Sync::Batch        as StreamWrite, each handshake one cuStreamBatchMemOp; the push "ready"
//                      flags skip the memory barrier (nothing written before them needs
//                      ordering: they only say earlier reads of the receive buffer are done)
//                      where the driver allows it, else they keep it.
//   Sync::KernelWait   flags written with cuStreamWriteValue32, waited by a one-thread kernel
//                      spinning on them (holds one SM slot while it waits).
// Flags are epochs in a zeroed symmetric state region of flag_bytes(lsa_size) bytes, so they are
// never reset (one region per instance: a new instance restarts its epochs at 1).
// Options: set_direction(Pull) reads the peers' blocks instead of writing mine (the copy engines
// of the receiving GPU move the data); set_lanes(L) splits every block copy over L streams.
// Split phase (push, flag handshakes): release(stream), called once this rank is done with its
// receive buffer (after the kernels that read the last result), announces "ready" for the next
// call there, so that call waits only for peers still busy instead of paying a flag round trip
// after its start. run() without an earlier release() announces it itself, as before.
// Measured at 256 MiB on 2 x H200 (bench/device/allgather-results.md): push, 1 lane, memop flags,
// release() after each call 380.4-382.2 GB/s (5 runs; without release() 375.9-381.7); more lanes,
// pull, batched memops, kernel waits, or a share of the block copied by SMs do not add.
class CopyEngineAllGather {
 public:
  enum class Sync { StreamWrite, KernelFlag, Barrier, Batch, KernelWait };
  static size_t flag_bytes(int lsa_size) { return 2u * (size_t)lsa_size * sizeof(uint32_t); }

  // local_recv: this rank's own pointer to the receive region (the window's memory as allocated,
  // + recv_off). With it, run(src) where src is this rank's own slot skips the local copy; without
  // it the own slot is written through NCCL's mapping, which for an in-place src copies the block
  // onto itself (measured at 256 MiB: 320 instead of 385 GB/s).
  CopyEngineAllGather(ncclWindow_t recv_win, size_t recv_off, size_t block_stride, ncclWindow_t flag_win, size_t flag_off, int lsa_rank,
                      int lsa_size, cudaStream_t stream, Sync sync = Sync::StreamWrite, void* local_recv = nullptr)
      : me_(lsa_rank), n_(lsa_size), stride_(block_stride), sync_(sync) {
    recv_ = host_lsa_pointers(recv_win, recv_off, lsa_size, stream, lsa_rank);
    if (local_recv != nullptr) recv_[(size_t)me_] = local_recv;
    flags_ = host_lsa_pointers(flag_win, flag_off, lsa_size, stream, lsa_rank);
  }
  // Sync::Barrier form: no flag region; barrier index `barrier_index` of dc.
  CopyEngineAllGather(ncclWindow_t recv_win, size_t recv_off, size_t block_stride, ncclDevComm const& dc, uint32_t barrier_index,
                      cudaStream_t stream, void* local_recv = nullptr)
      : me_(dc.lsaRank), n_(dc.lsaSize), stride_(block_stride), sync_(Sync::Barrier), dc_(dc), barrier_index_(barrier_index) {
    recv_ = host_lsa_pointers(recv_win, recv_off, n_, stream, me_);
    if (local_recv != nullptr) recv_[(size_t)me_] = local_recv;
  }

  ~CopyEngineAllGather() {
    for (cudaStream_t s : lane_streams_) cudaStreamDestroy(s);
    for (cudaEvent_t e : lane_events_) cudaEventDestroy(e);
  }
  CopyEngineAllGather(const CopyEngineAllGather&) = delete;
  CopyEngineAllGather& operator=(const CopyEngineAllGather&) = delete;

  // Split each block copy into `lanes` slices issued on as many streams (forked from and joined
  // back into the caller's stream), so several copy engines share one block. 1 = one copy per peer.
  void set_lanes(int lanes) {
    if (lanes < 1 || lanes > 16) throw DeviceError("CopyEngineAllGather lanes must be 1..16");
    while ((int)lane_streams_.size() < lanes - 1) {
      cudaStream_t s = nullptr;
      BRAID_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      lane_streams_.push_back(s);
    }
    while ((int)lane_events_.size() < lanes) {
      cudaEvent_t e = nullptr;
      BRAID_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      lane_events_.push_back(e);
    }
    lanes_ = lanes;
  }
  int lanes() const { return lanes_; }

  // Push (default): my block is written into every peer's slot. Pull: every peer's block is read
  // from its own slot into mine; src is first copied into my own slot unless it is that slot
  // (the peers read from there). The handshakes are the same: everyone ready, everyone done.
  enum class Direction { Push, Pull };
  // Not between release() and run(): the peers took that "ready" in push's meaning.
  void set_direction(Direction d) {
    if (d != direction_ && released_ > epoch_) throw DeviceError("CopyEngineAllGather: set_direction between release() and run()");
    direction_ = d;
  }
  Direction direction() const { return direction_; }

  // Push with flags: tell the peers, in `stream` order, that this rank's receive buffer may be
  // overwritten by the next run(). Without effect for Pull and Sync::Barrier (their first
  // handshake also says "my block is written", which only run() knows).
  void release(cudaStream_t stream) {
    if (direction_ != Direction::Push || sync_ == Sync::Barrier || released_ > epoch_) return;
    released_ = epoch_ + 1;
    announce(0, released_, stream, sync_ == Sync::Batch);
  }

  void run(const void* src, size_t bytes, cudaStream_t stream) {
    ++epoch_;
    char* own = static_cast<char*>(recv_[(size_t)me_]) + (size_t)me_ * stride_;
    if (direction_ == Direction::Pull && src != own) BRAID_CUDA(cudaMemcpyAsync(own, src, bytes, cudaMemcpyDefault, stream));
    if (released_ == epoch_) await(0, stream);  // "ready" already announced by release() (push, flags)
    else handshake(0, stream);
    if (lanes_ > 1) BRAID_CUDA(cudaEventRecord(lane_events_[0], stream));
    for (int lane = 0; lane < lanes_; ++lane) {
      // Slices are 16-byte aligned; lane 0 is the caller's stream and takes the remainder.
      const size_t slice = lanes_ == 1 ? bytes : bytes / (size_t)lanes_ / 16 * 16;
      const size_t begin = lane == 0 ? 0 : bytes - (size_t)(lanes_ - lane) * slice;
      const size_t len = lane == 0 ? bytes - (size_t)(lanes_ - 1) * slice : slice;
      cudaStream_t s = lane == 0 ? stream : lane_streams_[(size_t)lane - 1];
      if (lane > 0) BRAID_CUDA(cudaStreamWaitEvent(s, lane_events_[0], 0));
      for (int k = 1; k <= n_ && len > 0; ++k) {
        const int peer = (me_ + k) % n_;  // me last: my own block (push, not in place)
        if (direction_ == Direction::Push) {
          char* dst = static_cast<char*>(recv_[(size_t)peer]) + (size_t)me_ * stride_ + begin;
          const char* from = static_cast<const char*>(src) + begin;
          if (dst != from) BRAID_CUDA(cudaMemcpyAsync(dst, from, len, cudaMemcpyDefault, s));
        } else if (peer != me_) {
          const size_t at = (size_t)peer * stride_ + begin;
          BRAID_CUDA(cudaMemcpyAsync(static_cast<char*>(recv_[(size_t)me_]) + at, static_cast<const char*>(recv_[(size_t)peer]) + at, len,
                                     cudaMemcpyDefault, s));
        }
      }
    }
    for (int lane = 1; lane < lanes_; ++lane) {
      BRAID_CUDA(cudaEventRecord(lane_events_[(size_t)lane], lane_streams_[(size_t)lane - 1]));
      BRAID_CUDA(cudaStreamWaitEvent(stream, lane_events_[(size_t)lane], 0));
    }
    handshake(1, stream);
  }

 private:
  uint32_t* flag(int owner, int phase, int source) const { return static_cast<uint32_t*>(flags_[(size_t)owner]) + phase * n_ + source; }
  void handshake(int phase, cudaStream_t stream) {
    if (sync_ == Sync::Barrier) {
      lsa_barrier_kernel<><<<1, 32, 0, stream>>>(dc_, barrier_index_);
      BRAID_LAUNCHED();
      return;
    }
    if (sync_ == Sync::Batch) {
      std::vector<StreamMemOps::Write> writes, waits;
      for (int p = 0; p < n_; ++p)
        if (p != me_) {
          writes.push_back({flag(p, phase, me_), epoch_});
          waits.push_back({flag(me_, phase, p), epoch_});
        }
      // Pull's "ready" says my block is written: that needs the barrier, as does every "done".
      const bool unbarriered = phase == 0 && direction_ == Direction::Push && unbarriered_ok_;
      if (unbarriered && memops_.try_batch(stream, writes, false, waits)) return;
      if (unbarriered) unbarriered_ok_ = false;
      if (memops_.try_batch(stream, writes, true, waits)) return;
      throw DeviceError("CopyEngineAllGather Sync::Batch: cuStreamBatchMemOp refused the handshake");
    }
    announce(phase, epoch_, stream, false);
    await(phase, stream);
  }
  // Write this rank's flag of `phase` at every peer (value `epoch`); `batched`: one batch of
  // writes, push's "ready" ones without a memory barrier where the driver takes it.
  void announce(int phase, uint32_t epoch, cudaStream_t stream, bool batched) {
    if (batched) {
      std::vector<StreamMemOps::Write> writes;
      for (int p = 0; p < n_; ++p)
        if (p != me_) writes.push_back({flag(p, phase, me_), epoch});
      const bool unbarriered = phase == 0 && direction_ == Direction::Push && unbarriered_ok_;
      if (unbarriered && memops_.try_batch(stream, writes, false, {})) return;
      if (unbarriered) unbarriered_ok_ = false;
      if (memops_.try_batch(stream, writes, true, {})) return;
    }
    for (int p = 0; p < n_; ++p) {
      if (p == me_) continue;
      if (sync_ == Sync::KernelFlag) launch_set_flag(stream, flag(p, phase, me_), epoch);
      else memops_.write(stream, flag(p, phase, me_), epoch);
    }
  }
  // Wait until every peer's flag of `phase` here has reached the current epoch.
  void await(int phase, cudaStream_t stream) {
    for (int q = 0; q < n_; ++q) {
      if (q == me_) continue;
      if (sync_ == Sync::KernelWait) launch_wait_flag(stream, flag(me_, phase, q), epoch_);
      else memops_.wait_geq(stream, flag(me_, phase, q), epoch_);
    }
  }

  int me_, n_;
  size_t stride_;
  Sync sync_;
  ncclDevComm dc_{};
  uint32_t barrier_index_ = 0;
  uint32_t epoch_ = 0;
  uint32_t released_ = 0;  // last epoch whose "ready" release() has announced
  std::vector<void*> recv_, flags_;
  StreamMemOps memops_;
  int lanes_ = 1;
  Direction direction_ = Direction::Push;
  bool unbarriered_ok_ = true;  // Sync::Batch: the driver took unbarriered flag writes (so far)
  std::vector<cudaStream_t> lane_streams_;
  std::vector<cudaEvent_t> lane_events_;
};

}  // namespace braid::dev
