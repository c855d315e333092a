#include "braid/llm/sigv4.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cctype>
#include <ctime>

#include <fmt/format.h>

namespace braid::llm {
namespace {

std::string hex(const unsigned char* bytes, std::size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(digits[bytes[i] >> 4]);
    out.push_back(digits[bytes[i] & 15]);
  }
  return out;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// Leading and trailing blanks removed, inner runs of blanks made one space.
std::string canonical_value(const std::string& v) {
  std::string out;
  bool blank = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      blank = !out.empty();
      continue;
    }
    if (blank) out.push_back(' ');
    blank = false;
    out.push_back(c);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> sorted_headers(const SigV4Request& r) {
  std::vector<std::pair<std::string, std::string>> h;
  for (auto& [name, value] : r.headers) h.emplace_back(lower(name), canonical_value(value));
  std::sort(h.begin(), h.end());
  return h;
}

std::string signed_header_names(const SigV4Request& r) {
  std::string names;
  for (auto& [name, value] : sorted_headers(r)) names += (names.empty() ? "" : ";") + name;
  return names;
}

std::string canonical_query(const std::string& query) {
  if (query.empty()) return "";
  std::vector<std::string> params;
  for (std::size_t start = 0; start <= query.size();) {
    std::size_t amp = std::min(query.find('&', start), query.size());
    std::string p = query.substr(start, amp - start);
    if (p.find('=') == std::string::npos) p += "=";
    params.push_back(p);
    start = amp + 1;
  }
  std::sort(params.begin(), params.end());
  std::string out;
  for (auto& p : params) out += (out.empty() ? "" : "&") + p;
  return out;
}

std::string scope(const SigV4Request& r) {
  return r.amz_date.substr(0, 8) + "/" + r.region + "/" + r.service + "/aws4_request";
}

}  // namespace

std::string uri_encode(std::string_view text, bool keep_slash) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/'))
      out.push_back(static_cast<char>(c));
    else
      out += fmt::format("%{:02X}", c);
  }
  return out;
}

std::string sha256_hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), md, &n, EVP_sha256(), nullptr);
  return hex(md, n);
}

std::string hmac_sha256(std::string_view key, std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
       data.size(), md, &n);
  return std::string(reinterpret_cast<const char*>(md), n);
}

std::string sigv4_canonical_request(const SigV4Request& r) {
  std::string headers;
  for (auto& [name, value] : sorted_headers(r)) headers += name + ":" + value + "\n";
  // The path as sent is encoded once more: '%' of "%3A" becomes "%25".
  return r.method + "\n" + uri_encode(r.path, /*keep_slash=*/true) + "\n" + canonical_query(r.query) + "\n" + headers +
         "\n" + signed_header_names(r) + "\n" + sha256_hex(r.payload);
}

std::string sigv4_string_to_sign(const SigV4Request& r) {
  return "AWS4-HMAC-SHA256\n" + r.amz_date + "\n" + scope(r) + "\n" + sha256_hex(sigv4_canonical_request(r));
}

std::string sigv4_authorization(const SigV4Request& r, const AwsCredentials& creds) {
  std::string key = hmac_sha256("AWS4" + creds.secret_access_key, r.amz_date.substr(0, 8));
  key = hmac_sha256(key, r.region);
  key = hmac_sha256(key, r.service);
  key = hmac_sha256(key, "aws4_request");
  std::string signature = hmac_sha256(key, sigv4_string_to_sign(r));
  return "AWS4-HMAC-SHA256 Credential=" + creds.access_key_id + "/" + scope(r) +
         ", SignedHeaders=" + signed_header_names(r) +
         ", Signature=" + hex(reinterpret_cast<const unsigned char*>(signature.data()), signature.size());
}

std::string amz_date_now() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

}  // namespace braid::llm
