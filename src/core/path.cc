// Absolute-path checks for settings. Pure functions on text; nothing is looked up on disk.
#include "core/path.h"

#include "core/text.h"

namespace tessera {

Result<std::string> ParseAbsolutePath(std::string_view text, std::string_view name,
                                      size_t max_bytes, std::string_view expected,
                                      std::string_view too_long) {
  auto fail = [&](std::string_view reason) {
    return Result<std::string>::Error(InputError(name, text, reason, expected));
  };
  if (text.empty()) {
    return fail("empty value");
  }
  if (text.find('\0') != std::string_view::npos) {
    return fail("contains a NUL byte");
  }
  if (text.front() != '/') {
    return fail("not an absolute path");
  }
  if (text.size() > max_bytes) {
    return fail(std::to_string(text.size()) + " bytes " + std::string(too_long));
  }
  return std::string(text);
}

Result<std::string> ParseSocketPath(std::string_view text, std::string_view name) {
  return ParseAbsolutePath(
      text, name, kMaxSocketPathBytes,
      "an absolute path of at most 107 bytes, such as /run/tessera/tessera.sock",
      "is too long for a Unix socket address (sun_path holds 107 and a NUL)");
}

Result<std::string> ParseLibraryPath(std::string_view text, std::string_view name) {
  return ParseAbsolutePath(
      text, name, kMaxLibraryPathBytes,
      "an absolute path to the library, such as /usr/lib/x86_64-linux-gnu/libcuda.so.1",
      "is longer than PATH_MAX allows");
}

Result<std::string> ParseDirectoryPath(std::string_view text, std::string_view name) {
  return ParseAbsolutePath(text, name, kMaxPathBytes,
                           "an absolute path to a directory, such as /run/tessera/ctl",
                           "is longer than PATH_MAX allows");
}

}  // namespace tessera
