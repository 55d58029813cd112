// A parser for the subset of YAML that Tessera's configuration files use, into a small tree of
// YamlNode values that remember where each came from (line and column) for error messages.
//
// Supported: block mappings (`key: value`), block sequences (`- item`, also directly under a key at
// the key's indentation), nesting by indentation with spaces, plain, 'single-quoted' and
// "double-quoted" scalars (double quotes take the escapes \\ \" \/ \0 \a \b \t \n \v \f \r \e
// \xHH \uHHHH \UHHHHHHHH), comments (`#` at the start of a line or after whitespace), flow
// sequences of scalars on one line (`[a, "b", 'c']`), one leading `---` line, CRLF line endings.
//
// Refused, with an error `FILE:LINE:COL: message`: anchors (&), aliases (*), tags (!), flow
// mappings ({}), nested flow sequences, block scalars (| >), complex keys (?), directives (%),
// more than one document (a second `---`, or `...`), tabs in indentation, duplicate keys,
// multi-line scalars, `key: a: b` on one line, control characters, nesting deeper than 64 levels.
// Scalars stay text: the caller decides what "true", "2ms" or "010" mean.
//
// Pure function on a string: no I/O (reading the file is the caller's job), no global state.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace tessera::config {

// A position in the file, both 1-based; column counts bytes.
struct Mark {
  int line = 0;
  int column = 0;
};

struct YamlEntry;

struct YamlNode {
  enum class Kind {
    kNull,      // nothing: an empty document, or `key:` with no value
    kScalar,    // `scalar` holds the text
    kMapping,   // `entries` in file order, keys unique
    kSequence,  // `items` in file order
  };
  Kind kind = Kind::kNull;
  Mark mark;               // where the value starts (for kNull: just after the key's ':')
  std::string scalar;      // kScalar: quotes removed, escapes decoded
  bool quoted = false;     // kScalar: it was written in quotes
  std::vector<YamlEntry> entries;
  std::vector<YamlNode> items;

  // The entry with key `key` of a mapping, or nullptr.
  const YamlEntry* Find(std::string_view key) const;
};

struct YamlEntry {
  std::string key;
  Mark key_mark;
  YamlNode value;
};

// "scalar", "mapping", "sequence" or "nothing", for messages.
std::string_view YamlKindName(YamlNode::Kind kind);

// Parses `text`. `file_name` starts every error message: "tesserad.yaml:3:7: tags (!) are not ...".
Result<YamlNode> ParseYaml(std::string_view text, std::string_view file_name);

}  // namespace tessera::config
