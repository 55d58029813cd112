// LedgerView implementation: a read-only mapping and the comparison resilience_test and the chaos
// soak make after their rounds.
#include "ledger/ledger_view.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <set>
#include <sstream>

namespace tessera::ledger {

LedgerView::LedgerView(const std::string& shm_name) : name_(shm_name) {
  const int fd = shm_open(shm_name.c_str(), O_RDONLY, 0);
  if (fd < 0) return;
  void* mem = mmap(nullptr, sizeof(LedgerLayout), PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (mem != MAP_FAILED) layout_ = static_cast<const LedgerLayout*>(mem);
}

LedgerView::~LedgerView() {
  if (layout_ != nullptr) munmap(const_cast<LedgerLayout*>(layout_), sizeof(LedgerLayout));
}

namespace {

// Container `c`'s segment of the ledger `name`, mapped read-only for as long as it lives.
class SegmentView {
 public:
  SegmentView(const std::string& name, int c) {
    const int fd = shm_open((name + ".c" + std::to_string(c)).c_str(), O_RDONLY, 0);
    if (fd < 0) return;
    void* mem = mmap(nullptr, sizeof(ContainerSegment), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (mem != MAP_FAILED) seg_ = static_cast<const ContainerSegment*>(mem);
  }
  ~SegmentView() {
    if (seg_ != nullptr) munmap(const_cast<ContainerSegment*>(seg_), sizeof(ContainerSegment));
  }
  SegmentView(const SegmentView&) = delete;
  SegmentView& operator=(const SegmentView&) = delete;
  const ContainerSegment* get() const { return seg_; }

 private:
  const ContainerSegment* seg_ = nullptr;
};

}  // namespace

std::string LedgerView::Compare(const ExpectedHoldings& expected) const {
  if (layout_ == nullptr) return "cannot map " + name_;
  std::ostringstream diff;
  std::set<pid_t> seen;
  for (int c = 0; c < kMaxContainers; ++c) {
    const ContainerSlot& slot = layout_->containers[c];
    if (slot.state.load() != kLive) continue;
    const std::string id(slot.id, strnlen(slot.id, sizeof(slot.id)));
    const SegmentView seg(name_, c);
    if (seg.get() == nullptr) {
      diff << "container " << id << " has no segment " << name_ << ".c" << c << "; ";
      continue;
    }
    const uint64_t used = seg.get()->counters.used[0].load();
    auto it = expected.find(id);
    uint64_t want = 0;
    if (it != expected.end()) {
      for (const auto& [pid, bytes] : it->second) want += bytes;
    }
    if (used != want)
      diff << "container " << id << " uses " << used << ", expected " << want << "; ";
    for (int p = 0; p < kMaxProcesses; ++p) {
      const ProcessSlot& ps = layout_->processes[p];
      if (ps.state.load() != kLive || ps.container.load() != static_cast<uint32_t>(c)) continue;
      const pid_t pid = ps.host_pid.load();
      seen.insert(pid);
      const uint64_t held = seg.get()->processes[p].used[0].load();
      if (it == expected.end() || it->second.count(pid) == 0) {
        diff << "slot " << p << " of " << id << " is live for pid " << pid
             << " (not a live tenant) holding " << held << "; ";
      } else if (held != it->second.at(pid)) {
        diff << "pid " << pid << " of " << id << " holds " << held << " in the ledger, says "
             << it->second.at(pid) << "; ";
      }
    }
  }
  for (const auto& [id, processes] : expected) {
    for (const auto& [pid, bytes] : processes) {
      if (seen.count(pid) == 0) diff << "pid " << pid << " of " << id << " has no live slot; ";
    }
  }
  return diff.str();
}

std::vector<std::string> LedgerView::LiveSlotsOf(const std::vector<pid_t>& pids) const {
  std::vector<std::string> out;
  if (layout_ == nullptr) return out;
  const std::set<pid_t> dead(pids.begin(), pids.end());
  for (int p = 0; p < kMaxProcesses; ++p) {
    const ProcessSlot& ps = layout_->processes[p];
    if (ps.state.load() == kLive && dead.count(ps.host_pid.load()) != 0) {
      out.push_back("slot " + std::to_string(p) + " pid " + std::to_string(ps.host_pid.load()));
    }
  }
  return out;
}

const LedgerLayout* MapDaemonView(const std::string& shm_name) {
  uint32_t pid = 0;
  {
    const LedgerView segment(shm_name);
    if (!segment.ok()) return nullptr;
    pid = segment.layout()->daemon_pid.load();
  }
  // The label MemoryLedger::MakeView gives the memfd.
  const std::string want =
      "/memfd:tessera-view:" + shm_name.substr(shm_name.rfind('/') + 1) + " (deleted)";
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* fds = opendir(dir.c_str());
  if (fds == nullptr) return nullptr;
  const LedgerLayout* found = nullptr;
  while (const dirent* e = readdir(fds)) {
    const std::string path = dir + "/" + e->d_name;
    char target[512];
    const ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
    if (n <= 0 || std::string(target, static_cast<size_t>(n)) != want) continue;
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    void* mem = mmap(nullptr, sizeof(LedgerLayout), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (mem != MAP_FAILED) {
      found = static_cast<const LedgerLayout*>(mem);
      break;
    }
  }
  closedir(fds);
  return found;
}

}  // namespace tessera::ledger
