// deploy/grafana-dashboard.json against what tesserad exports: the file must be well-formed JSON
// (nlohmann-json, strict: no comments, no trailing commas), every
// `tessera_...` name in any of its strings (queries, template variables) must be a family that
// RenderMetrics in src/daemon/ctl_door.cc begins, and the panels docs/monitoring.md promises must
// be there.
// Both files are read from the source tree at test time (TESSERA_SOURCE_DIR), so renaming a family
// without the dashboard, or the other way round, fails here.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace {

std::string ReadSource(const std::string& relative) {
  std::ifstream in(std::string(TESSERA_SOURCE_DIR) + "/" + relative);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A string value found in the document, with the nearest enclosing object key ("" at the top).
struct StringValue {
  std::string key;
  std::string text;
};

// Every string value (not object keys) of `json`, depth first.
void CollectStrings(const nlohmann::json& json, const std::string& key,
                    std::vector<StringValue>* out) {
  if (json.is_string()) {
    out->push_back({key, json.get<std::string>()});
  } else if (json.is_object()) {
    for (const auto& [k, v] : json.items()) CollectStrings(v, k, out);
  } else if (json.is_array()) {
    for (const auto& v : json) CollectStrings(v, key, out);
  }
}

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

TEST(GrafanaDashboardTest, ParsesAndQueriesOnlyExportedFamilies) {
  const std::string path = "deploy/grafana-dashboard.json";
  const std::string text = ReadSource(path);
  ASSERT_FALSE(text.empty()) << path << " is missing or empty under " << TESSERA_SOURCE_DIR;
  std::vector<StringValue> strings;
  try {
    CollectStrings(nlohmann::json::parse(text), "", &strings);
  } catch (const nlohmann::json::parse_error& e) {
    FAIL() << path << " is not valid JSON: " << e.what();
  }

  const std::set<std::string> exported = ExportedFamilies();
  ASSERT_GE(exported.size(), 20u) << "could not read the families out of src/daemon/ctl_door.cc";
  std::set<std::string> used;
  int queries = 0;
  for (const StringValue& v : strings) {
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
  // The panels docs/monitoring.md describes: memory used vs limit, compute target vs achieved and
  // the GPU time used, token wait and grants, OOM refusals, processes, daemon health.
  for (const char* needed :
       {"tessera_container_memory_used_bytes", "tessera_container_memory_limit_bytes",
        "tessera_container_compute_target_percent", "tessera_container_compute_achieved_percent",
        "tessera_container_token_wait_seconds_total", "tessera_container_token_grants_total",
        "tessera_container_oom_refusals_total", "tessera_container_gpu_seconds_total",
        "tessera_container_processes", "tessera_processes", "tessera_up",
        "tessera_arbiter_beat_age_seconds"}) {
    EXPECT_TRUE(used.count(needed)) << path << " has no query on " << needed;
  }
}

}  // namespace
