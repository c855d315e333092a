// The differential gate's snapshot shim (src/braid/convert/diff_gate.hpp): an LD_PRELOAD library
// that records the contents of every device buffer a program allocates, at its release, so an
// original and its conversion can be compared without annotations.
//
// It wraps cudaMalloc, cudaMallocManaged, cudaMallocPitch, cudaMallocAsync (and its _ptsz twin), cudaFree,
// cudaFreeAsync (and _ptsz), ncclMemAlloc and ncclMemFree, and finds the real ones with
// dlsym(RTLD_NEXT). At each free, and at exit for buffers still live, it synchronises the
// buffer's device, copies the buffer to the host and writes
//   $BRAID_SNAPSHOT_DIR/rank<r>/<index>.bin      (index: this rank's allocation order)
//   $BRAID_SNAPSHOT_DIR/rank<r>/manifest.tsv     one line per event:
//     buffer <index> <bytes> <allocator> <freed|live-at-exit|unreadable|skipped>
//     reduce <index> <dtype> <op> <call>         a host NCCL reduction wrote into buffer <index>
//     addresses <index>                          buffer <index> is a table of device addresses:
//                                                <index>.addr says what each word points to
//     end                                        the process reached exit()
// With BRAID_SNAPSHOT_PER_DEVICE=1 (several ranks in one process) indices count per GPU,
// <device> * 100000 + <order on that device>: threads of a rank per GPU allocate in an order that
// varies from run to run, each GPU's own order does not.
// Each new allocation is zero-filled (on its stream for cudaMallocAsync; BRAID_SNAPSHOT_FILL=0
// turns this off), so a program that reads memory it never wrote reads the same on both sides.
// The rank is BRAID_RANK, else OMPI_COMM_WORLD_RANK, else PMI_RANK, else 0.
//
// Matching the two programs' allocations: the converted program's prelude
// (device/include/braid/converted/prelude_session.cuh) allocates state of its own (mailbox,
// window table, p2p plans) and rounds the program's symmetric allocations up to 4 KiB. It tells
// the shim so through braid_snapshot_next() just before the allocation: -1 skips the next one (it
// takes no index, so the program's allocations keep the original's numbering), a size records the
// bytes the program asked for. An explicit mark is chosen over guessing by size or order: the
// prelude knows which allocation is its own, and guesses would drift when sizes coincide.
//
// Built with the host compiler against CUDA's runtime header only; every CUDA call goes through
// dlsym, so the shim needs no libcudart at link time (a fake one serves the CPU test). NCCL's
// prototypes are declared here (checked against nccl.h 2.28: enums are int-sized) so the build
// needs no NCCL header. Nested calls (an allocator calling another) are not recorded twice.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <vector>

extern "C" {
typedef int braid_nccl_result_t;  // ncclResult_t; ncclSuccess = 0
}

