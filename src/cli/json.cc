// JsonValue::Parse: recursive descent with a depth bound.
#include "cli/json.h"

#include <cstdlib>

namespace tessera {

class JsonParser {
 public:
  explicit JsonParser(std::string_view text) : text_(text) {}

  Result<JsonValue> Document() {
    JsonValue v;
    if (!Value(&v, 0)) return Result<JsonValue>::Error(error_);
    Space();
    if (pos_ != text_.size()) return Fail("unexpected text after the document");
    return v;
  }

 private:
  Result<JsonValue> Fail(const std::string& why) {
    return Result<JsonValue>::Error("JSON at byte " + std::to_string(pos_) + ": " + why);
  }
  bool Error(const std::string& why) {
    if (error_.empty()) error_ = "JSON at byte " + std::to_string(pos_) + ": " + why;
    return false;
  }
  void Space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\t' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return Error("expected " + std::string(word));
    pos_ += word.size();
    return true;
  }
  bool String(std::string* out) {
    if (pos_ >= text_.size() || text_[pos_] != '"') return Error("expected a string");
    ++pos_;
    while (pos_ < text_.size() && text_[pos_] != '"') {
      char c = text_[pos_++];
      if (c == '\\') {
        if (pos_ >= text_.size()) return Error("unterminated escape");
        const char e = text_[pos_++];
        switch (e) {
          case 'n':
            c = '\n';
            break;
          case 't':
            c = '\t';
            break;
          case 'r':
            c = '\r';
            break;
          case 'b':
            c = '\b';
            break;
          case 'f':
            c = '\f';
            break;
          case 'u':
            if (pos_ + 4 > text_.size()) return Error("short \\u escape");
            pos_ += 4;
            c = '?';
            break;
          case '"':
          case '\\':
          case '/':
            c = e;
            break;
          default:
            return Error("unknown escape");
        }
      }
      out->push_back(c);
    }
    if (pos_ >= text_.size()) return Error("unterminated string");
    ++pos_;
    return true;
  }
  bool Value(JsonValue* v, int depth) {
    if (depth > 64) return Error("nested too deeply");
    Space();
    if (pos_ >= text_.size()) return Error("unexpected end");
    const char c = text_[pos_];
    if (c == '{') {
      v->kind_ = JsonValue::Kind::kObject;
      ++pos_;
      Space();
      if (pos_ < text_.size() && text_[pos_] == '}') {
        ++pos_;
        return true;
      }
      for (;;) {
        Space();
        std::string key;
        if (!String(&key)) return false;
        Space();
        if (pos_ >= text_.size() || text_[pos_] != ':') return Error("expected ':'");
        ++pos_;
        if (!Value(&v->object_[key], depth + 1)) return false;
        Space();
        if (pos_ < text_.size() && text_[pos_] == ',') {
          ++pos_;
          continue;
        }
        if (pos_ < text_.size() && text_[pos_] == '}') {
          ++pos_;
          return true;
        }
        return Error("expected ',' or '}'");
      }
    }
    if (c == '[') {
      v->kind_ = JsonValue::Kind::kArray;
      ++pos_;
      Space();
      if (pos_ < text_.size() && text_[pos_] == ']') {
        ++pos_;
        return true;
      }
      for (;;) {
        v->array_.emplace_back();
        if (!Value(&v->array_.back(), depth + 1)) return false;
        Space();
        if (pos_ < text_.size() && text_[pos_] == ',') {
          ++pos_;
          continue;
        }
        if (pos_ < text_.size() && text_[pos_] == ']') {
          ++pos_;
          return true;
        }
        return Error("expected ',' or ']'");
      }
    }
    if (c == '"') {
      v->kind_ = JsonValue::Kind::kString;
      return String(&v->string_);
    }
    if (c == 't' || c == 'f') {
      v->kind_ = JsonValue::Kind::kBool;
      v->boolean_ = c == 't';
      return Literal(c == 't' ? "true" : "false");
    }
    if (c == 'n') return Literal("null");
    const size_t start = pos_;
    while (pos_ < text_.size() &&
           (std::isdigit(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '-' ||
            text_[pos_] == '+' || text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
    }
    if (start == pos_) return Error("unexpected character");
    const std::string number(text_.substr(start, pos_ - start));
    char* end = nullptr;
    v->number_ = std::strtod(number.c_str(), &end);
    if (*end != '\0') return Error("bad number " + number);
    v->kind_ = JsonValue::Kind::kNumber;
    return true;
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::string error_;
};

const JsonValue& JsonValue::operator[](const std::string& key) const {
  static const JsonValue kNull;
  auto it = object_.find(key);
  return it == object_.end() ? kNull : it->second;
}

Result<JsonValue> JsonValue::Parse(std::string_view text) {
  if (text.size() > (16u << 20)) return Result<JsonValue>::Error("JSON document over 16 MiB");
  return JsonParser(text).Document();
}

}  // namespace tessera
