// `tessera smi [--json] [--watch [SECONDS]] [--count N]`: what the node daemon knows, per GPU
// (policy, max_inst) and per container: memory used and limit, the GPU-time share it is promised
// (TARGET) and what it got over the arbiter's window (GOT), high priority, and its processes with
// what they hold. --json prints the daemon's snapshot as it is; --watch redraws it every interval.
// Reads only; holds no policy.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "core/bytes.h"
#include "core/number.h"
#include "ipc/unix_socket.h"

namespace tessera::cli {
namespace {

using Json = nlohmann::json;

// A byte count, or "-" when the daemon sent none.
std::string Size(const Json& v) {
  if (!v.is_number_unsigned()) return "-";
  return FormatBytes(Bytes(v.get<uint64_t>()));
}

std::string Percentage(const Json& v) {
  if (!v.is_number()) return "-";
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%.1f%%", v.get<double>());
  return buf;
}

const char* PolicyName(int policy) {
  static const char* const kNames[] = {"0 fair",  "1 preemptive", "2 weighted",
                                       "3 fixed", "4 weak",       "5 native"};
  return policy >= 0 && policy <= 5 ? kNames[policy] : "?";
}

// The element `i` of the array `v`, or null.
const Json& At(const Json& v, size_t i) {
  static const Json kNull;
  return v.is_array() && i < v.size() ? v[i] : kNull;
}

// The member `key` of the object `v`, or null.
const Json& Member(const Json& v, const char* key) {
  static const Json kNull;
  return v.is_object() && v.contains(key) ? v[key] : kNull;
}

// Prints the daemon's snapshot as the two tables. Throws nlohmann::json::exception when a member
// has the wrong type (the caller reports it).
void PrintTables(const Json& doc) {
  const Json& devices = doc.at("devices");
  // Names as wide as the longest (a MIG device's name ends in its profile).
  int name_width = 12;
  for (const Json& d : devices) {
    name_width = std::max(name_width, static_cast<int>(d.at("name").get<std::string>().size()));
  }
  std::printf("%-4s %-*s %-42s %10s %-13s %8s\n", "GPU", name_width, "NAME", "UUID", "MEMORY",
              "POLICY", "MAX_INST");
  for (const Json& d : devices) {
    const bool has_policy = d.contains("policy");
    std::printf("%-4d %-*s %-42s %10s %-13s %8s\n", d.at("index").get<int>(), name_width,
                d.at("name").get<std::string>().c_str(), d.at("uuid").get<std::string>().c_str(),
                Size(d.at("total_bytes")).c_str(),
                has_policy ? PolicyName(d.at("policy").get<int>()) : "-",
                has_policy ? std::to_string(d.at("max_inst").get<int>()).c_str() : "-");
  }
  // tesserad may run MPS (mps_root): which GPUs' control daemons run.
  if (doc.contains("mps_root")) {
    std::string on;
    for (const Json& d : devices) {
      if (Member(d, "mps").is_boolean() && d.at("mps").get<bool>()) {
        on += (on.empty() ? "" : ",") + std::to_string(d.at("index").get<int>());
      }
    }
    std::printf("%s (pipes under %s)\n",
                on.empty() ? "MPS on no GPU" : ("MPS on GPUs " + on).c_str(),
                doc.at("mps_root").get<std::string>().c_str());
  }
  // GOT: the device time the container's kernels occupied over the arbiter's window; GPU TIME: the
  // same since it took its slot (or tesserad started).
  std::printf("\n%-20s %-4s %10s %10s %8s %8s %10s %-4s %s\n", "CONTAINER", "GPU", "USED", "LIMIT",
              "TARGET", "GOT", "GPU TIME", "PRIO", "PROCESSES");
  for (const Json& c : doc.at("containers")) {
    for (size_t g = 0; g < devices.size(); ++g) {
      std::string procs;
      for (const Json& p : c.at("processes")) {
        procs += (procs.empty() ? "" : ", ") + std::to_string(p.at("pid").get<long>()) + " (" +
                 Size(At(p.at("used_bytes"), g)) + ")";
      }
      const Json& limit = At(c.at("limit_bytes"), g);
      const Json& share = At(c.at("compute"), g);
      const Json& seconds = Member(share, "gpu_seconds");
      char gpu_time[32] = "-";
      if (seconds.is_number())
        std::snprintf(gpu_time, sizeof(gpu_time), "%.2fs", seconds.get<double>());
      std::printf(
          "%-20s %-4zu %10s %10s %8s %8s %10s %-4s %s\n", c.at("id").get<std::string>().c_str(), g,
          Size(At(c.at("used_bytes"), g)).c_str(), limit.is_null() ? "none" : Size(limit).c_str(),
          Percentage(Member(share, "target_percent")).c_str(),
          Percentage(Member(share, "achieved_percent")).c_str(), gpu_time,
          c.at("high_priority").get<bool>() ? "high" : "-", procs.empty() ? "-" : procs.c_str());
    }
  }
}

// One snapshot: prints it (as a table or the daemon's JSON). Returns the exit status.
int ShowOnce(const std::string& socket, bool json) {
  auto reply = ipc::Call(socket, "STATUS", nullptr, std::chrono::milliseconds(3000));
  if (!reply.ok() || reply->rfind("OK ", 0) != 0) {
    std::fprintf(stderr,
                 "tessera smi: no Tessera daemon reachable at %s (%s); start tesserad or set "
                 "TESSERA_SOCKET\n",
                 socket.c_str(), reply.ok() ? reply->c_str() : reply.error().c_str());
    return 1;
  }
  const std::string body = reply->substr(3);
  if (json) {
    std::printf("%s\n", body.c_str());
    return 0;
  }
  try {
    PrintTables(Json::parse(body));
  } catch (const Json::exception& e) {
    std::fprintf(stderr, "tessera smi: the daemon's snapshot is not what this tessera reads: %s\n",
                 e.what());
    return 1;
  }
  return 0;
}

}  // namespace

int RunSmi(const SmiArgs& args) {
  const bool json = args.json;
  double watch = 0;
  long count = -1;
  if (args.watch) {
    char* end = nullptr;
    watch = std::strtod(args.watch->c_str(), &end);
    if (args.watch->empty() || *end != '\0' || !(watch >= 0.1) || watch > 3600) {
      std::fprintf(stderr, "tessera smi: --watch \"%s\": expected seconds from 0.1 to 3600\n",
                   args.watch->c_str());
      return 2;
    }
  }
  if (args.count) {
    auto n = ParseUnsigned(*args.count, "--count", 1, 1000000000);
    if (!n.ok()) {
      std::fprintf(stderr, "tessera smi: %s\n", n.error().c_str());
      return 2;
    }
    count = static_cast<long>(*n);
  }
  const char* env_socket = std::getenv("TESSERA_SOCKET");
  const std::string socket =
      env_socket != nullptr && *env_socket != '\0' ? env_socket : "/run/tessera/tessera.sock";
  if (watch <= 0) return ShowOnce(socket, json);
  // --watch: redraw every interval until interrupted (or --count snapshots were shown).
  for (long shown = 0; count < 0 || shown < count; ++shown) {
    if (!json && isatty(1)) std::printf("\033[H\033[2J");
    if (ShowOnce(socket, json) != 0 && !json) {
      std::printf("(retrying every %.1f s)\n", watch);
    }
    std::fflush(stdout);
    if (count >= 0 && shown + 1 >= count) break;
    std::this_thread::sleep_for(std::chrono::duration<double>(watch));
  }
  return 0;
}

}  // namespace tessera::cli
