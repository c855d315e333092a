// braid/comm.cuh -- communication primitives over the NCCL 2.28 device API (LSA and GIN).
//
// CONTRACT (shown to the LLM as documentation)
// Every primitive is configured along five dimensions:
//   backend      Backend::Lsa (NVLink/PCIe loads and stores) or Backend::Gin (RDMA puts). GIN
//                needs an RDMA NIC; `effective_backend(b, platform)` maps Gin to Lsa where the
//                device communicator has no GIN, so a GIN knob value never fails a run.
//   placement    where communication is issued: its own kernel before/after compute, a fused
//                prologue/epilogue, per tile in the main loop, specialised warps, or a second
//                stream. Primitives are __device__ building blocks; the *_kernel templates are
//                the "own kernel" placement. Placement is the caller's choice of where to call.
//   sync scope   what a wait covers: LsaBarrier<I> (all LSA peers, one index per issuer),
//                ReadyFlags (one flag per (source rank, chunk)), stream waits (host order).
//   issuer       Issuer::Thread | Issuer::Warp | Issuer::Cta: the group of threads that issues
//                one chunk (copies) or shares one barrier index. Every thread of the group must
//                make the call.
//   chunk size   bytes per unit of work; one issuer group copies one chunk at a time, chunks are
//                dealt round-robin over groups. 16-byte accesses where pointers and sizes are
//                16-byte aligned, a byte loop for the rest.
// Rules that hold everywhere:
//   * LSA peers are LSA ranks (devComm.lsaRank / lsaSize), not world ranks.
//   * Barrier indices are persistent state: size the requirement from the launch with
//     `barrier_count(issuer, ctas, threads_per_cta)`, give concurrently running kernels disjoint
//     index ranges (`first_index`), and make every rank call each index equally often.
//   * A wait acquires, a publish releases (system scope). `relaxed` barriers order no data.
//   * Grids that spin on peers must be co-resident: ctas <= occupancy * SMs, same on all ranks.
//   * Host side: `host_lsa_pointers` hands peers' symmetric addresses to the host so copy
//     engines can move data (cudaMemcpyAsync); `ZeroCtaComm` runs NCCL's host collectives with
//     NCCL_CTA_POLICY_ZERO (copy engines, no SMs); `CopyEngineAllGather` is an all-gather that uses
//     only copy engines and stream memory operations (flags written and waited by the streams);
//     call its release(stream) once the gathered result has been consumed, so the next run()
//     skips a flag round trip.
//   * Addresses NCCL gives for one's own slot (ncclGetLocalPointer, ncclGetLsaPointer(self)) alias
//     the pointer ncclMemAlloc returned: compare user pointers with user pointers only.
//   * Multimem (NVLS) is never used.
// What is here:
//   device blocks  copy_range, copy_range_multi, peer_put/peer_get(_chunked), all_gather_push,
//                  all_to_all_push, reduce_scatter_pull<float|bf16>, ReadyFlags, flag_store_release,
//                  flag_load_acquire, flag_wait_geq, LsaBarrier<I>, WorldBarrier<I> (GIN),
//                  gin_all_gather_inplace (GIN)
//   kernels        all_gather_kernel, all_to_all_kernel, reduce_scatter_kernel,
//                  all_gather_flagged_kernel + wait_chunks_copy_kernel (per-chunk pipeline),
//                  all_gather_bulk_kernel (TMA bulk copies), gin_all_gather_kernel, wait_flag_kernel
//   host           launch_all_gather(all_gather_auto_config(shard, sms), ...), barrier_count,
//                  resident_ctas, StreamMemOps, launch_wait_flag/launch_set_flag,
//                  host_lsa_pointers, copy_engine_all_gather, CopyEngineAllGather, ZeroCtaComm
// Measured on 2 x H200 (NVLink, bench/device/allgather-results.md): all_gather_kernel with the auto
// launch takes 0.52-0.83 of ncclAllGather's time from 1 MiB to 1 GiB shards, 358-360 GB/s at
// 256 MiB (SM stores stop near 365 GB/s); CopyEngineAllGather (copy engines, no SM) with release()
// reaches 380-382 GB/s at 256 MiB and 390 at 1 GiB, the better choice from 64 MiB up when SMs are
// busy computing.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <dirent.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "braid/runtime.cuh"

// The parts, one concern each (braid/comm/, as NCCL's nccl_device/*.h under nccl_device.h);
// the headers above stay for programs that came to rely on them through this one.
#include "braid/comm/types.cuh"
#include "braid/comm/topology.cuh"
#include "braid/comm/issuer.cuh"
#include "braid/comm/copy.cuh"
#include "braid/comm/flags.cuh"
#include "braid/comm/stream_memops.cuh"
#include "braid/comm/barriers.cuh"
#include "braid/comm/collectives.cuh"
#include "braid/comm/kernels.cuh"
#include "braid/comm/gin.cuh"
#include "braid/comm/copy_engine.cuh"
#include "braid/comm/zero_cta.cuh"
