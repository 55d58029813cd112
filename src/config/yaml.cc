// The YAML-subset parser: splits the text into lines, then reads blocks by indentation with a
// recursive descent over those lines. Strings in, tree out; no I/O, no global state.
#include "config/yaml.h"

#include <optional>

#include "core/text.h"

namespace tessera::config {
namespace {

constexpr int kMaxDepth = 64;

// One line that holds content, after its indentation.
struct Line {
  int number = 0;            // 1-based
  int indent = 0;            // columns before `content` (may grow when a "- " item is entered)
  std::string_view content;  // never empty, never a comment-only line
};

bool IsBlank(char c) { return c == ' ' || c == '\t'; }

// Thrown nowhere: every function returns this alongside its value.
struct Error {
  Mark mark;
  std::string message;
};

class Parser {
 public:
  Parser(std::string_view text, std::string_view file_name)
      : text_(text), file_name_(file_name) {}

  Result<YamlNode> Run() {
    if (!SplitLines()) {
      return Fail();
    }
    if (lines_.empty()) {
      YamlNode empty;
      empty.mark = {1, 1};
      return empty;
    }
    std::optional<YamlNode> root = ParseBlock(lines_[0].indent, 0);
    if (!root.has_value()) {
      return Fail();
    }
    if (pos_ < lines_.size()) {
      const Line& line = lines_[pos_];
      SetError(line, 0, "unexpected indentation; this line does not line up with any block above");
      return Fail();
    }
    return std::move(*root);
  }

 private:
  Result<YamlNode> Fail() const {
    return Result<YamlNode>::Error(std::string(file_name_) + ":" +
                                   std::to_string(error_.mark.line) + ":" +
                                   std::to_string(error_.mark.column) + ": " + error_.message);
  }

  void SetError(int line, int column, std::string message) {
    error_ = Error{{line, column}, std::move(message)};
  }
  // An error at byte `offset` of `line`'s content.
  void SetError(const Line& line, size_t offset, std::string message) {
    SetError(line.number, line.indent + static_cast<int>(offset) + 1, std::move(message));
  }

  // Fills lines_ with the lines that hold content; false on a refused character or line.
  bool SplitLines() {
    std::string_view rest = text_;
    if (rest.substr(0, 3) == "\xef\xbb\xbf") {
      rest.remove_prefix(3);  // a UTF-8 byte order mark
    }
    int number = 0;
    bool seen_content = false;
    while (!rest.empty()) {
      ++number;
      const size_t newline = rest.find('\n');
      std::string_view line = rest.substr(0, newline);
      rest = newline == std::string_view::npos ? std::string_view() : rest.substr(newline + 1);
      if (!line.empty() && line.back() == '\r') {
        line.remove_suffix(1);
      }
      for (size_t i = 0; i < line.size(); ++i) {
        const auto byte = static_cast<unsigned char>(line[i]);
        if ((byte < 0x20 && line[i] != '\t') || byte == 0x7f) {
          char hex[8];
          static constexpr char kHex[] = "0123456789abcdef";
          hex[0] = '0', hex[1] = 'x', hex[2] = kHex[byte >> 4], hex[3] = kHex[byte & 0xf];
          hex[4] = '\0';
          SetError(number, static_cast<int>(i) + 1,
                   std::string("control character ") + hex + " is not allowed");
          return false;
        }
      }
      size_t indent = 0;
      while (indent < line.size() && line[indent] == ' ') {
        ++indent;
      }
      size_t first = indent;
      while (first < line.size() && IsBlank(line[first])) {
        ++first;
      }
      if (first == line.size() || line[first] == '#') {
        continue;  // blank or comment-only
      }
      if (first != indent) {
        SetError(number, static_cast<int>(indent) + 1,
                 "tab used for indentation; indent with spaces");
        return false;
      }
      const std::string_view content = line.substr(indent);
      if (indent == 0 && content.front() == '%') {
        SetError(number, 1, "directives (%) are not supported");
        return false;
      }
      if (indent == 0 && IsDocumentMarker(content, "---")) {
        if (seen_content || document_started_) {
          SetError(number, 1, "a second document ('---') is not supported; a file is one document");
          return false;
        }
        document_started_ = true;
        if (!AfterMarkerIsEmpty(content)) {
          SetError(number, 5, "content after '---' is not supported; start it on the next line");
          return false;
        }
        continue;
      }
      if (indent == 0 && IsDocumentMarker(content, "...")) {
        SetError(number, 1, "document end markers ('...') are not supported; a file is one document");
        return false;
      }
      seen_content = true;
      lines_.push_back(Line{number, static_cast<int>(indent), content});
    }
    return true;
  }

