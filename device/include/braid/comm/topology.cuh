// braid/comm/topology.cuh -- what the machine offers, probed on the host: an RDMA NIC for GIN.
// Part of braid/comm.cuh, whose contract applies.
#pragma once

#include <dirent.h>

#include <cstdlib>
#include <string>

namespace braid::dev {

// GIN needs an RDMA (verbs) device; without one every devComm that asks for GIN fails, so the
// platform reports no GIN. NCCL_GIN_ENABLE=0 turns it off as well.
inline bool rdma_device_present() {
  const char* en = std::getenv("NCCL_GIN_ENABLE");
  if (en != nullptr && std::string(en) == "0") return false;
  DIR* d = opendir("/sys/class/infiniband");
  if (d == nullptr) return false;
  bool any = false;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') any = true;
  closedir(d);
  return any;
}

}  // namespace braid::dev
