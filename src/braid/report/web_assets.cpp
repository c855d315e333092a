#include "braid/report/web_assets.hpp"

// .incbin copies the files into .rodata; CMake's OBJECT_DEPENDS on web/ui/* rebuilds this
// object when they change.
#define BRAID_EMBED(symbol, file)                                                 \
  __asm__(".section .rodata\n"                                                    \
          ".balign 16\n"                                                          \
          ".global " #symbol "_begin\n" #symbol "_begin:\n"                       \
          ".incbin \"" BRAID_SOURCE_DIR "/web/ui/" file "\"\n"                    \
          ".global " #symbol "_end\n" #symbol "_end:\n"                           \
          ".byte 0\n"                                                             \
          ".previous\n");                                                         \
  extern "C" const char symbol##_begin[];                                         \
  extern "C" const char symbol##_end[];

BRAID_EMBED(braid_web_index_html, "index.html")
BRAID_EMBED(braid_web_app_js, "app.js")
BRAID_EMBED(braid_web_app_css, "app.css")
BRAID_EMBED(braid_web_dom_js, "dom.js")
BRAID_EMBED(braid_web_charts_js, "charts.js")

namespace braid::report {

std::optional<WebAsset> web_asset(std::string_view path) {
  auto view = [](const char* b, const char* e) { return std::string_view(b, static_cast<std::size_t>(e - b)); };
  if (path == "/" || path == "/index.html")
    return WebAsset{view(braid_web_index_html_begin, braid_web_index_html_end), "text/html; charset=utf-8"};
  if (path == "/app.js") return WebAsset{view(braid_web_app_js_begin, braid_web_app_js_end), "text/javascript; charset=utf-8"};
  if (path == "/dom.js") return WebAsset{view(braid_web_dom_js_begin, braid_web_dom_js_end), "text/javascript; charset=utf-8"};
  if (path == "/charts.js") return WebAsset{view(braid_web_charts_js_begin, braid_web_charts_js_end), "text/javascript; charset=utf-8"};
  if (path == "/app.css") return WebAsset{view(braid_web_app_css_begin, braid_web_app_css_end), "text/css; charset=utf-8"};
  return std::nullopt;
}

}  // namespace braid::report