  static bool IsDocumentMarker(std::string_view content, std::string_view marker) {
    return content.substr(0, 3) == marker && (content.size() == 3 || IsBlank(content[3]));
  }
  static bool AfterMarkerIsEmpty(std::string_view content) {
    size_t i = 3;
    while (i < content.size() && IsBlank(content[i])) {
      ++i;
    }
    return i == content.size() || content[i] == '#';
  }

  static bool IsSequenceItem(std::string_view content) {
    return content.front() == '-' && (content.size() == 1 || IsBlank(content[1]));
  }

  // Where a comment starts in `content` from `from` on (a '#' at `from` or after a blank), or npos.
  static size_t CommentStart(std::string_view content, size_t from) {
    for (size_t i = from; i < content.size(); ++i) {
      if (content[i] == '#' && (i == from || IsBlank(content[i - 1]))) {
        return i;
      }
    }
    return std::string_view::npos;
  }

  // True when only blanks and maybe a comment follow `from`.
  static bool RestIsEmpty(std::string_view content, size_t from) {
    while (from < content.size() && IsBlank(content[from])) {
      ++from;
    }
    return from == content.size() || content[from] == '#';
  }

  // The message for a value that starts with an indicator this subset refuses, or empty.
  static std::string RefusedIndicator(std::string_view text) {
    switch (text.front()) {
      case '&': return "anchors (&) are not supported";
      case '*': return "aliases (*) are not supported";
      case '!': return "tags (!) are not supported";
      case '{': return "flow mappings ({...}) are not supported; use a block mapping";
      case '|':
      case '>': return "block scalars (| and >) are not supported; use a quoted string";
      case '%':
      case '@':
      case '`': return std::string("'") + text.front() + "' is a reserved indicator; quote the value";
      case ',':
      case ']':
      case '}': return std::string("unexpected '") + text.front() + "'; quote the value";
      case '?':
        if (text.size() == 1 || IsBlank(text[1])) return "complex keys (?) are not supported";
        return {};
      case '-':
        if (text.size() == 1 || IsBlank(text[1])) {
          return "a sequence item cannot start on the line of its key; put it on the next line";
        }
        return {};
      case ':':
        if (text.size() == 1 || IsBlank(text[1])) return "missing key before ':'";
        return {};
      default: return {};
    }
  }