namespace {

struct Live {
  std::size_t index = 0;
  std::size_t bytes = 0;
  const char* allocator = "";
};

struct Shim {
  std::mutex mu;
  std::map<std::uintptr_t, Live> live;   // base address -> allocation
  std::map<std::uintptr_t, Live> known;  // every allocation made, freed or not (a table may outlive its targets)
  std::size_t next_index = 0;
  bool per_device = false;                    // BRAID_SNAPSHOT_PER_DEVICE
  std::map<int, std::size_t> next_on_device;  // per_device: the next index of each GPU
  std::size_t written_bytes = 0;
  std::size_t budget = (std::size_t)1 << 32;  // BRAID_SNAPSHOT_MAX_BYTES; beyond it buffers are `skipped`
  std::string dir;                            // $BRAID_SNAPSHOT_DIR/rank<r>; empty: disabled
  bool fill = true;                           // BRAID_SNAPSHOT_FILL
  bool exit_hook = false;
  bool exiting = false;
  bool ended = false;  // `end` written
};

Shim& shim() {
  static Shim* s = new Shim;  // never destroyed: exit handlers still use it
  return *s;
}

thread_local int depth = 0;               // > 0 inside a wrapped allocator
thread_local long long next_request = 0;  // braid_snapshot_next(): 0 none, -1 skip, else bytes

template <typename F>
F real(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}
template <typename F>
F any(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
}

// The program's CUDA error state is left as it was: an error the shim's own calls cause (a pointer
// the runtime does not know, say) must not reach the program's next cudaGetLastError().
struct KeepLastError {
  using Get = cudaError_t (*)();
  Get get = any<Get>("cudaGetLastError");
  Get peek = any<Get>("cudaPeekAtLastError");
  bool clean = peek == nullptr || peek() == cudaSuccess;
  ~KeepLastError() {
    if (clean && get != nullptr) get();
  }
};

const char* rank_env() {
  for (const char* name : {"BRAID_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"})
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') return v;
  return "0";
}

void append_line(const Shim& s, const std::string& line) {
  if (s.dir.empty()) return;
  if (FILE* f = std::fopen((s.dir + "/manifest.tsv").c_str(), "a")) {
    std::fputs((line + "\n").c_str(), f);
    std::fclose(f);
  }
}

// A table of device addresses (peer pointers opened over IPC, per-expert operand pointers) holds
// values that differ between two programs computing the same thing: where the allocator put each
// buffer. So a small buffer whose every 8-byte word is null or a device address, one at least not
// null, is also written as what each word points to, one line per word: `-` null, `#<index>+<offset>`
// inside one of the program's own allocations (the same numbering on both sides), `device` other
// device memory (a peer's buffer, a window). Empty when the buffer is not such a table; the first
// word that is not an address ends the test, so a buffer of numbers costs one lookup.
std::string address_words(const Shim& s, const std::vector<char>& host) {
  constexpr std::size_t kLargestTable = 64 << 10;
  if (host.empty() || host.size() % 8 != 0 || host.size() > kLargestTable) return "";
  using Attrs = cudaError_t (*)(cudaPointerAttributes*, const void*);
  static auto attributes = any<Attrs>("cudaPointerGetAttributes");
  std::string out;
  bool any_address = false;
  for (std::size_t i = 0; i < host.size(); i += 8) {
    std::uint64_t w = 0;
    std::memcpy(&w, host.data() + i, 8);
    if (w == 0) {
      out += "-\n";
      continue;
    }
    auto it = s.known.upper_bound(w);
    if (it != s.known.begin() && w < std::prev(it)->first + std::max<std::size_t>(std::prev(it)->second.bytes, 1)) {
      --it;
      // Appended piece by piece: GCC 12 warns (-Wrestrict, falsely) on the chained operator+.
      out += '#';
      out += std::to_string(it->second.index);
      out += '+';
      out += std::to_string(w - it->first);
      out += '\n';
    } else {
      cudaPointerAttributes at;
      std::memset(&at, 0, sizeof(at));
      if (attributes == nullptr || attributes(&at, reinterpret_cast<const void*>(w)) != cudaSuccess ||
          (at.type != cudaMemoryTypeDevice && at.type != cudaMemoryTypeManaged))
        return "";
      out += "device\n";
    }
    any_address = true;
  }
  return any_address ? out : "";
}

bool write_whole(const std::string& path, const char* data, std::size_t bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool written = bytes == 0 || std::fwrite(data, 1, bytes, f) == bytes;
  std::fclose(f);
  return written;
}

// Copies one buffer to <index>.bin; the state word of its manifest line.
const char* snapshot(Shim& s, const void* ptr, const Live& a) {
  if (s.written_bytes + a.bytes > s.budget) return "skipped";
  using Sync = cudaError_t (*)();
  using Memcpy = cudaError_t (*)(void*, const void*, size_t, cudaMemcpyKind);
  using GetDev = cudaError_t (*)(int*);
  using SetDev = cudaError_t (*)(int);
  using Attrs = cudaError_t (*)(cudaPointerAttributes*, const void*);
  auto sync = any<Sync>("cudaDeviceSynchronize");
  auto copy = any<Memcpy>("cudaMemcpy");
  auto get_device = any<GetDev>("cudaGetDevice");
  auto set_device = any<SetDev>("cudaSetDevice");
  auto attributes = any<Attrs>("cudaPointerGetAttributes");
  if (sync == nullptr || copy == nullptr) return "unreadable";
  KeepLastError keep;
  // Work queued on the buffer's own device must finish first (a process may drive several GPUs).
  int old = -1, dev = -1;
  cudaPointerAttributes at;
  std::memset(&at, 0, sizeof(at));
  if (attributes != nullptr && attributes(&at, ptr) == cudaSuccess) dev = at.device;
  if (get_device != nullptr) get_device(&old);
  if (set_device != nullptr && dev >= 0 && dev != old) set_device(dev);
  std::vector<char> host(a.bytes);
  const bool ok =
      sync() == cudaSuccess && (a.bytes == 0 || copy(host.data(), ptr, a.bytes, cudaMemcpyDefault) == cudaSuccess);
  if (set_device != nullptr && dev >= 0 && dev != old && old >= 0) set_device(old);
  if (!ok) return "unreadable";
  const std::string base = s.dir + "/" + std::to_string(a.index);
  const bool written = write_whole(base + ".bin", host.data(), a.bytes);
  s.written_bytes += a.bytes;
  if (const std::string words = address_words(s, host);
      written && !words.empty() && write_whole(base + ".addr", words.data(), words.size()))
    append_line(s, "addresses\t" + std::to_string(a.index));
  return written ? (s.exiting ? "live-at-exit" : "freed") : "unreadable";
}

void record_release(Shim& s, const void* ptr) {
  auto it = s.live.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == s.live.end()) return;
  const Live a = it->second;
  s.live.erase(it);
  const char* state = snapshot(s, ptr, a);
  append_line(
      s, "buffer\t" + std::to_string(a.index) + "\t" + std::to_string(a.bytes) + "\t" + a.allocator + "\t" + state);
}

