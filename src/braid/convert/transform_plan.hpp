// transform()'s decision pass, internal to transform.cpp: for each data-moving NCCL call, whether
// a rule converts it, and the communicators the converted runtime binds to. A call first needs
// a rule, literal types and ops with a device reduction, buffers followed to unconditional
// cudaMalloc/ncclMemAlloc/harness allocations, and one communicator; then sends and receives on a
// communicator, the members of a group, and collectives sharing a buffer with a host send/recv
// convert together or not at all.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "braid/convert/analyzer.hpp"

namespace braid::convert {

// A communicator the converted runtime serves (binds: windows, device communicator).
struct BoundComm {
  std::string path;
  const CommInit* init =
      nullptr;  // its unconditional creation in this file, where it is bound; else at its first converted call
  // The other unconditional creations of that path (`&comms[kPairs]`, `&comms[kAll]`: elements of one
  // array), each bound where it is made too.
  std::vector<const CommInit*> also;
};

struct Plan {
  std::map<std::size_t, std::string> reason;  // call index -> why it stays host NCCL ("" when it converts)
  std::vector<BoundComm> bound;               // the communicators the converted calls use, most used first
  const BoundComm* bound_at(std::size_t creation_call) const;  // the one created at that call, or null
};

Plan plan_conversion(const Analysis& a, const std::vector<std::size_t>& collectives);

// NCCL name -> its braid_converted replacement (ncclAllGather -> all_gather).
const std::map<std::string, std::string>& replacements();

// Arguments that must live in a registered window on every rank (each is significant on every
// rank in NCCL's semantics, so the run-time window check gives the same answer everywhere).
std::vector<int> window_args(const std::string& name, const NcclSignature& sig);

// Allocators whose memory cannot become a window by rule (the LLM loop's stage A rewrites them).
bool stage_a_allocator(const std::string& allocator);
// The runtime's replacement of an allocator the rules move to symmetric memory, plain and with the size
// agreed over the ranks (`sym_malloc`, `sym_malloc_agreed`); nullptr for any other allocator.
struct SymmetricAllocator {
  const char* plain;
  const char* agreed;
};
const SymmetricAllocator* symmetric_replacement(const std::string& allocator);

bool is_p2p(const std::string& name);

}  // namespace braid::convert