  // Reads a quoted scalar starting at content[*at] (a quote); leaves *at after the closing quote.
  bool ReadQuoted(const Line& line, size_t* at, std::string* out) {
    const std::string_view s = line.content;
    const char quote = s[*at];
    const size_t open = *at;
    size_t i = open + 1;
    out->clear();
    while (i < s.size()) {
      const char c = s[i];
      if (c == quote) {
        if (quote == '\'' && i + 1 < s.size() && s[i + 1] == '\'') {
          out->push_back('\'');
          i += 2;
          continue;
        }
        *at = i + 1;
        return true;
      }
      if (c == '\\' && quote == '"') {
        if (i + 1 >= s.size()) {
          break;
        }
        const char e = s[i + 1];
        int hex_digits = 0;
        switch (e) {
          case '\\': out->push_back('\\'); break;
          case '"': out->push_back('"'); break;
          case '/': out->push_back('/'); break;
          case ' ': out->push_back(' '); break;
          case '0': out->push_back('\0'); break;
          case 'a': out->push_back('\a'); break;
          case 'b': out->push_back('\b'); break;
          case 't': out->push_back('\t'); break;
          case 'n': out->push_back('\n'); break;
          case 'v': out->push_back('\v'); break;
          case 'f': out->push_back('\f'); break;
          case 'r': out->push_back('\r'); break;
          case 'e': out->push_back('\x1b'); break;
          case 'x': hex_digits = 2; break;
          case 'u': hex_digits = 4; break;
          case 'U': hex_digits = 8; break;
          default:
            SetError(line, i, std::string("unknown escape '\\") + e + "' in a double-quoted string");
            return false;
        }
        i += 2;
        if (hex_digits > 0) {
          uint32_t code = 0;
          for (int d = 0; d < hex_digits; ++d) {
            const char h = i < s.size() ? s[i] : '\0';
            int v = -1;
            if (h >= '0' && h <= '9') v = h - '0';
            if (h >= 'a' && h <= 'f') v = h - 'a' + 10;
            if (h >= 'A' && h <= 'F') v = h - 'A' + 10;
            if (v < 0) {
              SetError(line, i, "expected " + std::to_string(hex_digits) +
                                    " hex digits in an escape");
              return false;
            }
            code = code * 16 + static_cast<uint32_t>(v);
            ++i;
          }
          if (code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) {
            SetError(line, i - hex_digits, "escape names no Unicode character");
            return false;
          }
          AppendUtf8(code, out);
        }
        continue;
      }
      out->push_back(c);
      ++i;
    }
    SetError(line, open, "quoted string not closed on this line (multi-line strings are not "
                         "supported)");
    return false;
  }

  static void AppendUtf8(uint32_t code, std::string* out) {
    if (code < 0x80) {
      out->push_back(static_cast<char>(code));
    } else if (code < 0x800) {
      out->push_back(static_cast<char>(0xc0 | (code >> 6)));
      out->push_back(static_cast<char>(0x80 | (code & 0x3f)));
    } else if (code < 0x10000) {
      out->push_back(static_cast<char>(0xe0 | (code >> 12)));
      out->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (code & 0x3f)));
    } else {
      out->push_back(static_cast<char>(0xf0 | (code >> 18)));
      out->push_back(static_cast<char>(0x80 | ((code >> 12) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (code & 0x3f)));
    }
  }

  Mark MarkAt(const Line& line, size_t offset) const {
    return {line.number, line.indent + static_cast<int>(offset) + 1};
  }

