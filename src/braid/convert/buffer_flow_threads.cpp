// BufferFlow (buffer_flow.hpp): the threads a file starts. A thread runs its function once with the
// arguments it was started with, so each start is a call site of that function (record_value_uses),
// and the analyzer's thread pass (analyzer_comms.cpp) reads the entries and lambda bodies threads run.
#include <algorithm>
#include <string>
#include <utility>

#include "braid/convert/buffer_flow.hpp"
#include "braid/convert/buffer_flow_tokens.hpp"

namespace braid::convert {

using namespace flow_tokens;

// `std::vector<std::thread> name`, `std::list<std::jthread> name`: its emplace_back/push_back
// starts a thread (a vector of hooks or buffers does not).
bool BufferFlow::holds_threads(const std::string& name) const {
  for (std::size_t k = 2; k < code_.size(); ++k)
    if (code_[k].text == name && code_[k - 1].text == ">" &&
        (code_[k - 2].text == "thread" || code_[k - 2].text == "jthread"))
      return true;
  return false;
}

void BufferFlow::collect_thread_starts() {
  for (std::size_t k = 0; k + 2 < code_.size(); ++k) {
    const std::string& x = code_[k].text;
    const bool member = k >= 2 && is_member_step(code_[k - 1]);
    if (x == "thread" || x == "jthread") {
      // `std::thread t(f, ..), u(f, ..)`, `std::thread(f, ..)`, `std::thread{f, ..}`.
      std::size_t open =
          code_[k + 1].text == "(" || code_[k + 1].text == "{"                                                   ? k + 1
          : code_[k + 1].kind == TokenKind::Identifier && (code_[k + 2].text == "(" || code_[k + 2].text == "{") ? k + 2
                                                                                                                 : 0;
      while (open != 0) {
        add_thread_start(open, 0);
        const std::size_t close = match_forward(code_, open, code_.size());
        const bool next = close + 3 < code_.size() && code_[close + 1].text == "," &&
                          code_[close + 2].kind == TokenKind::Identifier &&
                          (code_[close + 3].text == "(" || code_[close + 3].text == "{");
        open = next ? close + 3 : 0;
      }
    } else if ((x == "emplace_back" || x == "push_back") && code_[k + 1].text == "(" && member &&
               holds_threads(code_[k - 2].text)) {
      add_thread_start(k + 1, 0);
    } else if (x == "pthread_create" && code_[k + 1].text == "(") {
      add_thread_start(k + 1, 2);
    } else if (x == "async" && code_[k + 1].text == "(") {
      // `std::async(std::launch::async, f, ..)`, `async(launch::deferred, f, ..)`: a policy first.
      bool policy = false;
      for (std::size_t j = k + 2; j < code_.size() && code_[j].text != "," && code_[j].text != ")"; ++j)
        policy = policy || code_[j].text == "launch";
      add_thread_start(k + 1, policy ? 1 : 0);
    }
  }
}

// The start whose arguments open at code token `open`, the function being its argument after `skip`
// others.
void BufferFlow::add_thread_start(std::size_t open, std::size_t skip) {
  const std::size_t close = match_forward(code_, open, code_.size());
  if (close >= code_.size()) return;
  std::size_t at = open + 1;
  for (std::size_t n = 0; n < skip && at < close; ++at) {
    if (code_[at].text == ",") ++n;
    else if (code_[at].text == "(" || code_[at].text == "[" || code_[at].text == "{")
      at = match_forward(code_, at, close);
  }
  // `&f`, `(void* (*)(void*))f`, `std::f`: the name after them.
  while (at < close &&
         (code_[at].text == "&" || code_[at].text == "(" || code_[at].text == "void" || code_[at].text == "*" ||
          code_[at].text == ")" || code_[at].text == "::" || code_[at].text == "std"))
    ++at;
  if (at >= close) return;
  ThreadStart s;
  s.open = open;
  s.entry = at;
  if (code_[at].text == "[") {  // a lambda: its body
    std::size_t b = match_forward(code_, at, close) + 1;
    while (b < close && code_[b].text != "{") ++b;
    if (b >= close) return;
    s.body_open = b;
    s.body_close = match_forward(code_, b, close);
  } else if (code_[at].kind != TokenKind::Identifier || code_[at + 1].text == "(") {
    return;  // `std::thread(make_worker(r))`: the function is a call's result, not named here
  }
  std::vector<std::string> args = split_top(code_, open, close);
  args.erase(args.begin(), args.begin() + std::min(args.size(), skip + 1));
  for (std::string& a : args) {
    for (const char* wrap : {"std :: ref (", "std :: cref ("})  // std::ref(x) / std::cref(x): x itself
      if (a.rfind(wrap, 0) == 0 && a.back() == ')')
        a = a.substr(std::string(wrap).size(), a.size() - std::string(wrap).size() - 1);
    while (!a.empty() && a.front() == ' ') a.erase(0, 1);
    while (!a.empty() && a.back() == ' ') a.pop_back();
  }
  s.args = std::move(args);
  thread_starts_.push_back(std::move(s));
}

const BufferFlow::ThreadStart* BufferFlow::thread_started_at(std::size_t entry) const {
  for (const ThreadStart& s : thread_starts_)
    if (s.entry == entry && s.body_open == 0) return &s;
  return nullptr;
}

}  // namespace braid::convert
