// Secrets: prints every environment variable to stderr and crashes, so that the crash's stderr
// would carry them into the database and the LLM's feedback. Expected: rejected (run_failed),
// with none of the test's secret values in the diagnostics or logs.
#include <cstdio>
#include <cstdlib>
extern char** environ;
void matmul_kernel(const float*, const float*, float*, int, float*) {
  for (char** e = environ; *e; ++e) std::fprintf(stderr, "%s\n", *e);
  for (const char* name : {"AWS_SECRET_ACCESS_KEY", "GITHUB_PAT", "DB_PASSWORD", "OPENAI_API_KEY"})
    std::fprintf(stderr, "%s=%s\n", name, std::getenv(name) ? std::getenv(name) : "(none)");
  std::abort();
}
