// Container identity: /proc reading, the book of records, its files, and the server's checks.
#include "daemon/identity.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "core/container_id.h"
#include "daemon/registry.h"
#include "ledger/ledger_layout.h"

namespace tessera::daemon {
namespace {

constexpr size_t kMaxProcFileBytes = 64 * 1024;
constexpr size_t kMaxCgroupLines = 64;
constexpr size_t kMaxRecordsPerContainer = 16;
constexpr size_t kMaxRuntimeIdBytes = 128;
constexpr size_t kMaxStoreFileBytes = 256 * 1024;

Result<std::string> ReadSmallFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Result<std::string>::Error(path + ": " + std::strerror(errno));
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return Result<std::string>::Error(path + ": " + std::strerror(err));
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxProcFileBytes) {
      close(fd);
      return Result<std::string>::Error(path + ": longer than " +
                                        std::to_string(kMaxProcFileBytes) + " bytes");
    }
  }
  close(fd);
  return text;
}

// Field 22 of a /proc/PID/stat text (after the command name, which may hold spaces and ')').
uint64_t StartTicksOf(const std::string& stat) {
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  int field = 2;
  for (size_t i = close + 1; i < stat.size(); ++i) {
    if (stat[i] == ' ') {
      ++field;
      if (field == 22) return std::strtoull(stat.c_str() + i + 1, nullptr, 10);
    }
  }
  return 0;
}

// The state letter of a /proc/PID/stat text ('Z': zombie).
char StateOf(const std::string& stat) {
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() ? stat[close + 2] : '?';
}

// The hierarchy's path in `entries`, or nullptr.
const std::string* PathIn(const std::vector<CgroupEntry>& entries, const std::string& hierarchy) {
  for (const CgroupEntry& e : entries) {
    if (e.hierarchy == hierarchy) return &e.path;
  }
  return nullptr;
}

// Reads the identity of `leaf` under `proc_root` ("1234", or "self").
Result<ProcessIdentity> ReadIdentityOf(const std::string& proc_root, const std::string& leaf) {
  const std::string dir = proc_root + "/" + leaf;
  ProcessIdentity out;
  auto cgroup = ReadSmallFile(dir + "/cgroup");
  if (!cgroup.ok()) return cgroup.status();
  auto entries = ParseProcCgroup(*cgroup);
  if (!entries.ok()) return Result<ProcessIdentity>::Error(dir + "/cgroup: " + entries.error());
  out.cgroups = std::move(*entries);
  auto stat_text = ReadSmallFile(dir + "/stat");
  if (!stat_text.ok()) return stat_text.status();
  if (StateOf(*stat_text) == 'Z' || StateOf(*stat_text) == 'X') {
    return Result<ProcessIdentity>::Error(dir + ": the process has exited");
  }
  out.start_ticks = StartTicksOf(*stat_text);
  struct stat st {};
  if (stat(std::string(dir + "/ns/pid").c_str(), &st) != 0) {
    return Result<ProcessIdentity>::Error(dir + "/ns/pid: " + std::strerror(errno));
  }
  out.pid_ns = st.st_ino;
  if (stat(std::string(dir + "/ns/mnt").c_str(), &st) != 0) {
    return Result<ProcessIdentity>::Error(dir + "/ns/mnt: " + std::strerror(errno));
  }
  out.mnt_ns = st.st_ino;
  return out;
}

nlohmann::json ToJson(const ContainerIdentity& r) {
  nlohmann::json cgroups = nlohmann::json::array();
  for (const CgroupEntry& e : r.cgroups) cgroups.push_back({e.hierarchy, e.path});
  return {{"init_pid", r.init_pid},     {"init_start_ticks", r.init_start_ticks},
          {"pid_ns", r.pid_ns},         {"mnt_ns", r.mnt_ns},
          {"runtime_id", r.runtime_id}, {"cgroups", cgroups}};
}

