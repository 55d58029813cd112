// A small JSON reader for the CLI's own documents (the daemon's STATUS snapshot): objects, arrays,
// strings (\uXXXX escapes read as '?'), numbers as double, true/false/null.
// Depth and size are bounded; errors name the byte offset. Not a general-purpose library: it keeps
// object members in a std::map and numbers as double (exact up to 2^53, plenty for byte counts
// below 8 PiB).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace tessera {

class JsonValue {
 public:
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::kNull; }
  double number() const { return number_; }
  bool boolean() const { return boolean_; }
  const std::string& string() const { return string_; }
  const std::vector<JsonValue>& array() const { return array_; }
  // The member `key` of an object, or a null value.
  const JsonValue& operator[](const std::string& key) const;

  static Result<JsonValue> Parse(std::string_view text);

 private:
  friend class JsonParser;
  Kind kind_ = Kind::kNull;
  bool boolean_ = false;
  double number_ = 0;
  std::string string_;
  std::vector<JsonValue> array_;
  std::map<std::string, JsonValue> object_;
};

}  // namespace tessera