// Buffers still live at exit are copied before the CUDA runtime tears down: this handler is
// registered after the runtime's first allocation, so it runs before the runtime's own.
void at_exit() {
  Shim& s = shim();
  std::lock_guard<std::mutex> lock(s.mu);
  s.exiting = true;
  while (!s.live.empty()) record_release(s, reinterpret_cast<const void*>(s.live.begin()->first));
  if (!s.ended) append_line(s, "end");
  s.ended = true;
}

// Registered at load: a process that allocated nothing still says it reached exit().
void at_exit_end() {
  Shim& s = shim();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.ended) append_line(s, "end");
  s.ended = true;
}

// The mark braid_snapshot_next() left for this allocation, taken whether or not it succeeds.
long long take_request() {
  const long long request = next_request;
  next_request = 0;
  return request;
}

// The index of the allocation being recorded (the current device's, with per_device).
std::size_t next_index(Shim& s) {
  if (!s.per_device) return s.next_index++;
  using GetDev = cudaError_t (*)(int*);
  static auto get_device = any<GetDev>("cudaGetDevice");
  int dev = 0;
  if (get_device != nullptr && get_device(&dev) != cudaSuccess) dev = 0;
  return (std::size_t)dev * 100000 + s.next_on_device[dev]++;
}

void record_allocation(void* ptr, std::size_t bytes, const char* allocator, long long request,
                       cudaStream_t stream = nullptr) {
  if (ptr == nullptr || request < 0) return;
  Shim& s = shim();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.dir.empty()) return;
  KeepLastError keep;
  using MemsetAsync = cudaError_t (*)(void*, int, size_t, cudaStream_t);
  using StreamSync = cudaError_t (*)(cudaStream_t);
  static auto memset_async = any<MemsetAsync>("cudaMemsetAsync");
  static auto stream_sync = any<StreamSync>("cudaStreamSynchronize");
  // Finished before returning: the program may next use a non-blocking stream.
  if (s.fill && memset_async != nullptr &&
      memset_async(ptr, 0, request > 0 ? (std::size_t)request : bytes, stream) == cudaSuccess && stream_sync != nullptr)
    stream_sync(stream);
  if (!s.exit_hook) {
    s.exit_hook = true;
    std::atexit(at_exit);
  }
  const Live a{next_index(s), request > 0 ? (std::size_t)request : bytes, allocator};
  s.live[reinterpret_cast<std::uintptr_t>(ptr)] = a;
  s.known[reinterpret_cast<std::uintptr_t>(ptr)] = a;
}

