// CommitLog: the node annotation `tessera.io/assignment-log`, which only extenders read and write.
// Every bind commits its decision on the node by rewriting this annotation with the node's
// resourceVersion as precondition, so two replicas (or a replica and its restarted self) can never
// both commit on one node from the same picture: the second one's write fails with 409 Conflict.
// The log names the recent commits, so the loser knows which pods it has not seen yet and reads
// them before deciding again (or lists every pod when the log no longer reaches back far enough).
//
//   {"version":1,"seq":43,"trimmed":0,
//    "recent":[{"seq":42,"uid":"5f1c...","pod":"default/web-1"},{"seq":43,...}]}
//
// `seq` is the newest commit's seq (each assignment's own `seq`), `recent` at most kRecent
// commits, oldest first; `trimmed` the newest seq dropped from it (0: none ever was). Parsing and
// writing only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace tessera::extender {

inline constexpr char kCommitLogAnnotation[] = "tessera.io/assignment-log";

struct CommitLog {
  struct Entry {
    uint64_t seq = 0;
    std::string uid;
    std::string pod;  // ns/name
    bool operator==(const Entry&) const = default;
  };
  static constexpr size_t kRecent = 16;

  uint64_t seq = 0;
  uint64_t trimmed = 0;
  std::vector<Entry> recent;

  // Appends a commit (its seq must exceed `seq`), dropping the oldest past kRecent.
  void Append(Entry entry);
  // True when every commit after `verified` is in `recent` (none was trimmed away).
  bool Covers(uint64_t verified) const { return trimmed <= verified; }
  bool operator==(const CommitLog&) const = default;
};

// Errors name the annotation, the key and the value.
Result<CommitLog> ParseCommitLog(std::string_view text);
std::string WriteCommitLog(const CommitLog& log);

}  // namespace tessera::extender
