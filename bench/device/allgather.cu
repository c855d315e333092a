// LSA all-gather (braid/comm.cuh) against ncclAllGather, shard sizes 1 MiB .. 1 GiB per rank,
// one process per GPU. Every timed figure is a makespan: per repetition, after a cross-rank
// barrier, the slowest rank's CUDA-event time; the median over repetitions is reported.
// Bandwidth = (ranks-1) * shard / time (what each rank receives), as in the reference probe.
//
//   bench_allgather [--min_mib 1] [--max_mib 1024] [--reps 15] [--csv FILE] [--quick]
//
// --quick leaves out the LSA kernel sweep and the TMA variants (the auto launch stays).
//
// Variants: nccl (ncclAllGather on cudaMalloc buffers, what host-driven programs do), nccl_win
// (on a symmetric window), nccl_zero_cta (NCCL_CTA_POLICY_ZERO communicator, copy engines),
// ce_push (bare cudaMemcpyAsync to peers' LSA addresses, no handshake: a ceiling, not an
// all-gather), ce_sync* (CopyEngineAllGather with memop flags: 1, 2, 4 lanes, pull; batched
// memops; kernel waits), ce_split* (the same with release() after each call), ce_plus_sm_*
// (its head by copy engines, 1/8 or 1/4 of each block by the LSA kernel at the same time),
// ce_sync_kflag / ce_barrier (other handshakes), lsa (all_gather_kernel, a sweep of grid, block,
// unroll and chunk), bulk (TMA) and lsa_auto (all_gather_auto_config's choice). Each result is
// checked byte for byte against ncclAllGather's.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "braid/comm.cuh"
#include "braid/harness.cuh"

using namespace braid::dev;

namespace {

struct Args {
  size_t min_mib = 1, max_mib = 1024;
  int reps = 15;
  std::string csv;
  bool quick = false;
};

const char* sync_name(CopyEngineAllGather::Sync s) {
  using Sync = CopyEngineAllGather::Sync;
  switch (s) {
    case Sync::StreamWrite: return "memop";
    case Sync::Batch: return "batched";
    case Sync::KernelFlag: return "kernel-flag";
    case Sync::KernelWait: return "kernel-wait";
    case Sync::Barrier: return "barrier-kernel";
  }
  return "?";
}

struct LsaConfig {
  int ctas, threads, unroll;
  bool tile;  // true: one contiguous tile per CTA; false: 256 KiB chunks round-robin
};

template <int U>
void launch_lsa(const LsaConfig& c, ncclDevComm dc, ncclWindow_t win, size_t shard, const void* src, cudaStream_t s) {
  const size_t chunk = c.tile ? round_up((shard + c.ctas - 1) / c.ctas, 16) : (256u << 10);
  all_gather_kernel<Issuer::Cta, U><<<c.ctas, c.threads, 0, s>>>(dc, win, 0, shard, src, shard, chunk, 0);
}

void run_lsa(const LsaConfig& c, ncclDevComm dc, ncclWindow_t win, size_t shard, const void* src, cudaStream_t s) {
  switch (c.unroll) {
    case 1: launch_lsa<1>(c, dc, win, shard, src, s); break;
    case 2: launch_lsa<2>(c, dc, win, shard, src, s); break;
    case 4: launch_lsa<4>(c, dc, win, shard, src, s); break;
    default: launch_lsa<8>(c, dc, win, shard, src, s); break;
  }
  BRAID_LAUNCHED();
}

std::string name_of(const LsaConfig& c) {
  return "lsa_" + std::to_string(c.ctas) + "x" + std::to_string(c.threads) + "_u" + std::to_string(c.unroll) + (c.tile ? "_tile" : "_c256k");
}

__global__ void count_diff_kernel(const unsigned char* a, const unsigned char* b, size_t n, unsigned long long* bad) {
  unsigned long long mine = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) mine += a[i] != b[i];
  if (mine) atomicAdd(bad, mine);
}

