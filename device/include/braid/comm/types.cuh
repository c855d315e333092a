// braid/comm/types.cuh -- the dimensions a primitive is configured along (backend, issuer,
// placement) and what the platform offers. Part of braid/comm.cuh, whose contract applies.
#pragma once

namespace braid::dev {

constexpr int kMaxLsaPeers = 8;
constexpr int kMaxPeersBulk = kMaxLsaPeers;

enum class Backend { Lsa, Gin };
enum class Issuer { Thread, Warp, Cta };
enum class Placement { SeparateKernel, FusedPrologue, FusedEpilogue, PerTile, SpecializedWarps, SecondStream };

// What the platform offers, decided once per run by the harness (or a test).
struct Platform {
  bool gin = false;       // the device communicator can connect GIN (an RDMA NIC exists)
  int lsa_size = 1;       // ranks reachable by loads and stores
  int sm_count = 0;
};

inline Backend effective_backend(Backend wanted, const Platform& p) {
  return (wanted == Backend::Gin && !p.gin) ? Backend::Lsa : wanted;
}

}  // namespace braid::dev
