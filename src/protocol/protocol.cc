// Parsing and formatting of tesserad protocol lines (see protocol.h). Validates every token.
#include "protocol/protocol.h"

#include <cctype>

namespace tessera::protocol {
namespace {

bool ValidKey(const std::string& k) {
  if (k.empty() || k.size() > 32) return false;
  for (char c : k) {
    if (!(c >= 'a' && c <= 'z') && c != '_') return false;
  }
  return true;
}

bool ValidValue(const std::string& v) {
  if (v.empty() || v.size() > 512) return false;
  for (char c : v) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != ',' &&
        c != ':' && c != '/' && c != '+' && c != '-') {
      return false;
    }
  }
  return true;
}

std::string Printable(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, 80)) {
    out += std::isprint(static_cast<unsigned char>(c)) ? c : '?';
  }
  return out;
}

}  // namespace

Result<Message> ParseMessage(const std::string& line) {
  Message m;
  size_t pos = 0;
  auto next = [&]() -> std::string {
    const size_t end = line.find(' ', pos);
    std::string token = line.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    pos = end == std::string::npos ? line.size() + 1 : end + 1;
    return token;
  };
  m.verb = next();
  if (m.verb.empty() || m.verb.size() > 16) {
    return Result<Message>::Error("protocol: request \"" + Printable(line) +
                                  "\" does not start with a verb");
  }
  for (char c : m.verb) {
    if (c < 'A' || c > 'Z') {
      return Result<Message>::Error("protocol: verb \"" + Printable(m.verb) +
                                    "\" must be upper-case letters");
    }
  }
  while (pos <= line.size()) {
    const std::string token = next();
    const size_t eq = token.find('=');
    if (eq == std::string::npos) {
      return Result<Message>::Error("protocol: token \"" + Printable(token) +
                                    "\" is not key=value");
    }
    const std::string key = token.substr(0, eq), value = token.substr(eq + 1);
    if (!ValidKey(key)) {
      return Result<Message>::Error("protocol: key \"" + Printable(key) +
                                    "\" must be 1-32 characters of [a-z_]");
    }
    if (!ValidValue(value)) {
      return Result<Message>::Error("protocol: value of " + key + " (\"" + Printable(value) +
                                    "\") must be 1-512 characters of [A-Za-z0-9_.,:/+-]");
    }
    if (!m.fields.emplace(key, value).second) {
      return Result<Message>::Error("protocol: key " + key + " appears twice");
    }
  }
  return m;
}

std::string FormatMessage(const Message& message) {
  std::string out = message.verb;
  for (const auto& [k, v] : message.fields) out += " " + k + "=" + v;
  return out;
}

}  // namespace tessera::protocol
