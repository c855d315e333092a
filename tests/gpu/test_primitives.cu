// Every primitive of braid/comm.cuh against the host NCCL collective's result, at several sizes
// and issuer granularities, one process per GPU (fork). Exit 77 without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "braid/comm.cuh"
#include "braid/harness.cuh"
#include "gpu_check.cuh"

using namespace braid::dev;
using braid::dev::test::Checker;
using braid::dev::test::compare_device_bytes;

namespace {

struct IssuerConfig {
  Issuer issuer;
  const char* name;
  int ctas;
  int threads;
  size_t chunk_bytes;  // 0: one contiguous tile per issuer group
};

const IssuerConfig kIssuers[] = {
    {Issuer::Thread, "thread", 4, 64, 16 * 1024},
    {Issuer::Warp, "warp", 16, 256, 32 * 1024},
    {Issuer::Cta, "cta", 32, 512, 0},
};

size_t tile_for(const IssuerConfig& c, size_t bytes) {
  if (c.chunk_bytes != 0) return c.chunk_bytes;
  return round_up((bytes + c.ctas - 1) / c.ctas, 16);
}

template <Issuer I>
__global__ void put_all_gather_kernel(ncclDevComm dc, ncclWindow_t win, const void* src, size_t bytes, size_t chunk) {
  LsaBarrier<I> bar(dc, 0);
  bar.sync(cuda::memory_order_acq_rel);
  for (int p = 0; p < dc.lsaSize; ++p) peer_put_chunked<I>(win, (size_t)dc.lsaRank * bytes, p, src, bytes, chunk);
  bar.sync(cuda::memory_order_acq_rel);
}

template <Issuer I>
__global__ void get_all_gather_kernel(ncclDevComm dc, ncclWindow_t send_win, void* out, size_t bytes, size_t chunk) {
  LsaBarrier<I> bar(dc, 0);
  bar.sync(cuda::memory_order_acq_rel);
  for (int p = 0; p < dc.lsaSize; ++p) peer_get_chunked<I>(static_cast<char*>(out) + (size_t)p * bytes, send_win, 0, p, bytes, chunk);
  bar.sync(cuda::memory_order_acq_rel);
}

template <typename F>
void with_issuer(Issuer i, F&& f) {
  switch (i) {
    case Issuer::Thread: f(std::integral_constant<Issuer, Issuer::Thread>{}); break;
    case Issuer::Warp: f(std::integral_constant<Issuer, Issuer::Warp>{}); break;
    case Issuer::Cta: f(std::integral_constant<Issuer, Issuer::Cta>{}); break;
  }
}

float bf16_to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

int run_rank(const RankInfo& me) {
  Checker check;
  check.rank = me.rank;
  ncclComm_t comm = init_comm(me);
  HostBarrier barrier(comm);
  cudaStream_t s = nullptr, s2 = nullptr;
  BRAID_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  BRAID_CUDA(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  int version = 0;
  ncclGetVersion(&version);
  if (me.rank == 0) std::printf("NCCL library %d, headers %d, %d ranks\n", version, NCCL_VERSION_CODE, me.world);

  ncclDevCommRequirements reqs;
  std::memset(&reqs, 0, sizeof(reqs));
  reqs.lsaBarrierCount = 4096;
  ncclDevComm dc;
  BRAID_NCCL(ncclDevCommCreate(comm, &reqs, &dc));
  const int n = me.world;
  check.expect(dc.lsaSize == n, "devComm spans every rank over LSA", "lsaSize=" + std::to_string(dc.lsaSize));

  const size_t kMax = 16u << 20;
  const std::vector<size_t> sizes = {4096 + 48, 1000003, 1u << 20, kMax};
  void *win_mem = nullptr, *flag_mem = nullptr;
  BRAID_NCCL(ncclMemAlloc(&win_mem, kMax * n * 2));
  BRAID_NCCL(ncclMemAlloc(&flag_mem, 1 << 20));
  ncclWindow_t win = nullptr, flag_win = nullptr;
  BRAID_NCCL(ncclCommWindowRegister(comm, win_mem, kMax * n * 2, &win, NCCL_WIN_COLL_SYMMETRIC));
  BRAID_NCCL(ncclCommWindowRegister(comm, flag_mem, 1 << 20, &flag_win, NCCL_WIN_COLL_SYMMETRIC));
  BRAID_CUDA(cudaMemset(flag_mem, 0, 1 << 20));
  char *src = nullptr, *out = nullptr, *ref = nullptr;
  BRAID_CUDA(cudaMalloc(&src, kMax * n));
  BRAID_CUDA(cudaMalloc(&out, kMax * n));
  BRAID_CUDA(cudaMalloc(&ref, kMax * n));
  char* recv = static_cast<char*>(win_mem);

  auto fresh = [&](size_t bytes, uint64_t salt) {
    fill_random_kernel<><<<256, 256, 0, s>>>(src, bytes, (int)DType::U8, mix64(salt * 31 + me.rank));
    BRAID_LAUNCHED();
    BRAID_CUDA(cudaMemsetAsync(win_mem, 0xFF, kMax * n * 2, s));
    BRAID_CUDA(cudaMemsetAsync(out, 0xEE, kMax * n, s));
    BRAID_CUDA(cudaStreamSynchronize(s));
    barrier.wait();
  };
  auto finish = [&]() {
    BRAID_CUDA(cudaStreamSynchronize(s));
    BRAID_CUDA(cudaStreamSynchronize(s2));
    barrier.wait();
  };
  uint64_t salt = 1;
  uint32_t epoch = 0;

  for (size_t bytes : sizes) {
    const std::string sz = std::to_string(bytes) + "B";
    // Reference all-gather and all-to-all.
    for (const IssuerConfig& ic : kIssuers) {
      const size_t chunk = tile_for(ic, bytes);
      const std::string tag = sz + " " + ic.name;

      fresh(bytes, ++salt);
      BRAID_NCCL(ncclAllGather(src, ref, bytes, ncclUint8, comm, s));
      with_issuer(ic.issuer, [&](auto I) {
        all_gather_kernel<decltype(I)::value><<<ic.ctas, ic.threads, 0, s>>>(dc, win, 0, bytes, src, bytes, chunk, 0);
      });
      BRAID_LAUNCHED();
      finish();
      std::string d = compare_device_bytes(recv, ref, bytes * n);
      check.expect(d.empty(), "all_gather_kernel " + tag, d);

      fresh(bytes, ++salt);
      BRAID_NCCL(ncclAllGather(src, ref, bytes, ncclUint8, comm, s));
      with_issuer(ic.issuer, [&](auto I) { put_all_gather_kernel<decltype(I)::value><<<ic.ctas, ic.threads, 0, s>>>(dc, win, src, bytes, chunk); });
      BRAID_LAUNCHED();
      finish();
      d = compare_device_bytes(recv, ref, bytes * n);
      check.expect(d.empty(), "peer_put_chunked " + tag, d);


      fresh(bytes, ++salt);
      fill_random_kernel<><<<256, 256, 0, s>>>(src, bytes * n, (int)DType::U8, mix64(++salt + me.rank));
      BRAID_LAUNCHED();
      BRAID_CUDA(cudaStreamSynchronize(s));
      BRAID_NCCL(ncclAlltoAll(src, ref, bytes, ncclUint8, comm, s));
      BRAID_CUDA(cudaStreamSynchronize(s));
      barrier.wait();
      with_issuer(ic.issuer, [&](auto I) {
        all_to_all_kernel<decltype(I)::value><<<ic.ctas, ic.threads, 0, s>>>(dc, win, 0, src, bytes, chunk, 0);
      });
      BRAID_LAUNCHED();
      finish();
      d = compare_device_bytes(recv, ref, bytes * n);
      check.expect(d.empty(), "all_to_all_kernel " + tag, d);

      // Reduce-scatter, float and bf16, from a send window holding n blocks.
      const size_t count_f = bytes / sizeof(float);
      fresh(bytes, ++salt);
      fill_random_kernel<><<<256, 256, 0, s>>>(recv, count_f * n, (int)DType::F32, mix64(++salt + me.rank));
      BRAID_LAUNCHED();
      BRAID_NCCL(ncclReduceScatter(recv, ref, count_f, ncclFloat, ncclSum, comm, s));
      BRAID_CUDA(cudaStreamSynchronize(s));
      barrier.wait();
      with_issuer(ic.issuer, [&](auto I) {
        reduce_scatter_kernel<float, decltype(I)::value><<<ic.ctas, ic.threads, 0, s>>>(dc, win, 0, reinterpret_cast<float*>(out), count_f,
                                                                                      chunk / sizeof(float), 0);
      });
      BRAID_LAUNCHED();
      finish();
      d = braid::dev::test::compare_device_values(reinterpret_cast<float*>(out), reinterpret_cast<float*>(ref), count_f, 1e-5,
                                                  [](float x) { return (double)x; });
      check.expect(d.empty(), "reduce_scatter_kernel<float> " + tag, d);

      const size_t count_h = bytes / 2;
      fresh(bytes, ++salt);
      fill_random_kernel<><<<256, 256, 0, s>>>(recv, count_h * n, (int)DType::BF16, mix64(++salt + me.rank));
      BRAID_LAUNCHED();
      BRAID_NCCL(ncclReduceScatter(recv, ref, count_h, ncclBfloat16, ncclSum, comm, s));
      BRAID_CUDA(cudaStreamSynchronize(s));
      barrier.wait();
      with_issuer(ic.issuer, [&](auto I) {
        reduce_scatter_kernel<__nv_bfloat16, decltype(I)::value><<<ic.ctas, ic.threads, 0, s>>>(
            dc, win, 0, reinterpret_cast<__nv_bfloat16*>(out), count_h, chunk / 2, 0);
      });
      BRAID_LAUNCHED();
      finish();
      // NCCL's ring rounds every partial sum to bf16 (n - 2 extra roundings past 2 ranks, none at
      // 1 or 2), the kernel sums in float and rounds once: allow an ulp of a partial sum (|x| < 4)
      // per extra hop. (At 1 rank, n - 2 < 0 once made the allowance negative: equal values failed.)
      d = braid::dev::test::compare_device_values(reinterpret_cast<__nv_bfloat16*>(out), reinterpret_cast<__nv_bfloat16*>(ref), count_h,
                                                  1e-2, [](__nv_bfloat16 x) { return (double)bf16_to_float(x); },
                                                  (double)std::max(n - 2, 0) / 64.0 + 1e-6);
      check.expect(d.empty(), "reduce_scatter_kernel<bf16> " + tag, d);

      // Pipelined all-gather with per-chunk ready flags: producer and consumer on two streams.
      const size_t fchunk = std::max<size_t>(chunk, bytes / 64 + 16);
      const int nchunks = (int)chunk_count(bytes, fchunk);
      if (nchunks * n <= (1 << 20) / 4) {
        ReadyFlags flags{flag_win, 0, n, nchunks};
        ++epoch;
        fresh(bytes, ++salt);
        BRAID_NCCL(ncclAllGather(src, ref, bytes, ncclUint8, comm, s));
        BRAID_CUDA(cudaStreamSynchronize(s));
        barrier.wait();
        const int ctas = std::min(ic.ctas, 16);
        with_issuer(ic.issuer, [&](auto I) {
          wait_chunks_copy_kernel<decltype(I)::value><<<ctas, ic.threads, 0, s2>>>(dc, win, 0, bytes, out, bytes, fchunk, flags, epoch);
          all_gather_flagged_kernel<decltype(I)::value><<<ctas, ic.threads, 0, s>>>(dc, win, 0, bytes, src, bytes, fchunk, flags, epoch);
        });
        BRAID_LAUNCHED();
        finish();
        d = compare_device_bytes(out, ref, bytes * n);
        check.expect(d.empty(), "all_gather_flagged + wait_chunks (ReadyFlags) " + tag, d);
      }
    }

    // Bulk-copy (TMA) all-gather: 16-byte multiples only.
    if (bytes % 16 == 0) {
      for (int ctas : {8, 64}) {
        fresh(bytes, ++salt);
        BRAID_NCCL(ncclAllGather(src, ref, bytes, ncclUint8, comm, s));
        BRAID_CUDA(cudaStreamSynchronize(s));
        barrier.wait();
        all_gather_bulk_kernel<><<<ctas, 32, 0, s>>>(dc, win, 0, bytes, src, bytes, round_up((bytes + ctas - 1) / ctas, 16), 0);
        BRAID_LAUNCHED();
        finish();
        const std::string d = compare_device_bytes(recv, ref, bytes * n);
        check.expect(d.empty(), "all_gather_bulk_kernel " + sz + " " + std::to_string(ctas) + " CTAs", d);
      }
    }

    // Peer get (pull) needs the source in a window: every rank's block sits at its second half.
    for (const IssuerConfig& ic : kIssuers) {
      const size_t chunk = tile_for(ic, bytes);
      fresh(bytes, ++salt);
      BRAID_CUDA(cudaMemcpyAsync(recv, src, bytes, cudaMemcpyDeviceToDevice, s));
      BRAID_NCCL(ncclAllGather(src, ref, bytes, ncclUint8, comm, s));
      BRAID_CUDA(cudaStreamSynchronize(s));
      barrier.wait();
      with_issuer(ic.issuer, [&](auto I) { get_all_gather_kernel<decltype(I)::value><<<ic.ctas, ic.threads, 0, s>>>(dc, win, out, bytes, chunk); });
      BRAID_LAUNCHED();
      finish();
      const std::string d = compare_device_bytes(out, ref, bytes * n);
      check.expect(d.empty(), "peer_get_chunked " + sz + " " + ic.name, d);
    }

    // Copy engines over host-visible LSA addresses, ordered by stream memory operations, then by
    // the one-thread wait kernel.
    const std::vector<void*> recv_peers = host_lsa_pointers(win, 0, n, s, me.rank);
    const std::vector<void*> flag_peers = host_lsa_pointers(flag_win, 512 * 1024, n, s, me.rank);
    uint32_t* my_flags = reinterpret_cast<uint32_t*>(static_cast<char*>(flag_mem) + 512 * 1024);
    StreamMemOps memops;
    for (int variant = 0; variant < 2; ++variant) {
      ++epoch;
      fresh(bytes, ++salt);
      BRAID_NCCL(ncclAllGather(src, ref, bytes, ncclUint8, comm, s));
      BRAID_CUDA(cudaStreamSynchronize(s));
      barrier.wait();
      copy_engine_all_gather(recv_peers, me.rank, bytes, src, bytes, s);
      for (int p = 0; p < n; ++p)
        if (p != me.rank) memops.write(s, static_cast<uint32_t*>(flag_peers[(size_t)p]) + me.rank, epoch);
      for (int q = 0; q < n; ++q) {
        if (q == me.rank) continue;
        if (variant == 0) memops.wait_geq(s, my_flags + q, epoch);
        else launch_wait_flag(s, my_flags + q, epoch);
      }
      BRAID_CUDA(cudaMemcpyAsync(out, recv, bytes * n, cudaMemcpyDeviceToDevice, s));
      finish();
      const std::string d = compare_device_bytes(out, ref, bytes * n);
      check.expect(d.empty(), std::string("copy-engine all-gather + ") + (variant == 0 ? "stream wait/write value " : "wait_flag_kernel ") + sz, d);
    }
  }

  // CopyEngineAllGather: copy engines + stream flag handshakes, both ways of writing the flags,
  // four rounds each (epochs advance; fresh data every round; push and pull, 1-3 lanes).
  {
    int instance = 0;
    for (size_t bytes : sizes) {
      for (auto sync : {CopyEngineAllGather::Sync::StreamWrite, CopyEngineAllGather::Sync::KernelFlag, CopyEngineAllGather::Sync::Barrier,
                        CopyEngineAllGather::Sync::Batch, CopyEngineAllGather::Sync::KernelWait}) {
        const size_t flag_off = 768 * 1024 + (size_t)(instance++) * 64;
        CopyEngineAllGather ce = sync == CopyEngineAllGather::Sync::Barrier
                                     ? CopyEngineAllGather(win, 0, bytes, dc, 0, s, recv)
                                     : CopyEngineAllGather(win, 0, bytes, flag_win, flag_off, dc.lsaRank, n, s, sync, recv);
        const char* how = sync == CopyEngineAllGather::Sync::StreamWrite  ? "stream-write "
                          : sync == CopyEngineAllGather::Sync::KernelFlag ? "kernel-flag "
                          : sync == CopyEngineAllGather::Sync::Batch      ? "batched-memops "
                          : sync == CopyEngineAllGather::Sync::KernelWait ? "kernel-wait "
                                                                          : "barrier-kernel ";
        // Rounds: push on 1 and 3 lanes (an odd split leaves lane 0 a remainder), pull on 2 and 1.
        // Round 1 runs split phase: release() after round 0's result was read (a no-op for Barrier).
        for (int round = 0; round < 4; ++round) {
          ce.set_lanes(round == 0 || round == 3 ? 1 : round == 1 ? 3 : 2);
          ce.set_direction(round < 2 ? CopyEngineAllGather::Direction::Push : CopyEngineAllGather::Direction::Pull);
          fresh(bytes, ++salt);
          BRAID_NCCL(ncclAllGather(src, ref, bytes, ncclUint8, comm, s));
          ce.run(src, bytes, s);
          finish();
          const std::string d = compare_device_bytes(recv, ref, bytes * n);
          check.expect(d.empty(), std::string("CopyEngineAllGather ") + how + std::to_string(bytes) + "B round " + std::to_string(round) +
                                      " lanes " + std::to_string(ce.lanes()) +
                                      (round < 2 ? " push" : " pull") + (round == 1 ? " after release" : ""), d);
          if (round == 0) ce.release(s);
        }
        // In place: the block already lies in this rank's own slot (no copy onto itself).
        for (auto dir : {CopyEngineAllGather::Direction::Push, CopyEngineAllGather::Direction::Pull}) {
          ce.set_direction(dir);
          fresh(bytes, ++salt);
          BRAID_NCCL(ncclAllGather(src, ref, bytes, ncclUint8, comm, s));
          char* own = static_cast<char*>(recv) + (size_t)me.rank * bytes;
          BRAID_CUDA(cudaMemcpyAsync(own, src, bytes, cudaMemcpyDeviceToDevice, s));
          ce.run(own, bytes, s);
          finish();
          const std::string d = compare_device_bytes(recv, ref, bytes * n);
          check.expect(d.empty(), std::string("CopyEngineAllGather in place ") + how + std::to_string(bytes) + "B" +
                                      (dir == CopyEngineAllGather::Direction::Push ? " push" : " pull"), d);
        }
      }
    }
  }

  // NCCL zero-CTA (copy-engine) collectives.
  void *zs = nullptr, *zr = nullptr;
  {
    ZeroCtaComm zero(comm, me.rank);
    const size_t bytes = 8u << 20;
    BRAID_NCCL(ncclMemAlloc(&zs, bytes));
    BRAID_NCCL(ncclMemAlloc(&zr, bytes * n));
    zero.register_window(zs, bytes);
    zero.register_window(zr, bytes * n);
    fill_random_kernel<><<<256, 256, 0, s>>>(zs, bytes, (int)DType::U8, mix64(++salt + me.rank));
    BRAID_LAUNCHED();
    BRAID_NCCL(ncclAllGather(zs, ref, bytes, ncclUint8, comm, s));
    BRAID_CUDA(cudaStreamSynchronize(s));
    zero.all_gather(zs, zr, bytes, ncclUint8, s);
    finish();
    const std::string d = compare_device_bytes(zr, ref, bytes * n);
    check.expect(d.empty(), "ZeroCtaComm all_gather (NCCL_CTA_POLICY_ZERO) 8MiB", d);
    BRAID_CUDA(cudaDeviceSynchronize());
    barrier.wait();
  }
  BRAID_NCCL(ncclMemFree(zs));
  BRAID_NCCL(ncclMemFree(zr));

  // GIN: only with an RDMA NIC; elsewhere the backend falls back to LSA.
  Platform platform;
  platform.gin = rdma_device_present();
  check.expect(effective_backend(Backend::Gin, platform) == (platform.gin ? Backend::Gin : Backend::Lsa), "effective_backend maps GIN to LSA without a NIC");
  if (!platform.gin) {
    check.skip("gin_all_gather_kernel", "no RDMA NIC, GIN unavailable on this machine");
  } else {
    ncclDevCommRequirements gr;
    std::memset(&gr, 0, sizeof(gr));
    gr.barrierCount = 16;
    gr.ginSignalCount = 16;
    gr.ginForceEnable = true;
    ncclDevComm gdc;
    BRAID_NCCL(ncclDevCommCreate(comm, &gr, &gdc));
    const size_t bytes = 1u << 20;
    fresh(bytes, ++salt);
    BRAID_CUDA(cudaMemcpyAsync(recv + (size_t)me.rank * bytes, src, bytes, cudaMemcpyDeviceToDevice, s));
    BRAID_NCCL(ncclAllGather(src, ref, bytes, ncclUint8, comm, s));
    BRAID_CUDA(cudaStreamSynchronize(s));
    barrier.wait();
    gin_all_gather_kernel<Issuer::Cta><<<16, 256, 0, s>>>(gdc, win, 0, bytes, bytes, 64 * 1024, 0, 0);
    BRAID_LAUNCHED();
    finish();
    const std::string d = compare_device_bytes(recv, ref, bytes * n);
    check.expect(d.empty(), "gin_all_gather_kernel 1MiB cta", d);
    BRAID_NCCL(ncclDevCommDestroy(comm, &gdc));
  }

  BRAID_CUDA(cudaDeviceSynchronize());
  barrier.wait();
  BRAID_NCCL(ncclDevCommDestroy(comm, &dc));
  BRAID_NCCL(ncclCommWindowDeregister(comm, win));
  BRAID_NCCL(ncclCommWindowDeregister(comm, flag_win));
  BRAID_NCCL(ncclMemFree(win_mem));
  BRAID_NCCL(ncclMemFree(flag_mem));
  cudaFree(src);
  cudaFree(out);
  cudaFree(ref);
  if (me.rank == 0) std::printf("rank 0: %d passed, %d failed\n", check.passes, check.failures);
  ncclCommFinalize(comm);
  ncclCommDestroy(comm);
  return check.failures == 0 ? 0 : 1;
}

}  // namespace

int main() {
  const int gpus = gpu_count_or_skip(1);
  const int world = std::min(gpus, kMaxLsaPeers);
  const int failed = spawn_local_ranks(world, run_rank);
  std::printf(failed ? "FAILED: %d of %d ranks\n" : "ALL PASSED (%d failed of %d ranks)\n", failed, world);
  return failed ? 1 : 0;
}