// A record read back from a file, every field checked.
Result<ContainerIdentity> FromJson(const nlohmann::json& j) {
  using R = Result<ContainerIdentity>;
  if (!j.is_object()) return R::Error("a record is not an object");
  ContainerIdentity r;
  auto unsigned_field = [&](const char* key, uint64_t max, uint64_t* out) -> Status {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_unsigned() || it->get<uint64_t>() > max) {
      return Status::Error(std::string(key) + ": expected a number from 0 to " +
                           std::to_string(max));
    }
    *out = it->get<uint64_t>();
    return Status::Ok();
  };
  uint64_t pid = 0;
  for (const auto& [key, max, out] : {std::tuple{"init_pid", uint64_t{0x3fffffff}, &pid},
                                      {"init_start_ticks", ~uint64_t{0}, &r.init_start_ticks},
                                      {"pid_ns", ~uint64_t{0}, &r.pid_ns},
                                      {"mnt_ns", ~uint64_t{0}, &r.mnt_ns}}) {
    if (Status s = unsigned_field(key, max, out); !s.ok()) return s;
  }
  if (pid == 0) return R::Error("init_pid: expected a process id above 0");
  r.init_pid = static_cast<pid_t>(pid);
  auto id = j.find("runtime_id");
  if (id == j.end() || !id->is_string() || id->get<std::string>().size() > kMaxRuntimeIdBytes) {
    return R::Error("runtime_id: expected a string of at most " +
                    std::to_string(kMaxRuntimeIdBytes) + " bytes");
  }
  r.runtime_id = id->get<std::string>();
  auto cgroups = j.find("cgroups");
  if (cgroups == j.end() || !cgroups->is_array() || cgroups->size() > kMaxCgroupLines) {
    return R::Error("cgroups: expected a list of at most " + std::to_string(kMaxCgroupLines) +
                    " [hierarchy, path] pairs");
  }
  std::string as_text;
  for (const nlohmann::json& e : *cgroups) {
    if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_string()) {
      return R::Error("cgroups: expected [hierarchy, path] pairs of strings");
    }
    as_text += e[0].get<std::string>() + ":" + e[1].get<std::string>() + "\n";
  }
  // The same rules as the kernel's file: ID:CONTROLLERS:/PATH.
  auto parsed = ParseProcCgroup(as_text);
  if (!cgroups->empty() && !parsed.ok()) return R::Error("cgroups: " + parsed.error());
  if (parsed.ok()) r.cgroups = std::move(*parsed);
  if (r.cgroups.empty() && r.pid_ns == 0) {
    return R::Error("neither cgroups nor pid_ns: the record identifies nothing");
  }
  return r;
}

}  // namespace

Result<std::vector<CgroupEntry>> ParseProcCgroup(std::string_view text) {
  using R = Result<std::vector<CgroupEntry>>;
  std::vector<CgroupEntry> out;
  size_t pos = 0;
  int number = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++number;
    if (line.empty()) continue;
    const size_t first = line.find(':');
    const size_t second = first == std::string_view::npos ? first : line.find(':', first + 1);
    if (second == std::string_view::npos) {
      return R::Error("line " + std::to_string(number) + ": expected ID:CONTROLLERS:PATH");
    }
    const std::string_view id = line.substr(0, first);
    if (id.empty() || id.size() > 10 ||
        !std::all_of(id.begin(), id.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return R::Error("line " + std::to_string(number) + ": hierarchy id \"" + std::string(id) +
                      "\" is not a number");
    }
    const std::string_view path = line.substr(second + 1);
    if (path.empty() || path[0] != '/') {
      return R::Error("line " + std::to_string(number) + ": path \"" + std::string(path) +
                      "\" does not start with /");
    }
    if (out.size() == kMaxCgroupLines) {
      return R::Error("more than " + std::to_string(kMaxCgroupLines) + " hierarchies");
    }
    out.push_back({std::string(line.substr(0, second)), std::string(path)});
  }
  if (out.empty()) return R::Error("no cgroup line");
  return out;
}

Result<ProcessIdentity> ReadProcessIdentity(const std::string& proc_root, pid_t pid) {
  if (pid <= 0) return Result<ProcessIdentity>::Error("pid " + std::to_string(pid));
  return ReadIdentityOf(proc_root, std::to_string(pid));
}

bool CgroupWithin(std::string_view path, std::string_view group) {
  if (group == "/") return true;
  if (path.size() < group.size() || path.compare(0, group.size(), group) != 0) return false;
  return path.size() == group.size() || path[group.size()] == '/';
}

bool ContainerIdentity::Holds(const ProcessIdentity& process) const {
  if (cgroups.empty()) return pid_ns != 0 && process.pid_ns == pid_ns;
  for (const CgroupEntry& e : cgroups) {
    const std::string* path = PathIn(process.cgroups, e.hierarchy);
    if (path == nullptr || !CgroupWithin(*path, e.path)) return false;
  }
  return true;
}

