// AWS Signature Version 4 (header form) for one HTTP request, as AWS documents it.
//
// Why not libcurl's CURLOPT_AWS_SIGV4: libcurl 7.88 puts the request path into the canonical
// request as sent ("%3A"), but AWS services other than S3 encode each path segment a second
// time ("%253A"); Bedrock model ids hold ':' ("anthropic.claude-...-v1:0"), so every such
// request would be refused with a signature mismatch.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace braid::llm {

struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // temporary credentials only; sent as x-amz-security-token
};

struct SigV4Request {
  std::string method = "POST";
  std::string path = "/";    // as sent on the wire (already percent-encoded), without the query
  std::string query;         // as sent, without '?'; "" for none
  std::vector<std::pair<std::string, std::string>> headers;  // to sign: must include host
  std::string payload;
  std::string region;
  std::string service;
  std::string amz_date;      // YYYYMMDDTHHMMSSZ (UTC)
};

// RFC 3986 percent-encoding as AWS wants it: A-Z a-z 0-9 - _ . ~ kept, the rest %XX (upper case);
// '/' kept when keep_slash.
std::string uri_encode(std::string_view text, bool keep_slash);

// Lower-case hex of SHA-256(data) and of HMAC-SHA256(key, data).
std::string sha256_hex(std::string_view data);
std::string hmac_sha256(std::string_view key, std::string_view data);  // raw 32 bytes

// The canonical request (its path segments encoded a second time, as non-S3 services expect),
// the string to sign, and the Authorization header's value for `request` signed with `creds`.
std::string sigv4_canonical_request(const SigV4Request& request);
std::string sigv4_string_to_sign(const SigV4Request& request);
std::string sigv4_authorization(const SigV4Request& request, const AwsCredentials& creds);

// Current UTC time as YYYYMMDDTHHMMSSZ.
std::string amz_date_now();

}  // namespace braid::llm