void release(const void* ptr) {
  if (ptr == nullptr || depth > 1) return;
  Shim& s = shim();
  std::lock_guard<std::mutex> lock(s.mu);
  record_release(s, ptr);
}

// The allocation containing `p`, or -1.
long long index_of(const void* p) {
  Shim& s = shim();
  std::lock_guard<std::mutex> lock(s.mu);
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  auto it = s.live.upper_bound(addr);
  if (it == s.live.begin()) return -1;
  --it;
  return addr < it->first + it->second.bytes ? (long long)it->second.index : -1;
}

void record_reduction(const void* recv, int dtype, int op, const char* call) {
  const long long index = index_of(recv);
  if (index < 0) return;
  Shim& s = shim();
  std::lock_guard<std::mutex> lock(s.mu);
  append_line(
      s, "reduce\t" + std::to_string(index) + "\t" + std::to_string(dtype) + "\t" + std::to_string(op) + "\t" + call);
}

struct Depth {
  Depth() { ++depth; }
  ~Depth() { --depth; }
  bool outer() const { return depth == 1; }
};

__attribute__((constructor)) void start() {
  const char* base = std::getenv("BRAID_SNAPSHOT_DIR");
  if (base == nullptr || *base == '\0') return;
  Shim& s = shim();
  s.dir = std::string(base) + "/rank" + rank_env();
  ::mkdir(base, 0755);
  ::mkdir(s.dir.c_str(), 0755);
  if (const char* b = std::getenv("BRAID_SNAPSHOT_MAX_BYTES")) s.budget = std::strtoull(b, nullptr, 10);
  if (const char* f = std::getenv("BRAID_SNAPSHOT_FILL")) s.fill = std::strcmp(f, "0") != 0;
  if (const char* d = std::getenv("BRAID_SNAPSHOT_PER_DEVICE")) s.per_device = std::strcmp(d, "1") == 0;
  std::atexit(at_exit_end);
}

}  // namespace

