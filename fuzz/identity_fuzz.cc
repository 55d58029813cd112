// libFuzzer target for what container identity reads: a /proc/PID/cgroup text, the OCI state a
// hook gets on stdin, and a record file tesserad reads back at start (a file in its own folder,
// still untrusted input). The first byte picks which. Invariants: no crash; a parsed cgroup file
// has only absolute paths; a parsed OCI state has a positive pid; a record file is either kept
// (and then written back as valid JSON) or removed.
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "daemon/identity.h"
#include "ocihook/oci_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: {
      auto entries = tessera::daemon::ParseProcCgroup(text);
      if (entries.ok()) {
        for (const tessera::daemon::CgroupEntry& e : *entries) {
          if (e.path.empty() || e.path[0] != '/') std::abort();
          if (e.hierarchy.find(':') == std::string::npos) std::abort();
        }
      }
      break;
    }
    case 1: {
      auto state = tessera::ocihook::ParseOciState(text);
      if (state.ok() && state->pid <= 0) std::abort();
      break;
    }
    default: {
      static const std::string dir = "/tmp/tessera-identity-fuzz-" + std::to_string(getpid());
      mkdir(dir.c_str(), 0700);
      const std::string file = dir + "/web";
      std::ofstream(file, std::ios::trunc) << text;
      tessera::daemon::IdentityBook book("/proc", dir);
      book.Load();
      struct stat st {};
      if (stat(file.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) std::abort();
      unlink(file.c_str());
      break;
    }
  }
  return 0;
}
