// The web UI's files (web/ui/), embedded into the binary at build time so `braid serve` needs
// nothing installed beside it and never reaches a CDN.
#pragma once
#include <optional>
#include <string_view>

namespace braid::report {

struct WebAsset {
  std::string_view body;
  std::string_view content_type;
};

// "/index.html", "/app.js", "/app.css"; nullopt for anything else.
std::optional<WebAsset> web_asset(std::string_view path);

}  // namespace braid::report
