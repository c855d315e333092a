#include "braid/platform/device_headers.hpp"

#include <algorithm>

#include "braid/util/fs.hpp"
#include "braid/util/text.hpp"

namespace braid {

std::string HeaderContract::prompt_section() const { return "### braid/" + name + "\n" + contract + "\n"; }

std::vector<HeaderContract> device_header_contracts(const std::filesystem::path& device_include) {
  std::vector<std::filesystem::path> headers;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(device_include / "braid", ec)) {
    const auto ext = e.path().extension().string();
    if (ext == ".cuh" || ext == ".h" || ext == ".hpp") headers.push_back(e.path());
  }
  std::sort(headers.begin(), headers.end());
  std::vector<HeaderContract> out;
  for (const auto& h : headers)
    if (auto text = try_read_file(h)) {
      std::string contract = leading_comment(*text, 80);
      if (!contract.empty()) out.push_back({h.filename().string(), std::move(contract)});
    }
  return out;
}

}  // namespace braid
