// One HTTP POST over libcurl with a whole-request timeout. Transport failures are values.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace braid::llm {

struct HttpResponse {
  long status = 0;                             // 0 when no HTTP response arrived
  std::string body;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string transport_error;                 // curl's message when status == 0
  bool timed_out = false;
};

// `headers` are "Name: value" lines; they may hold keys and are never logged.
HttpResponse http_post(const std::string& url, const std::vector<std::string>& headers,
                       const std::string& body, double timeout_s);

}  // namespace braid::llm
