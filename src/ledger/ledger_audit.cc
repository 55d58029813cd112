// The daemon's book against the segment (memory_ledger.h, "Shared memory is untrusted input"):
// building the book from a segment an earlier daemon and its tenants left, writing book entries
// into the segment, and repairing what tenants rewrote. Everything here runs in tesserad only,
// under its registry's lock; nothing here trusts a value read from the segment before checking it.
#include <bitset>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "core/container_id.h"
#include "ledger/memory_ledger.h"

namespace tessera::ledger {
namespace {

constexpr uint32_t kKnownFlags = kContainerRegistered | kContainerBlocked;

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// A container slot's id as found in the segment: its text when it is NUL-terminated and a valid
// container id, else empty.
std::string ValidId(const ContainerSlot& slot) {
  const size_t n = strnlen(slot.id, sizeof(slot.id));
  if (n == sizeof(slot.id)) return "";
  const std::string_view id(slot.id, n);
  return IsValidContainerId(id) ? std::string(id) : std::string();
}

// A printable excerpt of a corrupt id, for the report.
std::string Excerpt(const char* bytes, size_t size) {
  std::string out;
  for (size_t i = 0; i < size && i < 24 && bytes[i] != '\0'; ++i) {
    const unsigned char ch = static_cast<unsigned char>(bytes[i]);
    out += (ch >= 0x20 && ch < 0x7f) ? static_cast<char>(ch) : '?';
  }
  return "\"" + out + (strnlen(bytes, size) > 24 ? "...\"" : "\"");
}

}  // namespace

void MemoryLedger::PublishContainer(uint32_t c) {
  const LedgerBook::Container& entry = book_->containers[c];
  for (LedgerLayout* l : {layout_, store_}) {
    ContainerSlot& slot = l->containers[c];
    std::memcpy(slot.id, entry.id, sizeof(slot.id));
    for (int d = 0; d < kMaxDevices; ++d) {
      slot.limit[d].store(entry.limit[d].load());
      slot.unseen[d].store(entry.unseen[d].load());
    }
    slot.core_percent.store(entry.core_percent.load());
    slot.weight.store(entry.weight.load());
    slot.high_priority.store(entry.high_priority.load());
    slot.process_count.store(entry.process_count.load());
    slot.flags.store(entry.flags.load());
    slot.generation.store(entry.generation.load());
    slot.state.store(entry.state.load(), std::memory_order_release);
  }
}

void MemoryLedger::PublishProcess(uint32_t p) {
  const LedgerBook::Process& entry = book_->processes[p];
  for (LedgerLayout* l : {layout_, store_}) {
    ProcessSlot& slot = l->processes[p];
    slot.host_pid.store(entry.host_pid.load());
    slot.local_pid.store(entry.local_pid.load());
    slot.container.store(entry.container.load());
    slot.generation.store(entry.generation.load());
    slot.state.store(entry.state.load(), std::memory_order_release);
  }
}

void MemoryLedger::AdoptSegment(bool fresh) {
  if (fresh) return;  // all zero: the book's defaults
  auto report = [this](const std::string& line) { open_report_.push_back("ledger: " + line); };

  // Containers: a live slot is taken with its settings brought into range; its id is checked
  // once its processes are known (a slot with processes is kept whatever its id).
  std::bitset<kMaxContainers> live, bad_id, rebuild;
  for (int c = 0; c < kMaxContainers; ++c) {
    const ContainerSlot& slot = store_->containers[c];
    LedgerBook::Container& entry = book_->containers[c];
    entry.generation.store(slot.generation.load());
    const uint32_t state = slot.state.load();
    if (state == kFree) continue;
    const std::string where = "container slot " + std::to_string(c);
    if (state != kLive) {
      report(where + ": state " + Hex(state) + " is neither free nor live; dropped");
      rebuild.set();  // processes of it, if any, are dropped below; where were their bytes?
      continue;
    }
    live.set(c);
    const std::string id = ValidId(slot);
    if (id.empty()) {
      bad_id.set(c);
    } else {
      std::snprintf(entry.id, sizeof(entry.id), "%s", id.c_str());
    }
    const std::string name = id.empty() ? where : where + " (" + id + ")";
    for (int d = 0; d < kMaxDevices; ++d) {
      entry.limit[d].store(slot.limit[d].load());
      entry.unseen[d].store(slot.unseen[d].load());
    }
    struct Setting {
      const char* what;
      uint32_t found, low, high, fallback;
      std::atomic<uint32_t>* into;
    } settings[] = {
        {"core_percent", slot.core_percent.load(), 1, 100, 100, &entry.core_percent},
        {"weight", slot.weight.load(), 1, 256, 1, &entry.weight},
        {"high_priority", slot.high_priority.load(), 0, 1, 0, &entry.high_priority},
    };
    for (const Setting& s : settings) {
      const bool ok = s.found >= s.low && s.found <= s.high;
      s.into->store(ok ? s.found : s.fallback);
      if (!ok) {
        report(name + ": " + s.what + " " + std::to_string(s.found) + " is outside " +
               std::to_string(s.low) + "-" + std::to_string(s.high) + "; set to " +
               std::to_string(s.fallback));
      }
    }
    const uint32_t flags = slot.flags.load();
    if ((flags & ~kKnownFlags) != 0) {
      report(name + ": unknown flag bits " + Hex(flags & ~kKnownFlags) + " cleared");
    }
    entry.flags.store(flags & kKnownFlags);
    entry.state.store(kLive);
    // Its counters: the segment the previous daemon made for it, or (gone, or not one this
    // daemon wrote) a new one, rebuilt below from what its processes hold, i.e. zero.
    const size_t reports = open_report_.size();
    if (Status s = MapContainerSegment(static_cast<uint32_t>(c), /*fresh=*/false); !s.ok()) {
      report(s.message());
    }
    if (open_report_.size() != reports) rebuild.set(c);
  }

  // Processes: a live slot must belong to a live container and name a process id; anything else
  // is dropped (its bytes cannot be attributed, so the containers they may sit in are rebuilt).
  uint32_t count[kMaxContainers] = {};
  for (int p = 0; p < kMaxProcesses; ++p) {
    const ProcessSlot& slot = store_->processes[p];
    LedgerBook::Process& entry = book_->processes[p];
    entry.generation.store(slot.generation.load());
    const uint32_t state = slot.state.load();
    if (state == kFree) continue;
    const uint32_t c = slot.container.load();
    const int32_t pid = slot.host_pid.load();
    std::string why;
    if (state != kLive) {
      why = "state " + Hex(state) + " is neither free nor live";
    } else if (c >= static_cast<uint32_t>(kMaxContainers)) {
      why = "container index " + Hex(c) + " is out of range";
    } else if (!live.test(c)) {
      why = "container slot " + std::to_string(c) + " is not live";
    } else if (pid <= 0) {
      why = "host pid " + std::to_string(pid) + " is not a process";
    }
    if (!why.empty()) {
      report("process slot " + std::to_string(p) + ": " + why + "; dropped");
      if (c < static_cast<uint32_t>(kMaxContainers)) {
        rebuild.set(c);
        ProcessCounters& counters = segments_[c].processes[p];  // zeros when c is not live
        for (int d = 0; d < kMaxDevices; ++d) counters.used[d].store(0);
        counters.busy_mask.store(0);
        for (int d = 0; d < kMaxDevices; ++d) counters.waiting[d].store(0);
      } else {
        rebuild.set();
      }
      entry.generation.fetch_add(1);
      PublishProcess(static_cast<uint32_t>(p));  // free, with a new generation
      continue;
    }
    const int32_t local = slot.local_pid.load();
    entry.host_pid.store(pid);
    entry.local_pid.store(local > 0 ? local : pid);
    entry.container.store(c);
    entry.state.store(kLive);
    ++count[c];
  }

  for (int c = 0; c < kMaxContainers; ++c) {
    if (!live.test(c)) {
      PublishContainer(static_cast<uint32_t>(c));  // free (a dropped one is written free here)
      continue;
    }
    LedgerBook::Container& entry = book_->containers[c];
    ContainerSlot& slot = store_->containers[c];
    if (bad_id.test(c)) {
      const std::string found = Excerpt(slot.id, sizeof(slot.id));
      if (count[c] == 0) {
        report("container slot " + std::to_string(c) + ": id " + found +
               " is not a container id and no process holds it; dropped");
        entry.state.store(kFree);
        entry.generation.fetch_add(1);
        for (int d = 0; d < kMaxDevices; ++d) segments_[c].counters.used[d].store(0);
        PublishContainer(static_cast<uint32_t>(c));
        continue;
      }
      std::snprintf(entry.id, sizeof(entry.id), "recovered-%d", c);
      report("container slot " + std::to_string(c) + ": id " + found +
             " is not a container id; its " + std::to_string(count[c]) +
             " process(es) keep it as " + entry.id);
    }
    if (slot.process_count.load() != count[c]) {
      report("container " + std::string(entry.id) + ": process count " +
             std::to_string(slot.process_count.load()) + " is not its " + std::to_string(count[c]) +
             " live process(es); corrected");
    }
    entry.process_count.store(count[c]);
    PublishContainer(static_cast<uint32_t>(c));
  }

  // Rebuild: a container's bytes in use are what its live processes hold.
  for (int c = 0; c < kMaxContainers; ++c) {
    if (!rebuild.test(c) || book_->containers[c].state.load() != kLive) continue;
    for (int d = 0; d < kMaxDevices; ++d) {
      uint64_t sum = 0;
      for (int p = 0; p < kMaxProcesses; ++p) {
        if (book_->processes[p].state.load() != kLive ||
            book_->processes[p].container.load() != static_cast<uint32_t>(c)) {
          continue;
        }
        const uint64_t held = segments_[c].processes[p].used[d].load();
        sum = held > ~uint64_t{0} - sum ? ~uint64_t{0} : sum + held;
      }
      const uint64_t had = segments_[c].counters.used[d].exchange(sum);
      if (had != sum) {
        report("container " + std::string(book_->containers[c].id) + ": bytes in use on GPU " +
               std::to_string(d) + " rebuilt from its processes: " + std::to_string(had) + " -> " +
               std::to_string(sum));
      }
    }
  }
}

std::vector<std::string> MemoryLedger::Repair() {
  // The view is sealed and the node segment is given to no process, so only something with the
  // daemon's own rights (or a kernel without the seal) can have rewritten either.
  std::vector<std::string> lines = RepairLayout(layout_);
  for (std::string& line : RepairLayout(store_)) {
    lines.push_back(line.replace(0, 7, "ledger (node segment):"));  // after "ledger:"
  }
  // A container segment one of its own processes shrank (segment_guard.h): the daemon has been
  // reading zeros past the cut. Its processes fault on their own mappings; new ones get a new file.
  const std::bitset<kMaxContainers> cut =
      guard_ ? guard_->TakeCut() : std::bitset<kMaxContainers>();
  for (int c = 0; c < kMaxContainers; ++c) {
    if (!cut.test(static_cast<size_t>(c)) || book_->containers[c].state.load() != kLive) continue;
    std::string line = "ledger: container slot " + std::to_string(c) + " (" +
                       book_->containers[c].id +
                       "): its segment was cut short by one of its own processes (ftruncate); its "
                       "counters are lost, its processes fault on their next use of it, and a new "
                       "segment is made for the container";
    if (Status s = MapContainerSegment(static_cast<uint32_t>(c), /*fresh=*/true); !s.ok()) {
      line += ", but: " + s.message();
    }
    lines.push_back(line);
  }
  return lines;
}

std::vector<std::string> MemoryLedger::RepairLayout(LedgerLayout* l) {
  std::vector<std::string> lines;
  for (int p = 0; p < kMaxProcesses; ++p) {
    const LedgerBook::Process& entry = book_->processes[p];
    const ProcessSlot& slot = l->processes[p];
    std::string fields;
    auto check = [&fields](const char* what, int64_t found, int64_t want) {
      if (found != want) {
        fields += std::string(fields.empty() ? "" : ", ") + what + " " + std::to_string(found) +
                  " (is " + std::to_string(want) + ")";
      }
    };
    check("state", slot.state.load(), entry.state.load());
    check("generation", slot.generation.load(), entry.generation.load());
    if (entry.state.load() == kLive) {  // a free slot's other fields mean nothing
      check("container", slot.container.load(), entry.container.load());
      check("host pid", slot.host_pid.load(), entry.host_pid.load());
      check("local pid", slot.local_pid.load(), entry.local_pid.load());
    }
    if (fields.empty()) continue;
    PublishProcess(static_cast<uint32_t>(p));
    lines.push_back("ledger: process slot " + std::to_string(p) + " (pid " +
                    std::to_string(entry.host_pid.load()) + ") was rewritten: " + fields +
                    "; restored");
  }
  for (int c = 0; c < kMaxContainers; ++c) {
    const LedgerBook::Container& entry = book_->containers[c];
    const ContainerSlot& slot = l->containers[c];
    std::string fields;
    auto check = [&fields](const std::string& what, uint64_t found, uint64_t want) {
      if (found != want) {
        fields += (fields.empty() ? "" : ", ") + what + " " + std::to_string(found) + " (is " +
                  std::to_string(want) + ")";
      }
    };
    check("state", slot.state.load(), entry.state.load());
    check("generation", slot.generation.load(), entry.generation.load());
    // A free slot's other fields mean nothing until the daemon takes it (and rewrites them).
    if (entry.state.load() != kLive) {
      if (!fields.empty()) {
        l->containers[c].state.store(kFree);
        l->containers[c].generation.store(entry.generation.load());
        lines.push_back("ledger: container slot " + std::to_string(c) +
                        " was rewritten: " + fields + "; restored");
      }
      continue;
    }
    if (std::strncmp(slot.id, entry.id, sizeof(slot.id)) != 0) {
      fields += std::string(fields.empty() ? "" : ", ") + "id " + Excerpt(slot.id, sizeof(slot.id));
    }
    for (int d = 0; d < static_cast<int>(book_->device_count); ++d) {
      check("limit[" + std::to_string(d) + "]", slot.limit[d].load(), entry.limit[d].load());
      check("unseen[" + std::to_string(d) + "]", slot.unseen[d].load(), entry.unseen[d].load());
    }
    check("core_percent", slot.core_percent.load(), entry.core_percent.load());
    check("weight", slot.weight.load(), entry.weight.load());
    check("high_priority", slot.high_priority.load(), entry.high_priority.load());
    check("process_count", slot.process_count.load(), entry.process_count.load());
    check("flags", slot.flags.load(), entry.flags.load());
    if (fields.empty()) continue;
    PublishContainer(static_cast<uint32_t>(c));
    lines.push_back("ledger: container slot " + std::to_string(c) +
                    (entry.state.load() == kLive ? " (" + std::string(entry.id) + ")" : "") +
                    " was rewritten: " + fields + "; restored");
  }
  const uint32_t devices = l->device_count.load();
  if (devices != book_->device_count ||
      std::memcmp(l->devices, book_->devices, sizeof(book_->devices)) != 0) {
    l->device_count.store(book_->device_count);
    std::memcpy(l->devices, book_->devices, sizeof(book_->devices));
    lines.push_back("ledger: the device table was rewritten (count " + std::to_string(devices) +
                    ", is " + std::to_string(book_->device_count) + "); restored");
  }
  return lines;
}

}  // namespace tessera::ledger
