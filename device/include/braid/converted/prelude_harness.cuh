namespace braid_converted {
// The harness owns windows and the communicator: adopt its symmetric buffers (every run()), and
// destroy our device communicator in teardown() before the harness frees them.
inline void adopt_harness(Context& c) {
  State& s = state();
  for (Allocation& a : s.allocations)
    if (a.external)
      for (Binding& b : s.bound)
        if (Window* w = window_on(a, b)) release_slot(&b, *w);
  s.allocations.erase(std::remove_if(s.allocations.begin(), s.allocations.end(), [](const Allocation& a) { return a.external; }),
                      s.allocations.end());
  for (Buffer& b : c.buffers())
    if (b.win != nullptr) s.allocations.push_back(Allocation{static_cast<char*>(b.ptr), round_window(b.bytes), {Window{nullptr, b.win, -1}}, true, 0});
}
inline void release_harness(Context&) {
  State& s = state();
  for (Binding& b : s.bound) {
    if (b.dc_made) ncclDevCommDestroy(b.comm, &b.dc);
    if (b.mailbox_win != nullptr) ncclCommWindowDeregister(b.comm, b.mailbox_win);
    if (b.mailbox != nullptr) ncclMemFree(b.mailbox);
  }
  s = State{};
}

}  // namespace braid_converted
