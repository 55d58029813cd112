// libFuzzer target: shared memory is untrusted input (issue 17, items 0 and 2). A captured process
// maps its container's segment and the exchange writable (ledger_layout.h), so the daemon must
// survive any bytes in them; and what no process can write (the sealed node view, the node
// segment in /dev/shm) is written too, as a kernel without the seal or a crash mid-write could
// leave it. Each input builds a fresh ledger with two containers and three registered processes
// (through the real Registry), then writes the input's bytes into those regions and runs the
// daemon's paths over them: repair, the arbiter's pass, reconciliation (memory and GPU time), a
// disconnect, the dead-process sweep and STATUS. Then it writes more bytes and reopens the ledger
// as a restarted daemon would, and runs the same paths again.
//
// Invariants (abort on violation): no crash or sanitizer report; after Repair() the view's and
// the node segment's daemon-owned fields equal the book, so a second Repair() finds nothing; a
// freshly reopened ledger's Repair() finds nothing; the book never holds a live process of a
// container that is not live, or a container index out of range.
//
// Input: records of 11 bytes: region (1: the view's containers, processes, gate, header; each
// container's segment; the exchange; the node segment; or a container's segment file cut to
// 64 × the offset bytes), offset (2, taken modulo the region's size), value (8, written at that
// offset, clipped to the region). The first half of the records
// is written before the first pass, the rest before the reopen.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "daemon/compute.h"
#include "daemon/reconciler.h"
#include "daemon/registry.h"
#include "ledger/admission.h"
#include "ledger/memory_ledger.h"
#include "protocol/protocol.h"

