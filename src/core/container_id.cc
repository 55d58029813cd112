// Container id validation. Pure functions; no I/O.
#include "core/container_id.h"

#include "core/text.h"

namespace tessera {
namespace {

constexpr std::string_view kContainerIdExpected =
    "1 to 64 characters from A-Z, a-z, 0-9, '_', '.' and '-', other than \".\" and \"..\"";

bool IsIdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-';
}

}  // namespace

bool IsValidContainerId(std::string_view id) {
  if (id.empty() || id.size() > kMaxContainerIdLength || id == "." || id == "..") {
    return false;
  }
  for (char c : id) {
    if (!IsIdChar(c)) {
      return false;
    }
  }
  return true;
}

Result<std::string> ParseContainerId(std::string_view text, std::string_view input_name) {
  auto fail = [&](const std::string& reason) {
    return Result<std::string>::Error(InputError(input_name, text, reason, kContainerIdExpected));
  };
  if (text.empty()) {
    return fail("empty value");
  }
  if (text.size() > kMaxContainerIdLength) {
    return fail(std::to_string(text.size()) + " characters is too long");
  }
  if (text == "." || text == "..") {
    return fail("not a container name but a directory name");
  }
  for (size_t i = 0; i < text.size(); ++i) {
    if (!IsIdChar(text[i])) {
      return fail("character " + std::to_string(i + 1) + " (" + QuoteValue(text.substr(i, 1)) +
                  ") is not allowed");
    }
  }
  return std::string(text);
}

}  // namespace tessera