  // Reads a flow sequence starting at content[at] == '['; nothing but a comment may follow it.
  std::optional<YamlNode> ReadFlowSequence(const Line& line, size_t at) {
    const std::string_view s = line.content;
    YamlNode node;
    node.kind = YamlNode::Kind::kSequence;
    node.mark = MarkAt(line, at);
    size_t i = at + 1;
    for (;;) {
      while (i < s.size() && IsBlank(s[i])) {
        ++i;
      }
      if (i >= s.size() || s[i] == '#') {
        SetError(line, at, "flow sequence not closed on this line (write it on one line)");
        return std::nullopt;
      }
      if (s[i] == ']') {
        ++i;
        break;
      }
      YamlNode item;
      item.kind = YamlNode::Kind::kScalar;
      item.mark = MarkAt(line, i);
      if (s[i] == '"' || s[i] == '\'') {
        item.quoted = true;
        if (!ReadQuoted(line, &i, &item.scalar)) {
          return std::nullopt;
        }
      } else if (s[i] == '[' || s[i] == '{') {
        SetError(line, i, "nested flow collections are not supported");
        return std::nullopt;
      } else if (s[i] == ',') {
        SetError(line, i, "empty item in a flow sequence");
        return std::nullopt;
      } else {
        if (std::string refused = RefusedIndicator(s.substr(i)); !refused.empty()) {
          SetError(line, i, refused);
          return std::nullopt;
        }
        const size_t start = i;
        while (i < s.size() && s[i] != ',' && s[i] != ']' && !(s[i] == '#' && IsBlank(s[i - 1]))) {
          if (s[i] == '[' || s[i] == '{' || s[i] == '}') {
            SetError(line, i, std::string("'") + s[i] + "' inside a flow sequence item; quote it");
            return std::nullopt;
          }
          if (s[i] == ':' && (i + 1 == s.size() || IsBlank(s[i + 1]) || s[i + 1] == ',' ||
                              s[i + 1] == ']')) {
            SetError(line, i, "mappings inside a flow sequence are not supported");
            return std::nullopt;
          }
          ++i;
        }
        item.scalar = std::string(TrimSpaces(s.substr(start, i - start)));
      }
      node.items.push_back(std::move(item));
      while (i < s.size() && IsBlank(s[i])) {
        ++i;
      }
      if (i < s.size() && s[i] == ',') {
        ++i;
        continue;
      }
      if (i < s.size() && s[i] == ']') {
        ++i;
        break;
      }
      if (i >= s.size() || s[i] == '#') {
        SetError(line, at, "flow sequence not closed on this line (write it on one line)");
      } else {
        SetError(line, i, "expected ',' or ']' in a flow sequence");
      }
      return std::nullopt;
    }
    if (!RestIsEmpty(s, i)) {
      while (IsBlank(s[i])) ++i;
      SetError(line, i, "unexpected text after the flow sequence");
      return std::nullopt;
    }
    return node;
  }