namespace {

namespace ledger = tessera::ledger;
namespace daemon = tessera::daemon;

constexpr size_t kRecord = 11;

const std::string& ShmName() {
  static const std::string name = "/tessera-ledger-fuzz-" + std::to_string(getpid());
  return name;
}

const std::vector<ledger::DeviceInfo>& Devices() {
  static const std::vector<ledger::DeviceInfo> devices = {
      {"GPU-aaaaaaaa-0000-4000-8000-000000000000", "FuzzA", 8ull << 30},
      {"GPU-bbbbbbbb-0000-4000-8000-000000000000", "FuzzB", 8ull << 30}};
  return devices;
}

// The node segment as a process with the daemon's rights maps it by name (no tenant is given it).
ledger::LedgerLayout* MapNodeSegment() {
  const int fd = shm_open(ShmName().c_str(), O_RDWR, 0);
  if (fd < 0) std::abort();
  void* mem =
      mmap(nullptr, sizeof(ledger::LedgerLayout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (mem == MAP_FAILED) std::abort();
  return static_cast<ledger::LedgerLayout*>(mem);
}

void Write(const ledger::MemoryLedger& ledger, ledger::LedgerLayout* node_segment,
           const std::vector<uint32_t>& containers, const uint8_t* record) {
  struct Region {
    uint8_t* base;
    size_t size;
  };
  ledger::LedgerLayout* l = ledger.layout();
  const Region regions[] = {
      {reinterpret_cast<uint8_t*>(l->containers), sizeof(l->containers)},
      {reinterpret_cast<uint8_t*>(l->processes), sizeof(l->processes)},
      {reinterpret_cast<uint8_t*>(&l->gate), sizeof(l->gate)},
      {reinterpret_cast<uint8_t*>(&l->device_count),
       offsetof(ledger::LedgerLayout, containers) - offsetof(ledger::LedgerLayout, device_count)},
      {reinterpret_cast<uint8_t*>(&ledger.segment(containers[0])),
       sizeof(ledger::ContainerSegment)},
      {reinterpret_cast<uint8_t*>(&ledger.segment(containers[1])),
       sizeof(ledger::ContainerSegment)},
      {reinterpret_cast<uint8_t*>(&ledger.exchange()), sizeof(ledger::Exchange)},
      {reinterpret_cast<uint8_t*>(node_segment), sizeof(ledger::LedgerLayout)},
  };
  const size_t offset16 = static_cast<size_t>(record[1]) << 8 | record[2];
  if (record[0] % 9 == 8) {
    // A process cuts (or grows) its container's segment file, as it may: its descriptor is
    // writable. The daemon reads zeros past the cut (segment_guard.h).
    const uint32_t c = containers[record[3] % containers.size()];
    const int fd = shm_open((ShmName() + ".c" + std::to_string(c)).c_str(), O_RDWR, 0);
    if (fd >= 0) {
      (void)ftruncate(fd, static_cast<off_t>(offset16 * 64));
      close(fd);
    }
    return;
  }
  const Region& r = regions[record[0] % 9];
  const size_t offset = offset16 % r.size;
  const size_t n = std::min<size_t>(8, r.size - offset);
  std::memcpy(r.base + offset, record + 3, n);
}

// The book's invariants (see the file comment).
void CheckBook(const ledger::MemoryLedger& l) {
  const ledger::LedgerBook& book = l.book();
  for (int p = 0; p < ledger::kMaxProcesses; ++p) {
    if (book.processes[p].state.load() != ledger::kLive) continue;
    const uint32_t c = book.processes[p].container.load();
    if (c >= static_cast<uint32_t>(ledger::kMaxContainers)) std::abort();
    if (book.containers[c].state.load() != ledger::kLive) std::abort();
  }
}

// The daemon's paths over whatever the segment holds now.
void RunDaemonPaths(daemon::Registry& registry, daemon::ComputeService& compute,
                    daemon::Reconciler& reconciler, const std::vector<uint32_t>& slots,
                    const std::vector<uint32_t>& generations) {
  (void)registry.Repair();
  if (!registry.WithLedger([](ledger::MemoryLedger& l) { return l.Repair().empty(); })) {
    std::abort();  // a repaired segment must agree with the book
  }
  compute.RunOnce();
  (void)reconciler.RunOnce();
  if (!slots.empty()) registry.Disconnected(slots.front(), generations.front());
  (void)registry.ReclaimDeadProcesses();
  compute.RunOnce();
  (void)registry.StatusJson();
  registry.WithLedger([](const ledger::MemoryLedger& l) { CheckBook(l); });
}

struct Daemon {
  std::unique_ptr<daemon::ComputeService> compute;
  std::unique_ptr<daemon::Registry> registry;
  std::unique_ptr<daemon::Reconciler> reconciler;
};

// A daemon over the named segment, as tesserad builds it; nullptr when the segment is refused
// (another layout or other devices: what the reopen path is allowed to say).
std::unique_ptr<Daemon> Open(const std::vector<daemon::DeviceProcess>* listed) {
  auto opened = ledger::MemoryLedger::CreateOrOpen(ShmName(), Devices());
  if (!opened.ok()) return nullptr;
  auto d = std::make_unique<Daemon>();
  auto compute = daemon::ComputeService::Create(*opened, daemon::ComputeOptions{});
  if (!compute.ok()) std::abort();
  d->compute = std::move(*compute);
  d->registry = std::make_unique<daemon::Registry>(std::move(*opened), daemon::RegistryOptions{},
                                                   d->compute.get());
  if (!d->registry->WithLedger([](ledger::MemoryLedger& l) { return l.Repair().empty(); })) {
    std::abort();  // a reopened segment is published from its book
  }
  daemon::ReconcilerOptions options;
  options.action = tessera::config::OverLimitAction::kBlock;
  options.signal = [](pid_t, int) { return 0; };
  options.log = [](const std::string&) {};
  options.busy = [listed](int) {  // the device's busy time: the same pids, bytes read as ns
    return tessera::Result<std::vector<daemon::DeviceProcess>>(*listed);
  };
  d->reconciler = std::make_unique<daemon::Reconciler>(
      d->registry.get(), 2,
      [listed](int) { return tessera::Result<std::vector<daemon::DeviceProcess>>(*listed); },
      options);
  return d;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ledger::MemoryLedger::Remove(ShmName());
  const int32_t alive = static_cast<int32_t>(getpid());
  const int32_t dead = 0x3ffffff0;  // above pid_max: never a process
  std::vector<daemon::DeviceProcess> listed = {{alive, 3ull << 30}, {dead, 1ull << 30}};
  {
    std::unique_ptr<Daemon> d = Open(&listed);
    if (!d) std::abort();
    std::vector<uint32_t> slots, generations;
    (void)d->registry->SetContainer(
        *tessera::protocol::ParseMessage("CONTAINER id=web mem=1073741824"));
    const struct {
      const char* line;
      int32_t pid;
    } hellos[] = {{"HELLO version=1 container=web", alive},
                  {"HELLO version=1 container=batch mem=2147483648 weight=2", dead},
                  {"HELLO version=1 container=web", dead}};
    for (const auto& h : hellos) {
      uint32_t slot = daemon::kNoProcess;
      auto reply = d->registry->Hello(*tessera::protocol::ParseMessage(h.line), h.pid, &slot);
      if (!reply.ok() || slot == daemon::kNoProcess) std::abort();
      slots.push_back(slot);
      generations.push_back(static_cast<uint32_t>(std::stoul(reply->Get("generation"))));
      d->registry->WithLedger([&](ledger::MemoryLedger& l) {
        // What the process's shim charges (admission.h), over the daemon's mapping of its segment.
        const uint32_t c = l.book().processes[slot].container.load();
        (void)ledger::ReserveIn(l.layout()->containers[c], l.segment(c), slot, 0, 256ull << 20);
      });
    }
    std::vector<uint32_t> containers;  // web's, batch's
    d->registry->WithLedger([&](const ledger::MemoryLedger& l) {
      for (int i : {0, 1}) containers.push_back(l.book().processes[slots[i]].container.load());
    });
    const ledger::MemoryLedger& l = d->registry->ledger();
    ledger::LedgerLayout* node_segment = MapNodeSegment();
    const size_t records = size / kRecord;
    for (size_t i = 0; i < records / 2; ++i) Write(l, node_segment, containers, data + i * kRecord);
    RunDaemonPaths(*d->registry, *d->compute, *d->reconciler, slots, generations);
    for (size_t i = records / 2; i < records; ++i) {
      Write(l, node_segment, containers, data + i * kRecord);
    }
    munmap(node_segment, sizeof(ledger::LedgerLayout));
  }
  // The restart: a new daemon on what the old one (and its tenants) left.
  if (std::unique_ptr<Daemon> d = Open(&listed)) {
    d->registry->WithLedger([](const ledger::MemoryLedger& l) { CheckBook(l); });
    RunDaemonPaths(*d->registry, *d->compute, *d->reconciler, {}, {});
  }
  ledger::MemoryLedger::Remove(ShmName());
  return 0;
}
