// The extenders' node commit log: parse, write, append. No I/O.
#include "k8s/extender/commit_log.h"

#include <nlohmann/json.hpp>

namespace tessera::extender {

namespace {

using nlohmann::json;

Result<CommitLog> Fail(const std::string& what) {
  return Result<CommitLog>::Error(std::string(kCommitLogAnnotation) + ": " + what);
}

bool Unsigned(const json& j, const char* key, uint64_t* out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_unsigned()) return false;
  *out = it->get<uint64_t>();
  return true;
}

}  // namespace

void CommitLog::Append(Entry entry) {
  seq = entry.seq;
  recent.push_back(std::move(entry));
  while (recent.size() > kRecent) {
    trimmed = recent.front().seq;
    recent.erase(recent.begin());
  }
}

Result<CommitLog> ParseCommitLog(std::string_view text) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Fail("is not a JSON object");
  uint64_t version = 0;
  if (!Unsigned(j, "version", &version) || version != 1) return Fail("version: expected 1");
  CommitLog log;
  if (!Unsigned(j, "seq", &log.seq)) return Fail("seq: expected a whole number");
  if (!Unsigned(j, "trimmed", &log.trimmed)) return Fail("trimmed: expected a whole number");
  auto recent = j.find("recent");
  if (recent == j.end() || !recent->is_array()) return Fail("recent: expected an array");
  for (const json& e : *recent) {
    CommitLog::Entry entry;
    if (!e.is_object() || !Unsigned(e, "seq", &entry.seq) || !e.contains("uid") ||
        !e["uid"].is_string() || !e.contains("pod") || !e["pod"].is_string()) {
      return Fail("recent: expected entries {\"seq\": N, \"uid\": \"...\", \"pod\": \"ns/name\"}");
    }
    entry.uid = e["uid"].get<std::string>();
    entry.pod = e["pod"].get<std::string>();
    log.recent.push_back(std::move(entry));
  }
  return log;
}

std::string WriteCommitLog(const CommitLog& log) {
  json recent = json::array();
  for (const CommitLog::Entry& e : log.recent) {
    recent.push_back({{"seq", e.seq}, {"uid", e.uid}, {"pod", e.pod}});
  }
  return json{{"version", 1}, {"seq", log.seq}, {"trimmed", log.trimmed}, {"recent", recent}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

}  // namespace tessera::extender
