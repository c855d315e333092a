// ==== braid convert: device-initiated replacements (stage A: symmetric memory, windows, device
// communicator, teardown; stage B: collectives on braid's LSA primitives). Generated. ====
#include <nccl_device.h>
#include <cuda_fp16.h>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <set>
#include <vector>
#include <cstdlib>
#include "braid/comm.cuh"
#include "braid/convert_p2p.hpp"

namespace braid_converted {
using namespace braid::dev;
using braid::convert_p2p::kMaxP2pOps;
using braid::convert_p2p::kSlots;

#include "braid/converted/prelude_session.cuh"  // the parts in order. The embedding inlines each (cmake/embed_templates.cmake)

#include "braid/converted/prelude_shape.cuh"

#include "braid/converted/prelude_lifecycle.cuh"

#include "braid/converted/prelude_kernels.cuh"

#include "braid/converted/prelude_reductions.cuh"

#include "braid/converted/prelude_p2p_kernel.cuh"

#include "braid/converted/prelude_collectives.cuh"

#include "braid/converted/prelude_p2p.cuh"

}  // namespace braid_converted
// ==== end of braid convert's replacements ====