  // Reads the value that fills the rest of `line` from content[at] (not blank, not a comment).
  std::optional<YamlNode> ReadInlineValue(const Line& line, size_t at) {
    const std::string_view s = line.content;
    if (s[at] == '[') {
      return ReadFlowSequence(line, at);
    }
    YamlNode node;
    node.kind = YamlNode::Kind::kScalar;
    node.mark = MarkAt(line, at);
    if (s[at] == '"' || s[at] == '\'') {
      node.quoted = true;
      size_t i = at;
      if (!ReadQuoted(line, &i, &node.scalar)) {
        return std::nullopt;
      }
      if (!RestIsEmpty(s, i)) {
        size_t j = i;
        while (IsBlank(s[j])) ++j;
        SetError(line, j, s[j] == ':' ? "a quoted key must be followed by ': ' (or ':' at the end)"
                                      : "unexpected text after the quoted value");
        return std::nullopt;
      }
      return node;
    }
    if (std::string refused = RefusedIndicator(s.substr(at)); !refused.empty()) {
      SetError(line, at, refused);
      return std::nullopt;
    }
    const size_t comment = CommentStart(s, at);
    const std::string_view text =
        TrimSpaces(s.substr(at, comment == std::string_view::npos ? std::string_view::npos
                                                                   : comment - at));
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] == ':' && (i + 1 == text.size() || IsBlank(text[i + 1]))) {
        SetError(line, at + i, "a value cannot hold ': ' (put a nested mapping on its own lines, "
                               "or quote the value)");
        return std::nullopt;
      }
    }
    node.scalar = std::string(text);
    return node;
  }

  // Finds the key of a mapping line. Returns false when the line is not a `key:` line (no error
  // set), true with *key, *value_at (offset after the ':') when it is; sets an error and returns
  // true with `failed` when the key is malformed.
  bool FindKey(const Line& line, std::string* key, size_t* value_at, bool* failed) {
    const std::string_view s = line.content;
    *failed = false;
    if (s.front() == '"' || s.front() == '\'') {
      size_t i = 0;
      std::string text;
      if (!ReadQuoted(line, &i, &text)) {
        *failed = true;
        return true;
      }
      size_t j = i;
      while (j < s.size() && IsBlank(s[j])) ++j;
      if (j < s.size() && s[j] == ':' && (j + 1 == s.size() || IsBlank(s[j + 1]))) {
        *key = std::move(text);
        *value_at = j + 1;
        return true;
      }
      return false;
    }
    if (s.front() == '[') {
      return false;
    }
    const size_t comment = CommentStart(s, 0);
    const size_t end = comment == std::string_view::npos ? s.size() : comment;
    for (size_t i = 0; i < end; ++i) {
      if (s[i] == ':' && (i + 1 == s.size() || IsBlank(s[i + 1]))) {
        const std::string_view text = TrimSpaces(s.substr(0, i));
        if (text.empty()) {
          SetError(line, i, "missing key before ':'");
          *failed = true;
          return true;
        }
        if (std::string refused = RefusedIndicator(text); !refused.empty()) {
          SetError(line, 0, refused);
          *failed = true;
          return true;
        }
        *key = std::string(text);
        *value_at = i + 1;
        return true;
      }
    }
    return false;
  }

  // Parses the block whose first line is lines_[pos_] at `indent`.
  std::optional<YamlNode> ParseBlock(int indent, int depth) {
    const Line& line = lines_[pos_];
    if (depth >= kMaxDepth) {
      SetError(line, 0, "nesting deeper than " + std::to_string(kMaxDepth) + " levels");
      return std::nullopt;
    }
    if (IsSequenceItem(line.content)) {
      return ParseSequence(indent, false, depth);
    }
    std::string key;
    size_t value_at = 0;
    bool failed = false;
    if (FindKey(line, &key, &value_at, &failed)) {
      if (failed) {
        return std::nullopt;
      }
      return ParseMapping(indent, depth);
    }
    // A lone scalar or flow sequence.
    std::optional<YamlNode> value = ReadInlineValue(line, 0);
    if (!value.has_value()) {
      return std::nullopt;
    }
    ++pos_;
    if (pos_ < lines_.size() && lines_[pos_].indent > indent) {
      SetError(lines_[pos_], 0, "unexpected indentation; a value cannot continue on the next line");
      return std::nullopt;
    }
    return value;
  }

  std::optional<YamlNode> ParseMapping(int indent, int depth) {
    YamlNode node;
    node.kind = YamlNode::Kind::kMapping;
    node.mark = MarkAt(lines_[pos_], 0);
    while (pos_ < lines_.size()) {
      const Line line = lines_[pos_];
      if (line.indent < indent) {
        break;
      }
      if (line.indent > indent) {
        SetError(line, 0, "unexpected indentation; expected a key at column " +
                              std::to_string(indent + 1));
        return std::nullopt;
      }
      if (IsSequenceItem(line.content)) {
        SetError(line, 0, "a sequence item where a key was expected");
        return std::nullopt;
      }
      YamlEntry entry;
      size_t value_at = 0;
      bool failed = false;
      if (!FindKey(line, &entry.key, &value_at, &failed)) {
        SetError(line, 0, "expected 'key: value' (a key followed by ': ')");
        return std::nullopt;
      }
      if (failed) {
        return std::nullopt;
      }
      entry.key_mark = MarkAt(line, 0);
      for (const YamlEntry& earlier : node.entries) {
        if (earlier.key == entry.key) {
          SetError(line, 0, "duplicate key " + QuoteValue(entry.key) + " (first at line " +
                                std::to_string(earlier.key_mark.line) + ")");
          return std::nullopt;
        }
      }
      ++pos_;
      size_t at = value_at;
      while (at < line.content.size() && IsBlank(line.content[at])) {
        ++at;
      }
      if (at < line.content.size() && line.content[at] != '#') {
        std::optional<YamlNode> value = ReadInlineValue(line, at);
        if (!value.has_value()) {
          return std::nullopt;
        }
        entry.value = std::move(*value);
        if (pos_ < lines_.size() && lines_[pos_].indent > indent) {
          SetError(lines_[pos_], 0,
                   "unexpected indentation; the value of " + QuoteValue(entry.key) +
                       " is already on its line (multi-line values are not supported)");
          return std::nullopt;
        }
      } else if (pos_ < lines_.size() && lines_[pos_].indent > indent) {
        std::optional<YamlNode> value = ParseBlock(lines_[pos_].indent, depth + 1);
        if (!value.has_value()) {
          return std::nullopt;
        }
        entry.value = std::move(*value);
      } else if (pos_ < lines_.size() && lines_[pos_].indent == indent &&
                 IsSequenceItem(lines_[pos_].content)) {
        std::optional<YamlNode> value = ParseSequence(indent, true, depth + 1);
        if (!value.has_value()) {
          return std::nullopt;
        }
        entry.value = std::move(*value);
      } else {
        entry.value.kind = YamlNode::Kind::kNull;
        entry.value.mark = MarkAt(line, value_at);
      }
      node.entries.push_back(std::move(entry));
    }
    return node;
  }

  // A block sequence at `indent`. `under_key`: it sits at its key's indentation, so a key line at
  // that indentation ends it instead of being an error.
  std::optional<YamlNode> ParseSequence(int indent, bool under_key, int depth) {
    YamlNode node;
    node.kind = YamlNode::Kind::kSequence;
    node.mark = MarkAt(lines_[pos_], 0);
    while (pos_ < lines_.size()) {
      Line& line = lines_[pos_];
      if (line.indent < indent) {
        break;
      }
      if (line.indent > indent) {
        SetError(line, 0, "unexpected indentation; expected '- ' at column " +
                              std::to_string(indent + 1));
        return std::nullopt;
      }
      if (!IsSequenceItem(line.content)) {
        if (under_key) {
          break;
        }
        SetError(line, 0, "expected a sequence item ('- ') at this indentation");
        return std::nullopt;
      }
      size_t at = 1;
      while (at < line.content.size() && IsBlank(line.content[at])) {
        ++at;
      }
      if (at == line.content.size() || line.content[at] == '#') {
        const Mark mark = MarkAt(line, 0);
        ++pos_;
        if (pos_ < lines_.size() && lines_[pos_].indent > indent) {
          std::optional<YamlNode> item = ParseBlock(lines_[pos_].indent, depth + 1);
          if (!item.has_value()) {
            return std::nullopt;
          }
          node.items.push_back(std::move(*item));
        } else {
          YamlNode empty;
          empty.mark = mark;
          node.items.push_back(std::move(empty));
        }
        continue;
      }
      // "- content": the content is a block of its own, indented to where it starts.
      line.indent += static_cast<int>(at);
      line.content.remove_prefix(at);
      std::optional<YamlNode> item = ParseBlock(line.indent, depth + 1);
      if (!item.has_value()) {
        return std::nullopt;
      }
      node.items.push_back(std::move(*item));
    }
    return node;
  }

  std::string_view text_;
  std::string_view file_name_;
  std::vector<Line> lines_;
  size_t pos_ = 0;
  bool document_started_ = false;
  Error error_;
};

}  // namespace

const YamlEntry* YamlNode::Find(std::string_view key) const {
  for (const YamlEntry& entry : entries) {
    if (entry.key == key) {
      return &entry;
    }
  }
  return nullptr;
}

std::string_view YamlKindName(YamlNode::Kind kind) {
  switch (kind) {
    case YamlNode::Kind::kNull: return "nothing";
    case YamlNode::Kind::kScalar: return "scalar";
    case YamlNode::Kind::kMapping: return "mapping";
    case YamlNode::Kind::kSequence: return "sequence";
  }
  return "unknown";
}

Result<YamlNode> ParseYaml(std::string_view text, std::string_view file_name) {
  return Parser(text, file_name).Run();
}

}  // namespace tessera::config