int run_rank(const RankInfo& me, const Args& args) {
  ncclComm_t comm = init_comm(me);
  HostBarrier barrier(comm);
  const int n = me.world;
  cudaStream_t s = nullptr;
  BRAID_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  BRAID_CUDA(cudaEventCreate(&e0));
  BRAID_CUDA(cudaEventCreate(&e1));
  cudaStream_t side = nullptr;  // the SM share of the CE + SM all-gather
  BRAID_CUDA(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  cudaEvent_t fork, join;
  BRAID_CUDA(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  BRAID_CUDA(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  int dev = 0, sms = 0;
  BRAID_CUDA(cudaGetDevice(&dev));
  BRAID_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));

  std::vector<LsaConfig> configs;
  for (int ctas : {16, 32, 64, sms, 2 * sms})
    for (int threads : {512, 1024})
      for (int unroll : {2, 4, 8})
        for (bool tile : {true, false}) {
          if (threads == 1024 && ctas > sms) continue;
          configs.push_back({ctas, threads, unroll, tile});
        }
  // Spinning barriers need co-resident grids.
  std::vector<LsaConfig> usable;
  for (const LsaConfig& c : configs) {
    int resident = 0;
    switch (c.unroll) {
      case 2: resident = resident_ctas(all_gather_kernel<Issuer::Cta, 2>, c.threads, 1 << 20); break;
      case 4: resident = resident_ctas(all_gather_kernel<Issuer::Cta, 4>, c.threads, 1 << 20); break;
      default: resident = resident_ctas(all_gather_kernel<Issuer::Cta, 8>, c.threads, 1 << 20); break;
    }
    if (c.ctas <= resident) usable.push_back(c);
  }
  uint32_t max_ctas = 0;
  for (const LsaConfig& c : usable) max_ctas = std::max<uint32_t>(max_ctas, (uint32_t)c.ctas);
  max_ctas = std::max<uint32_t>(max_ctas, (uint32_t)(2 * sms));
  const uint32_t kStartGateIndex = max_ctas;  // used by no kernel under test

  ncclDevCommRequirements reqs;
  std::memset(&reqs, 0, sizeof(reqs));
  reqs.lsaBarrierCount = (int)max_ctas + 1;  // + the start gate's index
  ncclDevComm dc;
  BRAID_NCCL(ncclDevCommCreate(comm, &reqs, &dc));
  ZeroCtaComm zero(comm, me.rank);

  const size_t max_shard = args.max_mib << 20;
  void* win_mem = nullptr;
  BRAID_NCCL(ncclMemAlloc(&win_mem, max_shard * n));
  ncclWindow_t win = nullptr;
  BRAID_NCCL(ncclCommWindowRegister(comm, win_mem, max_shard * n, &win, NCCL_WIN_COLL_SYMMETRIC));
  void* zero_mem = nullptr;
  BRAID_NCCL(ncclMemAlloc(&zero_mem, max_shard * n));
  zero.register_window(zero_mem, max_shard * n);
  char *plain = nullptr, *ref = nullptr;
  BRAID_CUDA(cudaMalloc(&plain, max_shard * n));
  BRAID_CUDA(cudaMalloc(&ref, max_shard * n));
  unsigned long long* bad = nullptr;
  BRAID_CUDA(cudaMalloc(&bad, sizeof(unsigned long long)));
  char* win_base = static_cast<char*>(win_mem);
  const std::vector<void*> peers = host_lsa_pointers(win, 0, n, s, me.rank);
  void* flag_mem = nullptr;
  BRAID_NCCL(ncclMemAlloc(&flag_mem, 1 << 20));
  BRAID_CUDA(cudaMemset(flag_mem, 0, 1 << 20));
  ncclWindow_t flag_win = nullptr;
  BRAID_NCCL(ncclCommWindowRegister(comm, flag_mem, 1 << 20, &flag_win, NCCL_WIN_COLL_SYMMETRIC));
  int flag_slot = 0;
  double* dmax = nullptr;
  BRAID_CUDA(cudaMalloc(&dmax, sizeof(double) * 64));

  // Makespan median of `op` over reps (after 3 warm-ups). Every repetition starts from a device-side
  // LSA barrier (one CTA), so the ranks' start events fire within the barrier's exit latency of each
  // other: a synchronising collective is not charged for the host's skew in releasing the ranks
  // (several microseconds after the host barrier), which an unsynchronised copy never sees.
  // `after` runs after the stop event of each repetition, untimed (where a split-phase primitive's
  // release goes: after the consumers of the result, before the next call).
  auto time_op = [&](auto&& op, auto&& after) {
    std::vector<double> t;
    for (int r = 0; r < 3 + args.reps; ++r) {
      barrier.wait();
      lsa_barrier_kernel<><<<1, 32, 0, s>>>(dc, kStartGateIndex);
      BRAID_LAUNCHED();
      BRAID_CUDA(cudaEventRecord(e0, s));
      op();
      BRAID_CUDA(cudaEventRecord(e1, s));
      after();
      BRAID_CUDA(cudaEventSynchronize(e1));
      float ms = 0;
      BRAID_CUDA(cudaEventElapsedTime(&ms, e0, e1));
      if (r >= 3) t.push_back(ms);
    }
    BRAID_CUDA(cudaMemcpy(dmax, t.data(), sizeof(double) * t.size(), cudaMemcpyHostToDevice));
    BRAID_NCCL(ncclAllReduce(dmax, dmax, t.size(), ncclFloat64, ncclMax, comm, s));
    BRAID_CUDA(cudaMemcpyAsync(t.data(), dmax, sizeof(double) * t.size(), cudaMemcpyDeviceToHost, s));
    BRAID_CUDA(cudaStreamSynchronize(s));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  auto time_untailed = [&](auto&& op) { return time_op(op, [] {}); };  // nothing after the stop event
  auto check_against_ref = [&](const void* got, size_t bytes) {
    BRAID_CUDA(cudaMemsetAsync(bad, 0, sizeof(unsigned long long), s));
    count_diff_kernel<<<264, 512, 0, s>>>(static_cast<const unsigned char*>(got), reinterpret_cast<const unsigned char*>(ref), bytes, bad);
    BRAID_LAUNCHED();
    unsigned long long h = 0;
    BRAID_CUDA(cudaMemcpyAsync(&h, bad, sizeof(h), cudaMemcpyDeviceToHost, s));
    BRAID_CUDA(cudaStreamSynchronize(s));
    return h;
  };

  FILE* csv = nullptr;
  if (me.rank == 0 && !args.csv.empty()) {
    csv = std::fopen(args.csv.c_str(), "w");
    if (csv) std::fprintf(csv, "shard_bytes,variant,ms,GBps,ok\n");
  }
  if (me.rank == 0) {
    int version = 0;
    ncclGetVersion(&version);
    std::printf("allgather bench: %d ranks, NCCL %d, %d SMs, %zu LSA configs, reps %d (median makespan)\n", n, version, sms, usable.size(), args.reps);
    // Why CopyEngineAllGather takes local_recv: NCCL's addresses of one's own slot are aliases.
    const std::vector<void*> alias = host_lsa_pointers(win, 0, n, s), local = host_lsa_pointers(win, 0, n, s, me.rank);
    std::printf("own receive buffer: ncclMemAlloc %p, ncclGetLocalPointer %p, ncclGetLsaPointer(self) %p\n", (void*)win_base,
                local[(size_t)me.rank], alias[(size_t)me.rank]);
  }
  // What the copy-engine all-gather's two handshakes cost on their own (a call with 0 bytes).
  {
    using Sync = CopyEngineAllGather::Sync;
    std::string line = "handshakes alone (ready + done, 0 bytes, median us):";
    for (Sync sync : {Sync::StreamWrite, Sync::Batch, Sync::KernelFlag, Sync::KernelWait, Sync::Barrier})
      for (bool split : {false, true}) {
        if (split && (sync == Sync::Barrier || sync == Sync::KernelFlag)) continue;
        CopyEngineAllGather ce = sync == Sync::Barrier ? CopyEngineAllGather(win, 0, 0, dc, 0, s, win_base)
                                                       : CopyEngineAllGather(win, 0, 0, flag_win, (size_t)(flag_slot++) * 64, dc.lsaRank, n, s, sync, win_base);
        const double ms = time_op([&] { ce.run(win_base, 0, s); }, [&] { if (split) ce.release(s); });
        line += std::string("  ") + sync_name(sync) + (split ? "+release" : "") + " " + std::to_string((int)(ms * 1000.0 + 0.5));
      }
    if (me.rank == 0) std::printf("%s\n", line.c_str());
  }
  struct Row {
    size_t shard;
    double nccl, nccl_win, zero_cta, ce, ce_sync, ce_sync_l2, ce_sync_l4, ce_pull, ce_batch, hybrid8, hybrid4, ce_sync_kflag, ce_bar, ce_kwait, ce_split,
        ce_batch_split, lsa_best, lsa_auto;
    std::string best_name, auto_name;
    bool lsa_ok;
  };
  std::vector<Row> rows;
  for (size_t mib = args.min_mib; mib <= args.max_mib; mib *= 2) {
    const size_t shard = mib << 20;
    const size_t total = shard * n;
    const double recv_bytes = (double)(n - 1) * (double)shard;
    auto gbps = [&](double ms) { return recv_bytes / (ms * 1e-3) / 1e9; };
    auto emit = [&](const std::string& v, double ms, bool ok) {
      if (csv) std::fprintf(csv, "%zu,%s,%.6f,%.2f,%d\n", shard, v.c_str(), ms, gbps(ms), ok ? 1 : 0);
    };
    Row row{shard, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1e30, 0, "", "", true};
    // Fresh random shard in every source, and the reference.
    fill_random_kernel<><<<1024, 256, 0, s>>>(plain + (size_t)me.rank * shard, shard, (int)DType::U8, mix64(mib * 131 + me.rank));
    BRAID_LAUNCHED();
    BRAID_CUDA(cudaMemcpyAsync(win_base + (size_t)me.rank * shard, plain + (size_t)me.rank * shard, shard, cudaMemcpyDeviceToDevice, s));
    BRAID_CUDA(cudaMemcpyAsync(static_cast<char*>(zero_mem) + (size_t)me.rank * shard, plain + (size_t)me.rank * shard, shard,
                               cudaMemcpyDeviceToDevice, s));
    BRAID_NCCL(ncclAllGather(plain + (size_t)me.rank * shard, ref, shard, ncclUint8, comm, s));
    BRAID_CUDA(cudaStreamSynchronize(s));

    row.nccl = time_untailed([&] { BRAID_NCCL(ncclAllGather(plain + (size_t)me.rank * shard, plain, shard, ncclUint8, comm, s)); });
    emit("nccl", row.nccl, check_against_ref(plain, total) == 0);
    row.nccl_win = time_untailed([&] { BRAID_NCCL(ncclAllGather(win_base + (size_t)me.rank * shard, win_base, shard, ncclUint8, comm, s)); });
    emit("nccl_win", row.nccl_win, check_against_ref(win_base, total) == 0);
    row.zero_cta = time_untailed([&] {
      zero.all_gather(static_cast<char*>(zero_mem) + (size_t)me.rank * shard, zero_mem, shard, ncclUint8, s);
    });
    emit("nccl_zero_cta", row.zero_cta, check_against_ref(zero_mem, total) == 0);
    row.ce = time_untailed([&] {
      for (int k = 1; k < n; ++k) {
        const int p = (me.rank + k) % n;
        BRAID_CUDA(cudaMemcpyAsync(static_cast<char*>(peers[(size_t)p]) + (size_t)me.rank * shard, win_base + (size_t)me.rank * shard, shard,
                                   cudaMemcpyDefault, s));
      }
    });
    barrier.wait();
    emit("ce_push", row.ce, check_against_ref(win_base, total) == 0);
    // An all-gather into the poisoned window: timed, then checked byte for byte.
    auto time_checked = [&](auto&& op, const char* name, auto&& after) {
      BRAID_CUDA(cudaMemsetAsync(win_base, 0xFF, total, s));
      BRAID_CUDA(cudaMemcpyAsync(win_base + (size_t)me.rank * shard, plain + (size_t)me.rank * shard, shard, cudaMemcpyDeviceToDevice, s));
      BRAID_CUDA(cudaStreamSynchronize(s));
      barrier.wait();
      const double ms = time_op(op, after);
      barrier.wait();
      const bool ok = check_against_ref(win_base, total) == 0;
      row.lsa_ok = row.lsa_ok && ok;
      emit(name, ms, ok);
      return ms;
    };
    // split: release() after each call, untimed (the "ready" announced ahead of the next call).
    auto time_ce = [&](CopyEngineAllGather& ce, const char* name, bool split = false) {
      return time_checked([&] { ce.run(win_base + (size_t)me.rank * shard, shard, s); }, name, [&] { if (split) ce.release(s); });
    };
    using Sync = CopyEngineAllGather::Sync;
    {
      CopyEngineAllGather ce(win, 0, shard, flag_win, (size_t)(flag_slot++) * 64, dc.lsaRank, n, s, Sync::StreamWrite, win_base);
      row.ce_sync = time_ce(ce, "ce_sync");
      for (int lanes : {2, 4}) {
        ce.set_lanes(lanes);
        const double ms = time_ce(ce, lanes == 2 ? "ce_sync_lanes2" : "ce_sync_lanes4");
        (lanes == 2 ? row.ce_sync_l2 : row.ce_sync_l4) = ms;
      }
      // Pull: each GPU's copy engines read the peers' blocks (in place: the block is in my slot).
      ce.set_lanes(1);
      ce.set_direction(CopyEngineAllGather::Direction::Pull);
      row.ce_pull = time_ce(ce, "ce_sync_pull");
    }
    // Copy engines and SMs at once: the head of my block by CopyEngineAllGather, its tail
    // (1/8 or 1/4) by the LSA kernel on a forked stream, concurrently.
    for (int eighths : {1, 2}) {
      const size_t tail = round_up(shard / 8 * (size_t)eighths, 16), head = shard - tail;
      const AllGatherConfig tc = all_gather_auto_config(tail, sms);
      CopyEngineAllGather ce(win, 0, shard, flag_win, (size_t)(flag_slot++) * 64, dc.lsaRank, n, s, Sync::StreamWrite, win_base);
      char* mine = win_base + (size_t)me.rank * shard;
      const double ms = time_checked([&] {
        BRAID_CUDA(cudaEventRecord(fork, s));
        BRAID_CUDA(cudaStreamWaitEvent(side, fork, 0));
        launch_all_gather(tc, dc, win, head, shard, mine + head, tail, 0, side);
        ce.run(mine, head, s);
        BRAID_CUDA(cudaEventRecord(join, side));
        BRAID_CUDA(cudaStreamWaitEvent(s, join, 0));
      }, eighths == 1 ? "ce_plus_sm_eighth" : "ce_plus_sm_quarter", [] {});
      (eighths == 1 ? row.hybrid8 : row.hybrid4) = ms;
    }
    {
      CopyEngineAllGather ce(win, 0, shard, flag_win, (size_t)(flag_slot++) * 64, dc.lsaRank, n, s, Sync::Batch, win_base);
      row.ce_batch = time_ce(ce, "ce_sync_batch");
    }
    {
      CopyEngineAllGather ce(win, 0, shard, flag_win, (size_t)(flag_slot++) * 64, dc.lsaRank, n, s, Sync::Batch, win_base);
      row.ce_batch_split = time_ce(ce, "ce_split_batch", true);
    }
    {
      CopyEngineAllGather ce(win, 0, shard, flag_win, (size_t)(flag_slot++) * 64, dc.lsaRank, n, s, Sync::StreamWrite, win_base);
      row.ce_split = time_ce(ce, "ce_split", true);
    }
    {
      CopyEngineAllGather ce(win, 0, shard, flag_win, (size_t)(flag_slot++) * 64, dc.lsaRank, n, s, Sync::KernelWait, win_base);
      row.ce_kwait = time_ce(ce, "ce_sync_kwait");
    }
    {
      CopyEngineAllGather ce(win, 0, shard, flag_win, (size_t)(flag_slot++) * 64, dc.lsaRank, n, s, Sync::KernelFlag, win_base);
      row.ce_sync_kflag = time_ce(ce, "ce_sync_kflag");
    }
    {
      CopyEngineAllGather ce(win, 0, shard, dc, 0, s, win_base);
      row.ce_bar = time_ce(ce, "ce_barrier");
    }

    for (const LsaConfig& c : args.quick ? std::vector<LsaConfig>{} : usable) {
      BRAID_CUDA(cudaMemsetAsync(win_base, 0xFF, total, s));
      BRAID_CUDA(cudaMemcpyAsync(win_base + (size_t)me.rank * shard, plain + (size_t)me.rank * shard, shard, cudaMemcpyDeviceToDevice, s));
      BRAID_CUDA(cudaStreamSynchronize(s));
      barrier.wait();
      run_lsa(c, dc, win, shard, win_base + (size_t)me.rank * shard, s);
      BRAID_CUDA(cudaStreamSynchronize(s));
      barrier.wait();
      const bool ok = check_against_ref(win_base, total) == 0;
      const double ms = time_untailed([&] { run_lsa(c, dc, win, shard, win_base + (size_t)me.rank * shard, s); });
      emit(name_of(c), ms, ok);
      row.lsa_ok = row.lsa_ok && ok;
      if (ok && ms < row.lsa_best) {
        row.lsa_best = ms;
        row.best_name = name_of(c);
      }
    }
    // TMA bulk-copy variant (one issuing thread per CTA).
    for (int ctas : {32, 64, sms, 2 * sms})
      for (bool tile : {true, false}) {
        if (args.quick) break;
        const size_t chunk = tile ? round_up((shard + ctas - 1) / ctas, 16) : (256u << 10);
        auto launch = [&] {
          all_gather_bulk_kernel<><<<ctas, 32, 0, s>>>(dc, win, 0, shard, win_base + (size_t)me.rank * shard, shard, chunk, 0);
          BRAID_LAUNCHED();
        };
        BRAID_CUDA(cudaMemsetAsync(win_base, 0xFF, total, s));
        BRAID_CUDA(cudaMemcpyAsync(win_base + (size_t)me.rank * shard, plain + (size_t)me.rank * shard, shard, cudaMemcpyDeviceToDevice, s));
        BRAID_CUDA(cudaStreamSynchronize(s));
        barrier.wait();
        launch();
        BRAID_CUDA(cudaStreamSynchronize(s));
        barrier.wait();
        const bool ok = check_against_ref(win_base, total) == 0;
        const double ms = time_untailed(launch);
        const std::string name = "bulk_" + std::to_string(ctas) + (tile ? "_tile" : "_c256k");
        emit(name, ms, ok);
        row.lsa_ok = row.lsa_ok && ok;
        if (ok && ms < row.lsa_best) {
          row.lsa_best = ms;
          row.best_name = name;
        }
      }
    const AllGatherConfig ac = all_gather_auto_config(shard, sms);
    const LsaConfig auto_cfg{ac.ctas, ac.threads, ac.unroll, ac.chunk_bytes == 0};
    BRAID_CUDA(cudaMemsetAsync(win_base, 0xFF, total, s));
    BRAID_CUDA(cudaMemcpyAsync(win_base + (size_t)me.rank * shard, plain + (size_t)me.rank * shard, shard, cudaMemcpyDeviceToDevice, s));
    BRAID_CUDA(cudaStreamSynchronize(s));
    barrier.wait();
    row.lsa_auto = time_untailed([&] { launch_all_gather(ac, dc, win, 0, shard, win_base + (size_t)me.rank * shard, shard, 0, s); });
    barrier.wait();
    const bool auto_ok = check_against_ref(win_base, total) == 0;
    row.lsa_ok = row.lsa_ok && auto_ok;
    row.auto_name = name_of(auto_cfg);
    if (auto_ok && row.lsa_auto < row.lsa_best) {  // --quick: the auto launch is the only one
      row.lsa_best = row.lsa_auto;
      row.best_name = row.auto_name;
    }
    emit("lsa_auto", row.lsa_auto, auto_ok);
    rows.push_back(row);
    if (me.rank == 0) {
      std::printf("shard %5zu MiB: nccl %6.1f GB/s  nccl_win %6.1f  zero_cta %6.1f  ce_push %6.1f  ce_sync %6.1f  lanes2 %6.1f  lanes4 %6.1f  pull %6.1f  batch %6.1f  kwait %6.1f  split %6.1f  split_batch %6.1f  ce+sm/8 %6.1f  ce+sm/4 %6.1f  ce_sync_kflag %6.1f  ce_barrier %6.1f  lsa_best %6.1f (%s)  lsa_auto %6.1f (%s)  auto/nccl time %.3f%s\n",
                  mib, gbps(row.nccl), gbps(row.nccl_win), gbps(row.zero_cta), gbps(row.ce), gbps(row.ce_sync), gbps(row.ce_sync_l2), gbps(row.ce_sync_l4), gbps(row.ce_pull), gbps(row.ce_batch), gbps(row.ce_kwait), gbps(row.ce_split), gbps(row.ce_batch_split), gbps(row.hybrid8), gbps(row.hybrid4), gbps(row.ce_sync_kflag), gbps(row.ce_bar),
                  gbps(row.lsa_best), row.best_name.c_str(), gbps(row.lsa_auto), row.auto_name.c_str(), row.lsa_auto / row.nccl,
                  row.lsa_ok ? "" : "  LSA MISMATCH");
      std::fflush(stdout);
    }
  }
  if (csv) std::fclose(csv);
  if (me.rank == 0) {
    std::printf("\n| shard | ncclAllGather GB/s | LSA kernel (auto) GB/s | LSA kernel / NCCL time | CE all-gather, memop flags | batched memops | kernel waits | pull | split phase (release) | split, batched | best CE / NCCL time | best LSA kernel GB/s | best kernel config | NCCL zero-CTA GB/s | bare CE copy (no sync) |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const Row& r : rows) {
      const double rb = (double)(n - 1) * (double)r.shard;
      auto g = [&](double ms) { return rb / (ms * 1e-3) / 1e9; };
      const double ce_best = std::min({r.ce_sync, r.ce_sync_l2, r.ce_sync_l4, r.ce_pull, r.ce_batch, r.ce_kwait, r.ce_split, r.ce_batch_split, r.hybrid8,
                                       r.hybrid4, r.ce_bar});
      std::printf("| %zu MiB | %.1f | %.1f | %.3f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.3f | %.1f | %s | %.1f | %.1f |\n", r.shard >> 20, g(r.nccl), g(r.lsa_auto),
                  r.lsa_auto / r.nccl, g(r.ce_sync), g(r.ce_batch), g(r.ce_kwait), g(r.ce_pull), g(r.ce_split), g(r.ce_batch_split), ce_best / r.nccl, g(r.lsa_best),
                  r.best_name.c_str(), g(r.zero_cta), g(r.ce));
    }
  }
  bool all_ok = true;
  for (const Row& r : rows) all_ok = all_ok && r.lsa_ok;
  BRAID_CUDA(cudaDeviceSynchronize());
  barrier.wait();
  BRAID_NCCL(ncclDevCommDestroy(comm, &dc));
  BRAID_NCCL(ncclCommWindowDeregister(comm, win));
  BRAID_NCCL(ncclMemFree(win_mem));
  BRAID_NCCL(ncclCommWindowDeregister(comm, flag_win));
  BRAID_NCCL(ncclMemFree(flag_mem));
  cudaFree(plain);
  cudaFree(ref);
  return all_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--min_mib") args.min_mib = std::stoul(next());
    else if (a == "--max_mib") args.max_mib = std::stoul(next());
    else if (a == "--reps") args.reps = std::stoi(next());
    else if (a == "--csv") args.csv = next();
    else if (a == "--quick") args.quick = true;
    else {
      std::fprintf(stderr, "bench: unknown flag '%s'\n", a.c_str());
      return 2;
    }
  }
  if (args.reps < 1 || args.reps > 64 || args.min_mib < 1 || args.max_mib < args.min_mib) {
    std::fprintf(stderr, "bench: need 1 <= reps <= 64 and 1 <= min_mib <= max_mib\n");
    return 2;
  }
  const int gpus = gpu_count_or_skip(2);
  const int world = std::min(gpus, kMaxLsaPeers);
  const int failed = spawn_local_ranks(world, [&](const RankInfo& me) { return run_rank(me, args); });
  return failed ? 1 : 0;
}