std::string ContainerIdentity::Describe() const {
  if (cgroups.empty()) return "pid namespace " + std::to_string(pid_ns);
  std::string out = "cgroup ";
  for (size_t i = 0; i < cgroups.size(); ++i) {
    out += (i == 0 ? "" : ", ") + cgroups[i].hierarchy + ":" + cgroups[i].path;
  }
  return out;
}

IdentityBook::IdentityBook(std::string proc_root, std::string store_dir)
    : proc_root_(std::move(proc_root)), store_dir_(std::move(store_dir)) {
  auto self = ReadIdentityOf(proc_root_, "self");
  if (self.ok()) self_ = std::move(*self);
  if (!store_dir_.empty()) {
    mkdir(store_dir_.c_str(), 0700);
    chmod(store_dir_.c_str(), 0700);
  }
}

bool IdentityBook::InitAlive(const ContainerIdentity& r) const {
  auto stat = ReadSmallFile(proc_root_ + "/" + std::to_string(r.init_pid) + "/stat");
  if (!stat.ok()) return false;
  const char state = StateOf(*stat);
  return state != 'Z' && state != 'X' && StartTicksOf(*stat) == r.init_start_ticks;
}

std::vector<std::string> IdentityBook::Load() {
  std::vector<std::string> lines;
  if (store_dir_.empty()) return lines;
  DIR* dir = opendir(store_dir_.c_str());
  if (dir == nullptr) return lines;
  std::vector<std::string> names;
  while (dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(dir);
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& name : names) {
    const std::string path = store_dir_ + "/" + name;
    auto drop = [&](const std::string& why) {
      lines.push_back("identity record " + path + ": " + why + "; dropped");
      unlink(path.c_str());
    };
    if (!ParseContainerId(name, "file name").ok()) {
      drop("not a container id");
      continue;
    }
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
        static_cast<size_t>(st.st_size) > kMaxStoreFileBytes) {
      drop("not a regular file of at most " + std::to_string(kMaxStoreFileBytes) + " bytes");
      continue;
    }
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("records") || !j["records"].is_array() ||
        !j.contains("expected") || !j["expected"].is_boolean()) {
      drop("not {\"expected\": BOOL, \"records\": [...]}");
      continue;
    }
    std::vector<ContainerIdentity> kept;
    bool bad = false;
    for (const nlohmann::json& record : j["records"]) {
      auto r = FromJson(record);
      if (!r.ok()) {
        drop(r.error());
        bad = true;
        break;
      }
      if (!InitAlive(*r)) {
        lines.push_back("container " + name + ": runtime container " + r->runtime_id +
                        " (init pid " + std::to_string(r->init_pid) +
                        ") exited while tesserad was down; its identity record is dropped");
        continue;
      }
      if (kept.size() < kMaxRecordsPerContainer) kept.push_back(std::move(*r));
    }
    if (bad) continue;
    if (!kept.empty()) records_[name] = std::move(kept);
    if (j["expected"].get<bool>()) expected_.insert(name);
    StoreLocked(name);
  }
  return lines;
}

void IdentityBook::StoreLocked(const std::string& id) const {
  if (store_dir_.empty()) return;
  const std::string path = store_dir_ + "/" + id;
  auto it = records_.find(id);
  const bool expected = expected_.count(id) != 0;
  if ((it == records_.end() || it->second.empty()) && !expected) {
    unlink(path.c_str());
    return;
  }
  nlohmann::json records = nlohmann::json::array();
  if (it != records_.end()) {
    for (const ContainerIdentity& r : it->second) records.push_back(ToJson(r));
  }
  const std::string text = nlohmann::json{{"expected", expected}, {"records", records}}.dump();
  const std::string tmp = store_dir_ + "/." + id + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    std::fprintf(stderr, "tesserad: cannot keep container %s's identity in %s: %s\n", id.c_str(),
                 tmp.c_str(), std::strerror(errno));
    return;
  }
  const bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  if (!written || rename(tmp.c_str(), path.c_str()) != 0) {
    std::fprintf(stderr, "tesserad: cannot keep container %s's identity in %s: %s\n", id.c_str(),
                 path.c_str(), std::strerror(errno));
    unlink(tmp.c_str());
  }
}

