// deploy/grafana-dashboard.json against what tesserad exports: the file must be well-formed JSON
// (checked by the small strict parser below; the project takes no JSON library for a test), every
// `tessera_...` name in any of its strings (queries, template variables) must be a family that
// RenderMetrics in src/daemon/ctl_door.cc begins, and the panels the README promises must be there.
// Both files are read from the source tree at test time (TESSERA_SOURCE_DIR), so renaming a family
// without the dashboard, or the other way round, fails here.
#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace {

std::string ReadSource(const std::string& relative) {
  std::ifstream in(std::string(TESSERA_SOURCE_DIR) + "/" + relative);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A strict JSON reader (RFC 8259) that keeps only what the checks need: every string value (not
// object keys) with the key it belongs to. Stops at the first error with its offset and what was
// expected there.
class JsonStrings {
 public:
  struct Value {
    std::string key;   // the nearest enclosing object key ("" at the top)
    std::string text;  // the string, unescaped (\uXXXX outside ASCII is kept escaped)
  };

  explicit JsonStrings(const std::string& text) : s_(text) {
    SkipSpace();
    if (ParseValue("", 0)) {
      SkipSpace();
      if (pos_ != s_.size()) Fail("end of input after the top-level value");
    }
  }
  const std::optional<std::string>& error() const { return error_; }
  const std::vector<Value>& strings() const { return strings_; }

 private:
  bool Fail(const std::string& expected) {
    if (!error_) {
      error_ = "offset " + std::to_string(pos_) + ": expected " + expected + ", found " +
               (pos_ < s_.size() ? "'" + s_.substr(pos_, 12) + "'" : std::string("end of input"));
    }
    return false;
  }
  void SkipSpace() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) {
      ++pos_;
    }
  }
  bool Literal(const std::string& word) {
    if (s_.compare(pos_, word.size(), word) != 0) return Fail(word);
    pos_ += word.size();
    return true;
  }
  bool ParseString(std::string* out) {
    if (pos_ >= s_.size() || s_[pos_] != '"') return Fail("'\"'");
    ++pos_;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      const unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c < 0x20) return Fail("no control character inside a string");
      if (c != '\\') {
        *out += s_[pos_++];
        continue;
      }
      if (++pos_ >= s_.size()) return Fail("an escape");
      const char e = s_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          *out += e;
          break;
        case 'b':
        case 'f':
        case 'n':
        case 'r':
        case 't':
          *out += ' ';
          break;
        case 'u':
          for (int i = 0; i < 4; ++i) {
            if (pos_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[pos_]))) {
              return Fail("4 hex digits after \\u");
            }
            ++pos_;
          }
          *out += '?';
          break;
        default:
          --pos_;
          return Fail("one of \" \\ / b f n r t u after a backslash");
      }
    }
    if (pos_ >= s_.size()) return Fail("the closing '\"' of a string");
    ++pos_;
    return true;
  }
  bool ParseNumber() {
    const size_t start = pos_;
    if (s_[pos_] == '-') ++pos_;
    auto digits = [&] {
      const size_t from = pos_;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
      return pos_ - from;
    };
    if (pos_ < s_.size() && s_[pos_] == '0') {
      ++pos_;
    } else if (digits() == 0) {
      return Fail("a digit");
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (digits() == 0) return Fail("a digit after '.'");
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (digits() == 0) return Fail("a digit in the exponent");
    }
    return pos_ > start;
  }
  bool ParseValue(const std::string& key, int depth) {
    if (depth > 64) return Fail("nesting shallower than 64");
    if (pos_ >= s_.size()) return Fail("a value");
    const char c = s_[pos_];
    if (c == '"') {
      Value v{key, ""};
      if (!ParseString(&v.text)) return false;
      strings_.push_back(std::move(v));
      return true;
    }
    if (c == '{') {
      ++pos_;
      SkipSpace();
      if (pos_ < s_.size() && s_[pos_] == '}') return ++pos_, true;
      for (;;) {
        SkipSpace();
        std::string member;
        if (!ParseString(&member)) return false;
        SkipSpace();
        if (pos_ >= s_.size() || s_[pos_] != ':') return Fail("':' after an object key");
        ++pos_;
        SkipSpace();
        if (!ParseValue(member, depth + 1)) return false;
        SkipSpace();
        if (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
          continue;
        }
        if (pos_ < s_.size() && s_[pos_] == '}') return ++pos_, true;
        return Fail("',' or '}' in an object");
      }
    }
    if (c == '[') {
      ++pos_;
      SkipSpace();
      if (pos_ < s_.size() && s_[pos_] == ']') return ++pos_, true;
      for (;;) {
        SkipSpace();
        if (!ParseValue(key, depth + 1)) return false;
        SkipSpace();
        if (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
          continue;
        }
        if (pos_ < s_.size() && s_[pos_] == ']') return ++pos_, true;
        return Fail("',' or ']' in an array");
      }
    }
    if (c == 't') return Literal("true");
    if (c == 'f') return Literal("false");
    if (c == 'n') return Literal("null");
    if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) return ParseNumber();
    return Fail("a value (string, number, object, array, true, false or null)");
  }

  const std::string& s_;
  size_t pos_ = 0;
  std::optional<std::string> error_;
  std::vector<Value> strings_;
};

