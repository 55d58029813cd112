// libFuzzer target for the two Node annotations of a MIG re-cut (src/k8s/annotations.cc):
// tessera.io/mig-recut, which the device plugin reads from whoever may patch Nodes, and
// tessera.io/mig-recut-status, which the extender reads back; and the layout words both carry.
//
// Besides "no crash, no sanitizer report" it checks: a refusal names its annotation (or, for a
// layout, the input's name); what is accepted writes back to text that reads as the same value;
// accepted layout words, joined again, read as the same words.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "k8s/annotations.h"

namespace {

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "mig_recut: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::k8s;
  const std::string text(reinterpret_cast<const char*>(data), size);

  auto request = ParseMigRecutRequest(text);
  if (request.ok()) {
    auto again = ParseMigRecutRequest(WriteMigRecutRequest(*request));
    Check(again.ok() && *again == *request, "a request does not read back as written");
  } else {
    Check(request.error().rfind("tessera.io/mig-recut", 0) == 0,
          "a refused request does not name its annotation");
  }

  auto status = ParseMigRecutStatus(text);
  if (status.ok()) {
    auto again = ParseMigRecutStatus(WriteMigRecutStatus(*status));
    Check(again.ok() && *again == *status, "a status does not read back as written");
  } else {
    Check(status.error().rfind("tessera.io/mig-recut-status", 0) == 0,
          "a refused status does not name its annotation");
  }

  auto words = MigRecutLayoutWords(text, "layout");
  if (words.ok()) {
    std::string joined;
    for (const std::string& w : *words) joined += (joined.empty() ? "" : " ") + w;
    auto again = MigRecutLayoutWords(joined, "layout");
    Check(again.ok() && *again == *words, "layout words do not read back as joined");
  } else {
    Check(words.error().rfind("layout=\"", 0) == 0, "a refused layout does not name its input");
  }
  return 0;
}