Result<ContainerIdentity> IdentityBook::Record(const std::string& id, pid_t pid,
                                               const std::string& runtime_id) {
  using R = Result<ContainerIdentity>;
  if (pid == getpid()) return R::Error("pid " + std::to_string(pid) + " is tesserad itself");
  auto process = ReadProcessIdentity(proc_root_, pid);
  if (!process.ok()) {
    return R::Error("cannot read process " + std::to_string(pid) + ": " + process.error());
  }
  ContainerIdentity r;
  r.init_pid = pid;
  r.init_start_ticks = process->start_ticks;
  r.pid_ns = process->pid_ns;
  r.mnt_ns = process->mnt_ns;
  r.runtime_id = runtime_id;
  for (const CgroupEntry& e : process->cgroups) {
    // Only a group tesserad itself is not in tells the container's processes from the node's.
    const std::string* own = PathIn(self_.cgroups, e.hierarchy);
    if (e.path != "/" && (own == nullptr || !CgroupWithin(*own, e.path))) r.cgroups.push_back(e);
  }
  if (r.cgroups.empty() && (r.pid_ns == 0 || r.pid_ns == self_.pid_ns)) {
    return R::Error("process " + std::to_string(pid) +
                    " is in tesserad's own cgroups and pid namespace: nothing the kernel says "
                    "tells its processes from the node's (a container runtime puts each "
                    "container in a cgroup of its own)");
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ContainerIdentity>& list = records_[id];
  list.erase(std::remove_if(list.begin(), list.end(),
                            [&](const ContainerIdentity& old) {
                              return !InitAlive(old) ||
                                     (old.init_pid == r.init_pid &&
                                      old.init_start_ticks == r.init_start_ticks);
                            }),
             list.end());
  if (list.size() == kMaxRecordsPerContainer) list.erase(list.begin());
  list.push_back(r);
  noted_.erase(id);
  learnt_.erase(id);
  StoreLocked(id);
  return r;
}

void IdentityBook::Expect(const std::string& id, bool expected) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool changed = expected ? expected_.insert(id).second : expected_.erase(id) != 0;
  if (changed) StoreLocked(id);
}

void IdentityBook::RetainExpected(const std::set<std::string>& live) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = expected_.begin(); it != expected_.end();) {
    if (live.count(*it) != 0) {
      ++it;
      continue;
    }
    const std::string id = *it;
    it = expected_.erase(it);
    StoreLocked(id);
  }
}

void IdentityBook::Forget(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  records_.erase(id);
  learnt_.erase(id);
  expected_.erase(id);
  noted_.erase(id);
  StoreLocked(id);
}

std::vector<std::string> IdentityBook::Prune() {
  std::vector<std::string> lines;
  std::lock_guard<std::mutex> lock(mu_);
  // A learnt cgroup lasts while the process it was learnt from lives.
  for (auto it = learnt_.begin(); it != learnt_.end();) {
    std::vector<ContainerIdentity>& list = it->second;
    list.erase(std::remove_if(list.begin(), list.end(),
                              [&](const ContainerIdentity& r) { return !InitAlive(r); }),
               list.end());
    it = list.empty() ? learnt_.erase(it) : std::next(it);
  }
  for (auto it = records_.begin(); it != records_.end();) {
    std::vector<ContainerIdentity>& list = it->second;
    const size_t before = list.size();
    for (auto r = list.begin(); r != list.end();) {
      if (InitAlive(*r)) {
        ++r;
        continue;
      }
      lines.push_back("container " + it->first + ": runtime container " + r->runtime_id +
                      " (init pid " + std::to_string(r->init_pid) +
                      ") has exited; its identity record is dropped");
      r = list.erase(r);
    }
    const std::string id = it->first;
    const bool changed = list.size() != before;
    it = list.empty() ? records_.erase(it) : std::next(it);
    if (changed) StoreLocked(id);
  }
  return lines;
}

IdentityBook::Verdict IdentityBook::Check(const std::string& id, pid_t pid) const {
  auto process = ReadProcessIdentity(proc_root_, pid);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find(id);
  if (it == records_.end() || it->second.empty()) return Verdict::kUnrecorded;
  if (!process.ok()) return Verdict::kStranger;  // gone, or no /proc entry we can read
  for (const ContainerIdentity& r : it->second) {
    if (r.Holds(*process)) return Verdict::kMember;
  }
  return Verdict::kStranger;
}

bool IdentityBook::Expected(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return expected_.count(id) != 0;
}