// Every family name RenderMetrics begins: family("tessera_...", ...) in ctl_door.cc.
std::set<std::string> ExportedFamilies() {
  const std::string source = ReadSource("src/daemon/ctl_door.cc");
  std::set<std::string> out;
  const std::regex family(R"(family\("(tessera_[a-z0-9_]+)\")");
  for (std::sregex_iterator it(source.begin(), source.end(), family), end; it != end; ++it) {
    out.insert((*it)[1].str());
  }
  return out;
}

// Every tessera_... name in `text`.
std::set<std::string> NamesIn(const std::string& text) {
  std::set<std::string> out;
  const std::regex name(R"(\btessera_[a-z0-9_]+)");
  for (std::sregex_iterator it(text.begin(), text.end(), name), end; it != end; ++it) {
    out.insert(it->str());
  }
  return out;
}

TEST(JsonStringsTest, AcceptsJsonAndRefusesWhatIsNot) {
  JsonStrings ok(R"( {"a": [1, -2.5e3, true, null, {"expr": "x\"y\u00e9"}], "b": {}} )");
  ASSERT_FALSE(ok.error()) << *ok.error();
  ASSERT_EQ(ok.strings().size(), 1u);
  EXPECT_EQ(ok.strings()[0].key, "expr");
  EXPECT_EQ(ok.strings()[0].text, "x\"y?");
  for (const char* bad : {"{\"a\": 1,}", "[1 2]", "{\"a\" 1}", "\"tab\there\"", "01", "{} {}",
                          "[tru]", "{\"a\": \"open}", "", "{'a': 1}"}) {
    JsonStrings j(bad);
    EXPECT_TRUE(j.error().has_value()) << "accepted: " << bad;
  }
  JsonStrings trailing("{\"a\": 1,}");
  EXPECT_NE(trailing.error()->find("offset 8"), std::string::npos) << *trailing.error();
}

TEST(GrafanaDashboardTest, ParsesAndQueriesOnlyExportedFamilies) {
  const std::string path = "deploy/grafana-dashboard.json";
  const std::string text = ReadSource(path);
  ASSERT_FALSE(text.empty()) << path << " is missing or empty under " << TESSERA_SOURCE_DIR;
  JsonStrings json(text);
  ASSERT_FALSE(json.error()) << path << " is not valid JSON: " << *json.error();

  const std::set<std::string> exported = ExportedFamilies();
  ASSERT_GE(exported.size(), 20u) << "could not read the families out of src/daemon/ctl_door.cc";
  std::set<std::string> used;
  int queries = 0;
  for (const JsonStrings::Value& v : json.strings()) {
    if (v.key == "expr") ++queries;
    for (const std::string& name : NamesIn(v.text)) {
      used.insert(name);
      EXPECT_TRUE(exported.count(name))
          << path << ": \"" << v.key << "\": \"" << v.text << "\" uses " << name
          << ", which RenderMetrics (src/daemon/ctl_door.cc) "
             "does not export";
    }
  }
  EXPECT_GE(queries, 12) << path << " has too few panel queries (\"expr\")";
  // The panels the README describes: memory used vs limit, compute target vs achieved, token wait
  // and grants, OOM refusals, processes, daemon health.
  for (const char* needed :
       {"tessera_container_memory_used_bytes", "tessera_container_memory_limit_bytes",
        "tessera_container_compute_target_percent", "tessera_container_compute_achieved_percent",
        "tessera_container_token_wait_seconds_total", "tessera_container_token_grants_total",
        "tessera_container_oom_refusals_total", "tessera_container_processes", "tessera_processes",
        "tessera_up", "tessera_arbiter_beat_age_seconds"}) {
    EXPECT_TRUE(used.count(needed)) << path << " has no query on " << needed;
  }
}

}  // namespace