extern "C" {

// Called by the converted prelude just before an allocation (see the top of this file).
void braid_snapshot_next(long long requested_bytes) { next_request = requested_bytes; }

cudaError_t cudaMalloc(void** ptr, size_t size) {
  Depth d;
  static auto f = real<cudaError_t (*)(void**, size_t)>("cudaMalloc");
  const long long request = d.outer() ? take_request() : 0;
  const cudaError_t r = f(ptr, size);
  if (r == cudaSuccess && d.outer()) record_allocation(*ptr, size, "cudaMalloc", request);
  return r;
}

cudaError_t cudaMallocManaged(void** ptr, size_t size, unsigned int flags) {
  Depth d;
  static auto f = real<cudaError_t (*)(void**, size_t, unsigned int)>("cudaMallocManaged");
  const long long request = d.outer() ? take_request() : 0;
  const cudaError_t r = f(ptr, size, flags);
  if (r == cudaSuccess && d.outer()) record_allocation(*ptr, size, "cudaMallocManaged", request);
  return r;
}

cudaError_t cudaMallocPitch(void** ptr, size_t* pitch, size_t width, size_t height) {
  Depth d;
  static auto f = real<cudaError_t (*)(void**, size_t*, size_t, size_t)>("cudaMallocPitch");
  const long long request = d.outer() ? take_request() : 0;
  const cudaError_t r = f(ptr, pitch, width, height);
  if (r == cudaSuccess && d.outer()) record_allocation(*ptr, *pitch * height, "cudaMallocPitch", request);
  return r;
}

cudaError_t cudaFree(void* ptr) {
  Depth d;
  if (d.outer()) release(ptr);
  static auto f = real<cudaError_t (*)(void*)>("cudaFree");
  return f(ptr);
}

#define BRAID_SNAPSHOT_ASYNC(malloc_name, free_name)                                                      \
  cudaError_t malloc_name(void** ptr, size_t size, cudaStream_t stream) {                                 \
    Depth d;                                                                                              \
    static auto f = real<cudaError_t (*)(void**, size_t, cudaStream_t)>(#malloc_name);                    \
    const long long request = d.outer() ? take_request() : 0;                                             \
    const cudaError_t r = f(ptr, size, stream);                                                           \
    if (r == cudaSuccess && d.outer()) record_allocation(*ptr, size, "cudaMallocAsync", request, stream); \
    return r;                                                                                             \
  }                                                                                                       \
  cudaError_t free_name(void* ptr, cudaStream_t stream) {                                                 \
    Depth d;                                                                                              \
    if (d.outer()) release(ptr); /* synchronises the device: queued work finishes */                      \
    static auto f = real<cudaError_t (*)(void*, cudaStream_t)>(#free_name);                               \
    return f(ptr, stream);                                                                                \
  }
// cuda_runtime_api.h names these through macros; the plain and per-thread-stream symbols both exist.
#undef cudaMallocAsync
#undef cudaFreeAsync
BRAID_SNAPSHOT_ASYNC(cudaMallocAsync, cudaFreeAsync)
BRAID_SNAPSHOT_ASYNC(cudaMallocAsync_ptsz, cudaFreeAsync_ptsz)
#undef BRAID_SNAPSHOT_ASYNC

braid_nccl_result_t ncclMemAlloc(void** ptr, size_t size) {
  Depth d;
  static auto f = real<braid_nccl_result_t (*)(void**, size_t)>("ncclMemAlloc");
  if (f == nullptr) return 5;  // ncclInvalidUsage: no NCCL in this process
  const long long request = d.outer() ? take_request() : 0;
  const braid_nccl_result_t r = f(ptr, size);
  if (r == 0 && d.outer()) record_allocation(*ptr, size, "ncclMemAlloc", request);
  return r;
}

braid_nccl_result_t ncclMemFree(void* ptr) {
  Depth d;
  if (d.outer()) release(ptr);
  static auto f = real<braid_nccl_result_t (*)(void*)>("ncclMemFree");
  return f == nullptr ? 5 : f(ptr);
}

// Host reductions: which buffer each one wrote, with its dtype and op (the gate's tolerances).
braid_nccl_result_t ncclAllReduce(const void* send, void* recv, size_t count, int dtype, int op, void* comm,
                                  cudaStream_t stream) {
  record_reduction(recv, dtype, op, "ncclAllReduce");
  static auto f =
      real<braid_nccl_result_t (*)(const void*, void*, size_t, int, int, void*, cudaStream_t)>("ncclAllReduce");
  return f == nullptr ? 5 : f(send, recv, count, dtype, op, comm, stream);
}

braid_nccl_result_t ncclReduceScatter(const void* send, void* recv, size_t count, int dtype, int op, void* comm,
                                      cudaStream_t stream) {
  record_reduction(recv, dtype, op, "ncclReduceScatter");
  static auto f =
      real<braid_nccl_result_t (*)(const void*, void*, size_t, int, int, void*, cudaStream_t)>("ncclReduceScatter");
  return f == nullptr ? 5 : f(send, recv, count, dtype, op, comm, stream);
}

braid_nccl_result_t ncclReduce(const void* send, void* recv, size_t count, int dtype, int op, int root, void* comm,
                               cudaStream_t stream) {
  record_reduction(recv, dtype, op, "ncclReduce");
  static auto f =
      real<braid_nccl_result_t (*)(const void*, void*, size_t, int, int, int, void*, cudaStream_t)>("ncclReduce");
  return f == nullptr ? 5 : f(send, recv, count, dtype, op, root, comm, stream);
}

}  // extern "C"