std::optional<std::string> IdentityBook::ContainerOfLocked(const ProcessIdentity& process,
                                                           bool learnt) const {
  // Recorded identities first; learnt cgroups (when asked) only for containers without one, and
  // only when they name one container.
  for (const auto* book : {&records_, &learnt_}) {
    if (book == &learnt_ && !learnt) break;
    std::optional<std::string> best;
    size_t best_depth = 0;
    bool tie = false;
    for (const auto& [id, list] : *book) {
      if (book == &learnt_ && records_.count(id) != 0) continue;
      for (const ContainerIdentity& r : list) {
        if (!r.Holds(process)) continue;
        size_t depth = 1;  // a match by pid namespace is the least specific
        for (const CgroupEntry& e : r.cgroups) depth += e.path.size();
        if (!best || depth > best_depth) {
          best = id;
          best_depth = depth;
          tie = false;
        } else if (depth == best_depth && *best != id) {
          tie = true;
        }
      }
    }
    if (best && !tie) return best;
    if (best) return std::nullopt;  // two containers' cgroups alike: nobody's
  }
  return std::nullopt;
}

void IdentityBook::NoteRegistrant(const std::string& id, pid_t pid) {
  auto process = ReadProcessIdentity(proc_root_, pid);
  if (!process.ok()) return;
  ContainerIdentity r;
  r.init_pid = pid;
  r.init_start_ticks = process->start_ticks;
  for (const CgroupEntry& e : process->cgroups) {
    const std::string* own = PathIn(self_.cgroups, e.hierarchy);
    if (e.path != "/" && (own == nullptr || !CgroupWithin(*own, e.path))) r.cgroups.push_back(e);
  }
  if (r.cgroups.empty()) return;  // in tesserad's own cgroups: nothing to learn
  std::lock_guard<std::mutex> lock(mu_);
  if (records_.count(id) != 0) return;
  std::vector<ContainerIdentity>& list = learnt_[id];
  for (const ContainerIdentity& known : list) {
    if (known.cgroups == r.cgroups) return;  // a cgroup it knows already
  }
  if (list.size() == kMaxRecordsPerContainer) list.erase(list.begin());
  list.push_back(std::move(r));
}

std::optional<std::string> IdentityBook::ContainerOf(pid_t pid) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (records_.empty()) return std::nullopt;
  }
  auto process = ReadProcessIdentity(proc_root_, pid);
  if (!process.ok()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  return ContainerOfLocked(*process, /*learnt=*/false);
}

std::map<int32_t, std::string> IdentityBook::ContainersOf(const std::set<int32_t>& pids) const {
  std::map<int32_t, ProcessIdentity> read;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (records_.empty() && learnt_.empty()) return {};
  }
  for (int32_t pid : pids) {
    auto process = ReadProcessIdentity(proc_root_, pid);
    if (process.ok()) read[pid] = std::move(*process);
  }
  std::map<int32_t, std::string> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [pid, process] : read) {
    if (auto id = ContainerOfLocked(process, /*learnt=*/true)) out[pid] = *id;
  }
  return out;
}

std::set<std::string> IdentityBook::Identified() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string> out;
  for (const auto& [id, list] : records_) {
    if (!list.empty()) out.insert(id);
  }
  return out;
}

bool IdentityBook::FirstUnidentifiedUse(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return noted_.insert(id).second;
}

std::string AdmitToContainerSocket(const IdentityBook& book, bool require, const std::string& id,
                                   pid_t pid) {
  switch (book.Check(id, pid)) {
    case IdentityBook::Verdict::kMember:
      return "";
    case IdentityBook::Verdict::kStranger:
      return "pid " + std::to_string(pid) + " is not a process of container " + id +
             " (its cgroup is not the one the container runtime gave " + id +
             "): a container's socket serves that container's processes only";
    case IdentityBook::Verdict::kUnrecorded:
      break;
  }
  if (require || book.Expected(id)) {
    return "container " + id +
           " has no recorded identity yet (IDENTIFY, which the device plugin's CDI hook sends "
           "when the runtime creates the container), so no process can be told to be one of "
           "its own" +
           (require ? std::string(" (tesserad --require-identity)") : std::string());
  }
  if (book.FirstUnidentifiedUse(id)) {
    std::fprintf(stderr,
                 "tesserad: note: container %s has no recorded identity: any process that reaches "
                 "its socket may register into it (run the device plugin with --cdi so the "
                 "runtime identifies it, or tesserad with --require-identity to refuse)\n",
                 id.c_str());
  }
  return "";
}

