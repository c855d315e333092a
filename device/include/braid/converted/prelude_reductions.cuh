//! Part of braid convert's prelude: element-wise reductions of any NCCL type and op, and their
//! launch. prelude.cuh includes it inside namespace braid_converted, after the parts before it: a
//! fragment, not a header of its own. The embedding (cmake/embed_templates.cmake) writes it out in
//! place and drops these //! lines.
// ---- element-wise reductions of any NCCL type and op (ncclSum/Prod/Max/Min/Avg) ----
// Accumulated in float for 16-bit floats, in the type itself otherwise; peers in rank order
// 0..n-1 on every rank, so every rank computes the same value.
template <typename T> struct Acc { using type = T; };
template <> struct Acc<__half> { using type = float; };
template <> struct Acc<__nv_bfloat16> { using type = float; };
template <typename T> __device__ __forceinline__ typename Acc<T>::type to_acc(T x) { return (typename Acc<T>::type)x; }
template <> __device__ __forceinline__ float to_acc<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float to_acc<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_acc(typename Acc<T>::type x) { return (T)x; }
template <> __device__ __forceinline__ __half from_acc<__half>(float x) { return __float2half(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <typename A>
__device__ __forceinline__ A combine(A a, A b, int op) {
  switch (op) {
    case ncclProd: return a * b;
    case ncclMax: return a > b ? a : b;
    case ncclMin: return a < b ? a : b;
    default: return a + b;  // ncclSum, ncclAvg (divided at the end)
  }
}
// out[i] (and, with push, every peer's recv window at the same place) = op over ranks of the
// send window at src_base + i, for i in [begin, end) of this rank's part. root >= 0: only the root
// reduces (ncclReduce); the others only meet the barriers.
template <typename T>
__global__ void __launch_bounds__(1024) reduce_kernel(ncclDevComm dc, ncclWindow_t send_win, size_t send_off, T* out, ncclWindow_t recv_win,
                                                      size_t recv_off, size_t begin, size_t end, int op, int root, bool push,
                                                      uint32_t first_index) {
  using A = typename Acc<T>::type;
  LsaBarrier<Issuer::Cta> bar(dc, first_index);
  bar.sync(cuda::memory_order_acq_rel);
  if (root < 0 || dc.lsaRank == root) {
    const int n = dc.lsaSize < kMaxLsaPeers ? dc.lsaSize : kMaxLsaPeers;
    const T* srcs[kMaxLsaPeers];
    T* dsts[kMaxLsaPeers];
    for (int p = 0; p < n; ++p) {
      srcs[p] = static_cast<const T*>(ncclGetLsaPointer(send_win, send_off, p));
      dsts[p] = push ? static_cast<T*>(ncclGetLsaPointer(recv_win, recv_off, p)) : nullptr;
    }
    for (size_t i = begin + (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < end; i += (size_t)gridDim.x * blockDim.x) {
      A acc = to_acc<T>(srcs[0][i]);
      for (int p = 1; p < n; ++p) acc = combine<A>(acc, to_acc<T>(srcs[p][i]), op);
      if (op == ncclAvg) acc = acc / (A)n;
      const T v = from_acc<T>(acc);
      if (push) {
        for (int p = 0; p < n; ++p) dsts[p][i] = v;
      } else {
        out[i - begin] = v;
      }
    }
  }
  bar.sync(cuda::memory_order_acq_rel);
}
// Launches reduce_kernel for an NCCL type value; false for a type without a device reduction.
inline bool launch_reduce(ncclDataType_t type, int ctas, cudaStream_t stream, const ncclDevComm& dc, ncclWindow_t send_win, size_t send_off,
                          void* out, ncclWindow_t recv_win, size_t recv_off, size_t begin, size_t end, int op, int root, bool push,
                          uint32_t first_index) {
#define BRAID_REDUCE_CASE(NCCL_TYPE, T)                                                                                       \
  case NCCL_TYPE:                                                                                                             \
    reduce_kernel<T><<<ctas, kThreads, 0, stream>>>(dc, send_win, send_off, static_cast<T*>(out), recv_win, recv_off, begin, end, op, \
                                                    root, push, first_index);                                                 \
    return true;
  switch (type) {
    BRAID_REDUCE_CASE(ncclFloat32, float)
    BRAID_REDUCE_CASE(ncclFloat16, __half)
    BRAID_REDUCE_CASE(ncclBfloat16, __nv_bfloat16)
    BRAID_REDUCE_CASE(ncclFloat64, double)
    BRAID_REDUCE_CASE(ncclInt32, int32_t)
    BRAID_REDUCE_CASE(ncclUint32, uint32_t)
    BRAID_REDUCE_CASE(ncclInt64, int64_t)
    BRAID_REDUCE_CASE(ncclUint64, uint64_t)
    BRAID_REDUCE_CASE(ncclInt8, int8_t)
    BRAID_REDUCE_CASE(ncclUint8, uint8_t)
    default: return false;
  }
#undef BRAID_REDUCE_CASE
}
inline bool float_type(ncclDataType_t t) {
  return t == ncclFloat32 || t == ncclFloat16 || t == ncclBfloat16 || t == ncclFloat64;
}
inline bool device_reduction(ncclDataType_t t, ncclRedOp_t op) {
  const bool known_op = op == ncclSum || op == ncclProd || op == ncclMax || op == ncclMin || (op == ncclAvg && float_type(t));
  return known_op && type_bytes(t) > 0 && t != ncclFloat8e4m3 && t != ncclFloat8e5m2;
}
