namespace braid_converted {
// The harness owns windows and the communicator: adopt its symmetric buffers (every run()), and
// destroy our device communicator in teardown() before the harness frees them.
inline void adopt_harness(Context& c) {
  State& s = state();
  s.allocations.erase(std::remove_if(s.allocations.begin(), s.allocations.end(), [](const Allocation& a) { return a.external; }),
                      s.allocations.end());
  for (Buffer& b : c.buffers())
    if (b.win != nullptr) s.allocations.push_back(Allocation{static_cast<char*>(b.ptr), round_window(b.bytes), b.win, true});
}
inline void release_harness(Context&) {
  State& s = state();
  if (s.dc_made) ncclDevCommDestroy(s.comm, &s.dc);
  if (s.mailbox_win != nullptr) ncclCommWindowDeregister(s.comm, s.mailbox_win);
  if (s.mailbox != nullptr) ncclMemFree(s.mailbox);
  s = State{};
}

}  // namespace braid_converted