std::string AdmitHello(const IdentityBook& book, const std::string& id, pid_t pid) {
  if (auto owner = book.ContainerOf(pid); owner && *owner != id) {
    return "pid " + std::to_string(pid) + " is a process of container " + *owner +
           " (by its cgroup, as the container runtime set it up); it registers into " + *owner +
           " only, not " + id;
  }
  switch (book.Check(id, pid)) {
    case IdentityBook::Verdict::kMember:
      return "";
    case IdentityBook::Verdict::kStranger:
      return "pid " + std::to_string(pid) + " is not a process of container " + id +
             " (its cgroup is not the one the container runtime gave " + id + ")";
    case IdentityBook::Verdict::kUnrecorded:
      break;
  }
  if (book.Expected(id)) {
    return "container " + id +
           " is identified by its container runtime (the device plugin's CDI hook), which has not "
           "done so yet; pid " +
           std::to_string(pid) + " cannot be told to be one of its processes";
  }
  return "";
}

void SweepIdentities(IdentityBook& book, const Registry& registry) {
  for (const std::string& line : book.Prune()) std::fprintf(stderr, "tesserad: %s\n", line.c_str());
  const std::set<std::string> live = registry.WithLedger([](const ledger::MemoryLedger& l) {
    std::set<std::string> ids;
    for (int c = 0; c < ledger::kMaxContainers; ++c) {
      const ledger::LedgerBook::Container& slot = l.book().containers[c];
      if (slot.state.load() == ledger::kLive) ids.insert(slot.id);
    }
    return ids;
  });
  book.RetainExpected(live);
}

Result<protocol::Message> Identify(IdentityBook& book, const Registry& registry,
                                   const protocol::Message& request, uid_t peer_uid) {
  using R = Result<protocol::Message>;
  if (peer_uid != 0) {
    return R::Error("IDENTIFY needs root (the caller's uid is " + std::to_string(peer_uid) +
                    "): it tells tesserad which processes belong to a container");
  }
  for (const auto& [key, value] : request.fields) {
    if (key != "id" && key != "pid" && key != "runtime_id") {
      return R::Error("IDENTIFY " + key + "=" + value +
                      ": unknown field; expected id=, pid= and "
                      "optionally runtime_id=");
    }
  }
  const std::string id = request.Get("id");
  if (auto valid = ParseContainerId(id, "IDENTIFY id"); !valid.ok()) return valid.status();
  const std::string pid_text = request.Get("pid");
  char* end = nullptr;
  const long pid = std::strtol(pid_text.c_str(), &end, 10);
  if (pid_text.empty() || *end != '\0' || pid <= 0 || pid > 0x3fffffff) {
    return R::Error("IDENTIFY pid=" + pid_text +
                    ": expected the process id of the container's init process (from the OCI "
                    "state's \"pid\")");
  }
  const std::string runtime_id = request.Get("runtime_id");
  if (runtime_id.size() > kMaxRuntimeIdBytes) {
    return R::Error("IDENTIFY runtime_id: longer than " + std::to_string(kMaxRuntimeIdBytes) +
                    " bytes");
  }
  const bool registered = registry.WithLedger([&](const ledger::MemoryLedger& l) {
    const int c = l.FindContainer(id);
    return c >= 0 && (l.book().containers[c].flags.load() & ledger::kContainerRegistered) != 0;
  });
  if (!registered) {
    return R::Error("IDENTIFY id=" + id + ": no such container registered (CONTAINER id=" + id +
                    " first)");
  }
  auto recorded = book.Record(id, static_cast<pid_t>(pid), runtime_id);
  if (!recorded.ok()) return R::Error("IDENTIFY id=" + id + ": " + recorded.error());
  std::fprintf(stderr, "tesserad: container %s is runtime container %s (init pid %ld): %s\n",
               id.c_str(), runtime_id.empty() ? "-" : runtime_id.c_str(), pid,
               recorded->Describe().c_str());
  return protocol::Message{"OK",
                           {{"container", id},
                            {"by", recorded->cgroups.empty() ? "pid_ns" : "cgroup"},
                            {"pid_ns", std::to_string(recorded->pid_ns)},
                            {"mnt_ns", std::to_string(recorded->mnt_ns)}}};
}

}  // namespace tessera::daemon
