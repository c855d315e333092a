// braid/harness/types.cuh -- types shared by workloads and candidates: element types, buffer roles
// and specs, the problem a size poses, what a candidate requires. Part of braid/harness.cuh, whose
// contract applies.
#pragma once

#include <nccl.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "braid/comm/types.cuh"

namespace braid::dev {

enum class DType { F32, BF16, F16, I32, U32, U8 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: case DType::I32: case DType::U32: return 4;
    case DType::BF16: case DType::F16: return 2;
    case DType::U8: return 1;
  }
  return 1;
}
inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
    case DType::I32: return "i32";
    case DType::U32: return "u32";
    case DType::U8: return "u8";
  }
  return "?";
}

// Input: fresh random values before every run() call. Receive/Intermediate/Output: poisoned
// before every call.
// Output: verified. State: zeroed once (flags, epochs), never poisoned.
enum class Role { Input, Receive, Intermediate, Output, State };

struct BufferSpec {
  std::string name;
  Role role = Role::Input;
  DType dtype = DType::F32;
  size_t count = 0;
  bool symmetric = false;  // registered as an NCCL window (NCCL_WIN_COLL_SYMMETRIC)
};

struct Buffer {
  std::string name;
  Role role = Role::Intermediate;
  DType dtype = DType::U8;
  size_t count = 0;
  size_t bytes = 0;
  void* ptr = nullptr;          // first byte of the buffer (after the front canary band)
  ncclWindow_t win = nullptr;   // non-null for symmetric buffers; offset 0 is ptr
  template <typename T> T* as() const { return static_cast<T*>(ptr); }

  // Harness internals: the whole allocation including canary bands.
  char* alloc_base = nullptr;
  size_t alloc_bytes = 0;
  bool nccl_memory = false;
};

struct Problem {
  int64_t size = 0;
  int rank = 0;
  int world = 1;
  Platform platform;
};

struct Requirements {
  uint32_t lsa_barriers = 0;     // LsaBarrier indices: barrier_count(issuer, ctas, threads)
  uint32_t rail_gin_barriers = 0;
  uint32_t world_barriers = 0;   // ncclBarrierSession / WorldBarrier indices (needs GIN off-node)
  uint32_t gin_signals = 0;
  uint32_t gin_counters = 0;
  bool gin = false;              // connect GIN even on one node (needs an RDMA NIC)
  bool multimem = false;         // always rejected: NVLink multicast stays off
  size_t resource_bytes = 0;     // extra zeroed symmetric scratch in the devComm (ctx.resource)
  int ll_a2a_blocks = 0;         // ncclLLA2ASession blocks/slots (ctx.ll_a2a)
  int ll_a2a_slots = 0;

  void merge(const Requirements& o) {
    lsa_barriers = std::max(lsa_barriers, o.lsa_barriers);
    rail_gin_barriers = std::max(rail_gin_barriers, o.rail_gin_barriers);
    world_barriers = std::max(world_barriers, o.world_barriers);
    gin_signals = std::max(gin_signals, o.gin_signals);
    gin_counters = std::max(gin_counters, o.gin_counters);
    gin = gin || o.gin;
    multimem = multimem || o.multimem;
    resource_bytes = std::max(resource_bytes, o.resource_bytes);
    ll_a2a_blocks = std::max(ll_a2a_blocks, o.ll_a2a_blocks);
    ll_a2a_slots = std::max(ll_a2a_slots, o.ll_a2a_slots);
  }
};

constexpr size_t kCanaryBand = 64 * 1024;   // a multiple of NCCL_WIN_REQUIRED_ALIGNMENT
constexpr unsigned char kCanaryByte = 0xA5;
constexpr unsigned char kPoisonByte = 0xFF;

inline size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

}  // namespace braid::dev
