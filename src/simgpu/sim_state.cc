// SimState: attaching to the shared simulated machine, process slots, capacity reservation, the
// device clock and the reaper. Lock-free by construction (see sim_state.h); the only syscalls are
// in Attach, ClaimSlot and the reaper's liveness checks, never in Reserve or BookKernel.
#include "simgpu/sim_state.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "core/bytes.h"
#include "simgpu/device_models.h"

namespace tessera::sim {
namespace {

constexpr uint64_t kAttachWaitNs = 3'000'000'000;  // how long to wait for a creator to finish

void AddBusy(BusyBucket* ring, int ring_size, uint64_t bucket_ns, uint64_t start, uint64_t end) {
  while (start < end) {
    const uint64_t epoch = start / bucket_ns;
    const uint64_t bucket_end = (epoch + 1) * bucket_ns;
    const uint64_t piece = std::min(end, bucket_end) - start;
    BusyBucket& b = ring[epoch % static_cast<uint64_t>(ring_size)];
    uint64_t seen = b.epoch.load(std::memory_order_acquire);
    if (seen < epoch) {
      // The bucket holds an older window: claim it for this one and start from zero. A racing
      // adder may lose its piece; utilisation is a statistic, never used for accounting.
      if (b.epoch.compare_exchange_strong(seen, epoch, std::memory_order_acq_rel)) {
        b.busy_ns.store(0, std::memory_order_release);
      }
    }
    if (b.epoch.load(std::memory_order_acquire) == epoch) {
      b.busy_ns.fetch_add(piece, std::memory_order_relaxed);
    }
    start += piece;
  }
}

double BusyFraction(const BusyBucket* ring, int ring_size, uint64_t bucket_ns, uint64_t window_ns) {
  const uint64_t now = MonotonicNs();
  const uint64_t from = now > window_ns ? now - window_ns : 0;
  uint64_t busy = 0;
  for (uint64_t epoch = from / bucket_ns; epoch <= now / bucket_ns; ++epoch) {
    const BusyBucket& b = ring[epoch % static_cast<uint64_t>(ring_size)];
    if (b.epoch.load(std::memory_order_acquire) != epoch) continue;
    uint64_t ns = b.busy_ns.load(std::memory_order_relaxed);
    // Buckets at the window's edges are only partly inside it; count them pro rata (capping at the
    // part inside instead overcounted a busy bucket split between two windows: consecutive
    // readings then summed to more than the device ran, which reconciliation reads as GPU time
    // the gates did not measure).
    const uint64_t b_start = epoch * bucket_ns, b_end = b_start + bucket_ns;
    const uint64_t inside = std::min(b_end, now) - std::max(b_start, from);
    if (inside < bucket_ns) {
      ns = static_cast<uint64_t>(static_cast<double>(std::min(ns, bucket_ns)) * inside / bucket_ns);
    }
    busy += ns;
  }
  return window_ns == 0 ? 0.0 : std::min(1.0, static_cast<double>(busy) / window_ns);
}

void MakeUuid(const char* prefix, int index, uint32_t generation, const std::string& state_name,
              char* out, size_t out_size) {
  // Deterministic per (state, index, generation) so every process of a simulation agrees,
  // distinct across simulations and across the lives of a MIG instance slot. FNV-1a over the
  // name, then the index and generation.
  uint64_t h = 1469598103934665603ull;
  for (char c : state_name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  if (generation != 0) {  // splitmix64 of the generation, so lives of one slot differ widely
    uint64_t z = h + generation * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    h = z ^ (z >> 31);
  }
  const uint64_t a = h ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(index + 1));
  const uint64_t b = (a * 6364136223846793005ull) + 1442695040888963407ull;
  std::snprintf(out, out_size, "%s-%08x-%04x-%04x-%04x-%012llx", prefix,
                static_cast<unsigned>(a >> 32), static_cast<unsigned>((a >> 16) & 0xffff),
                static_cast<unsigned>(0x4000 | (a & 0x0fff)),
                static_cast<unsigned>(0x8000 | ((b >> 48) & 0x3fff)),
                static_cast<unsigned long long>(b & 0xffffffffffffull));
}

// Gives back the memory and compute slices (and the media extensions) of an instance of `p` at
// `start` on GPU `g`.
void ReleaseMigSlices(SimDevice& g, const mig::MigProfile& p, int start) {
  const uint64_t bits = ((1ull << p.memory_slices) - 1) << start;
  uint64_t c = g.mig_slices.load(std::memory_order_acquire);
  for (;;) {
    const uint64_t compute =
        ((c >> kMigComputeShift) & 0xff) - static_cast<uint64_t>(p.compute_slices);
    const uint64_t next = ((c & 0xff) & ~bits) | (compute << kMigComputeShift) |
                          (p.media_extensions ? 0 : (c & kMigMediaBit));
    if (g.mig_slices.compare_exchange_weak(c, next, std::memory_order_acq_rel)) return;
  }
}

}  // namespace

uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void SleepUntilNs(uint64_t deadline_ns) {
  timespec ts;
  ts.tv_sec = static_cast<time_t>(deadline_ns / 1'000'000'000ull);
  ts.tv_nsec = static_cast<long>(deadline_ns % 1'000'000'000ull);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

uint64_t ProcessStartTicks(int32_t pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  // Fields after the command name (which may hold spaces) start after the last ')'.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) return 0;
  // p+2 is field 3 (state); starttime is field 22.
  int field = 3;
  for (const char* q = p + 2; *q != '\0'; ++q) {
    if (*q == ' ') {
      ++field;
      if (field == 22) return std::strtoull(q + 1, nullptr, 10);
    }
  }
  return 0;
}

bool ProcessAlive(int32_t pid, uint64_t start_ticks) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno != ENOENT;  // no /proc (or no permission): trust kill()
  char buf[512];
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return true;
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');
  if (p != nullptr && (p[2] == 'Z' || p[2] == 'X')) return false;  // zombie or dead
  if (start_ticks != 0) {
    const uint64_t now_ticks = ProcessStartTicks(pid);
    if (now_ticks != 0 && now_ticks != start_ticks) return false;  // the pid was reused
  }
  return true;
}

Result<std::vector<SimDeviceConfig>> ParseSimGpus(const char* text) {
  std::vector<SimDeviceConfig> out;
  const std::string_view allowed =
      "expected a comma list of NAME:MEMORY[:SMS][:mig=MODEL], e.g. "
      "SimA100:40GiB:108,SimH100:80GiB:132:mig=H100-80GB";
  if (text == nullptr || *text == '\0') {
    out.push_back({"SimGPU", 16ull << 30, 80});
    return out;
  }
  const std::string all(text);
  auto fail = [&](const std::string& why) {
    return Result<std::vector<SimDeviceConfig>>::Error("TESSERA_SIM_GPUS=\"" + all + "\": " + why +
                                                       "; " + std::string(allowed));
  };
  size_t pos = 0;
  while (pos <= all.size()) {
    size_t comma = all.find(',', pos);
    if (comma == std::string::npos) comma = all.size();
    const std::string item = all.substr(pos, comma - pos);
    pos = comma + 1;
    const size_t c1 = item.find(':');
    if (item.empty()) return fail("empty device entry");
    if (c1 == std::string::npos || c1 == 0)
      return fail("device \"" + item + "\" has no NAME:MEMORY");
    SimDeviceConfig dev;
    dev.name = item.substr(0, c1);
    if (dev.name.size() > 63) return fail("device name \"" + dev.name + "\" is longer than 63");
    for (char c : dev.name) {
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ' ' ||
            c == '.')) {
        return fail("device name \"" + dev.name + "\" has a character other than [A-Za-z0-9 ._-]");
      }
    }
    // The fields after the name: MEMORY, then optionally SMS, then optionally mig=MODEL.
    std::vector<std::string> fields;
    for (size_t f = c1 + 1;;) {
      const size_t next = item.find(':', f);
      fields.push_back(item.substr(f, next == std::string::npos ? std::string::npos : next - f));
      if (next == std::string::npos) break;
      f = next + 1;
    }
    auto bytes = ParseBytes(fields[0], "TESSERA_SIM_GPUS memory of " + dev.name);
    if (!bytes.ok()) return fail(bytes.error());
    dev.total_bytes = bytes->count();
    if (dev.total_bytes < (64ull << 20) || dev.total_bytes > (1ull << 44)) {
      return fail("memory of " + dev.name + " must be between 64MiB and 16TiB");
    }
    bool sms_given = false;
    for (size_t f = 1; f < fields.size(); ++f) {
      const std::string& field = fields[f];
      if (field.rfind("mig=", 0) == 0) {
        if (f + 1 != fields.size()) {
          return fail("mig=MODEL must be the last field of " + dev.name);
        }
        auto model = mig::FindGpuModel(field.substr(4), "mig");
        if (!model.ok()) return fail("device " + dev.name + ": " + model.error());
        dev.mig_model = static_cast<int>(*model - mig::GpuModels().data());
        continue;
      }
      if (f != 1) {
        return fail("field \"" + field + "\" of " + dev.name +
                    " is neither the SM count (the third field) nor mig=MODEL");
      }
      const std::string& sms = field;
      char* end = nullptr;
      errno = 0;
      const unsigned long v = std::strtoul(sms.c_str(), &end, 10);
      if (sms.empty() || *end != '\0' || errno != 0 || v < 1 || v > 1024 ||
          !std::isdigit(static_cast<unsigned char>(sms[0]))) {
        return fail("SM count \"" + sms + "\" of " + dev.name + " must be an integer 1-1024");
      }
      dev.sm_count = static_cast<uint32_t>(v);
      sms_given = true;
    }
    const int spec = GpuSpecFor(dev.name, dev.total_bytes, dev.mig_model);
    dev.spec = spec >= 0 ? spec : kDefaultGpuSpec;
    if (spec >= 0 && !sms_given) {
      dev.sm_count = static_cast<uint32_t>(GpuSpecs()[static_cast<size_t>(spec)].sms);
    }
    out.push_back(dev);
    if (comma == all.size()) break;
  }
  if (out.size() > static_cast<size_t>(kMaxGpus)) {
    return fail("at most " + std::to_string(kMaxGpus) + " devices are simulated");
  }
  return out;
}

Result<std::string> SimStateObjectName(const char* text) {
  if (text == nullptr || *text == '\0') {
    return "/tessera-sim-uid" + std::to_string(getuid());
  }
  const std::string name(text);
  bool ok = name.size() <= 64;
  for (char c : name) {
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-');
  }
  if (!ok) {
    return Result<std::string>::Error(
        "TESSERA_SIM_STATE=\"" + name +
        "\": expected 1-64 characters of [A-Za-z0-9_.-], or an absolute file path");
  }
  return "/tessera-sim-" + name;
}

Result<std::string> SimStatePath(const char* text) {
  if (text == nullptr || text[0] != '/') {
    auto name = SimStateObjectName(text);
    if (!name.ok()) return name.status();
    return "/dev/shm" + *name;
  }
  const std::string path(text);
  if (path.size() > 255 || path.back() == '/' || path.find("/../") != std::string::npos ||
      path.find("/./") != std::string::npos || path.find("//") != std::string::npos) {
    return Result<std::string>::Error("TESSERA_SIM_STATE=\"" + path +
                                      "\": expected an absolute file path (at most 255 "
                                      "characters, no . or .. or empty components), or a name");
  }
  return path;
}

Result<SimState*> SimState::Attach() {
  auto name = SimStatePath(std::getenv("TESSERA_SIM_STATE"));
  if (!name.ok()) return name.status();
  const char* gpus_text = std::getenv("TESSERA_SIM_GPUS");
  auto configs = ParseSimGpus(gpus_text);
  if (!configs.ok()) return configs.status();

  const size_t size = sizeof(SimStateLayout);
  for (int attempt = 0; attempt < 2; ++attempt) {
    int fd = open(name->c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    const bool creator = fd >= 0;
    if (!creator) {
      if (errno != EEXIST) {
        return Result<SimState*>::Error("simgpu: cannot create shared state " + *name + ": " +
                                        std::strerror(errno));
      }
      fd = open(name->c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0600);
      if (fd < 0) {
        return Result<SimState*>::Error("simgpu: cannot open shared state " + *name + ": " +
                                        std::strerror(errno));
      }
    } else if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
      const int err = errno;
      close(fd);
      unlink(name->c_str());
      return Result<SimState*>::Error("simgpu: cannot size shared state " + *name + ": " +
                                      std::strerror(err));
    }
    // Wait for the creator's ftruncate before mapping.
    const uint64_t deadline = MonotonicNs() + kAttachWaitNs;
    struct stat st {};
    while (fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) < size &&
           MonotonicNs() < deadline) {
      SleepUntilNs(MonotonicNs() + 1'000'000);
    }
    if (static_cast<size_t>(st.st_size) != size) {
      close(fd);
      if (static_cast<size_t>(st.st_size) > 0) {
        return Result<SimState*>::Error(
            "simgpu: shared state " + *name + " has size " + std::to_string(st.st_size) +
            ", this simgpu expects " + std::to_string(size) +
            " (another version); remove it or pick another TESSERA_SIM_STATE");
      }
      unlink(name->c_str());  // an abandoned, never-sized object: start again
      continue;
    }
    void* mem = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mem == MAP_FAILED) {
      const int err = errno;
      close(fd);
      return Result<SimState*>::Error("simgpu: cannot map shared state " + *name + ": " +
                                      std::strerror(err));
    }
    auto* layout = static_cast<SimStateLayout*>(mem);
    if (creator) {
      layout->magic = kSimStateMagic;
      layout->version = kSimStateVersion;
      layout->size = size;
      layout->creator_pid = getpid();
      layout->device_count = static_cast<uint32_t>(configs->size());
      std::snprintf(layout->config, sizeof(layout->config), "%s", gpus_text ? gpus_text : "");
      for (size_t i = 0; i < configs->size(); ++i) {
        SimDevice& d = layout->devices[i];
        std::snprintf(d.name, sizeof(d.name), "%s", (*configs)[i].name.c_str());
        MakeUuid("GPU", static_cast<int>(i), 0, *name, d.uuid, sizeof(d.uuid));
        d.total_bytes = (*configs)[i].total_bytes;
        d.sm_count = (*configs)[i].sm_count;
        d.spec = static_cast<uint32_t>((*configs)[i].spec);
        d.mig_parent = -1;
        if ((*configs)[i].mig_model >= 0) {
          d.mig_model = static_cast<uint32_t>((*configs)[i].mig_model + 1);
          d.mig_state.store(1);  // MIG mode on
        }
      }
      for (int slot = kMaxGpus; slot < kMaxDevices; ++slot) layout->devices[slot].mig_parent = -1;
      layout->ready.store(1, std::memory_order_release);
    } else {
      while (layout->ready.load(std::memory_order_acquire) == 0 && MonotonicNs() < deadline) {
        SleepUntilNs(MonotonicNs() + 1'000'000);
      }
      if (layout->ready.load(std::memory_order_acquire) == 0) {
        const bool creator_alive = ProcessAlive(layout->creator_pid, 0);
        munmap(mem, size);
        close(fd);
        if (!creator_alive) {
          unlink(name->c_str());  // its creator died half-way: start again
          continue;
        }
        return Result<SimState*>::Error("simgpu: shared state " + *name +
                                        " was never initialised by pid " +
                                        std::to_string(layout->creator_pid));
      }
      if (layout->magic != kSimStateMagic || layout->version != kSimStateVersion ||
          layout->size != size) {
        munmap(mem, size);
        close(fd);
        return Result<SimState*>::Error("simgpu: shared state /dev/shm" + *name +
                                        " has another layout version; remove it or pick another "
                                        "TESSERA_SIM_STATE");
      }
    }
    // The descriptor stays open for the process's life: its slot's record lock lives on it.
    return new SimState(layout, *name, fd);
  }
  return Result<SimState*>::Error("simgpu: could not create shared state " + *name);
}

int SimState::ClaimSlot() {
  const int32_t me = getpid();
  if (slot_ >= 0 && layout_->processes[slot_].pid.load() == me) return slot_;
  const uint64_t ticks = ProcessStartTicks(me);
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < kMaxProcesses; ++i) {
      SimProcess& p = layout_->processes[i];
      uint32_t expected = kSlotFree;
      if (!p.state.compare_exchange_strong(expected, kSlotClaiming, std::memory_order_acq_rel)) {
        continue;
      }
      for (int d = 0; d < kMaxDevices; ++d) {
        p.used_bytes[d].store(0);
        p.busy_ns_total[d].store(0);
        for (auto& b : p.busy[d]) {
          b.epoch.store(0);
          b.busy_ns.store(0);
        }
      }
      p.context_mask.store(0);
      p.start_ticks.store(ticks);
      p.locked.store(SetSlotLock(i, F_WRLCK) ? 1 : 0);
      p.pid.store(me);
      p.state.store(kSlotLive, std::memory_order_release);
      slot_ = i;
      return i;
    }
    ReapDead();
  }
  return -1;
}

off_t SimState::SlotLockByte(int index) {
  return static_cast<off_t>(offsetof(SimStateLayout, processes) +
                            static_cast<size_t>(index) * sizeof(SimProcess));
}

bool SimState::SetSlotLock(int index, short type) const {
  if (fd_ < 0) return false;
  struct flock fl {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = SlotLockByte(index);
  fl.l_len = 1;
  return fcntl(fd_, F_SETLK, &fl) == 0;
}

bool SimState::SlotAlive(int index, int32_t* pid_here) const {
  const SimProcess& p = layout_->processes[index];
  const int32_t recorded = p.pid.load();
  if (index == slot_ && recorded == getpid()) {
    if (pid_here != nullptr) *pid_here = recorded;
    return true;
  }
  if (p.locked.load() == 1 && fd_ >= 0) {
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = SlotLockByte(index);
    fl.l_len = 1;
    if (fcntl(fd_, F_GETLK, &fl) == 0) {
      // The kernel gives the holder's pid as this process's PID namespace sees it (0 when it
      // cannot see it), as a GPU driver knows its clients' pids whatever namespace they are in.
      if (pid_here != nullptr) *pid_here = fl.l_type == F_UNLCK ? 0 : std::max(fl.l_pid, 0);
      return fl.l_type != F_UNLCK;
    }
  }
  if (pid_here != nullptr) *pid_here = recorded;
  return ProcessAlive(recorded, p.start_ticks.load());
}

void SimState::ReapSlot(int index) {
  SimProcess& p = layout_->processes[index];
  for (int d = 0; d < kMaxDevices; ++d) {
    const uint64_t held = p.used_bytes[d].exchange(0);
    if (held != 0) {
      // Saturating subtraction: the device counter never wraps below zero.
      uint64_t cur = layout_->devices[d].used_bytes.load();
      while (
          !layout_->devices[d].used_bytes.compare_exchange_weak(cur, cur > held ? cur - held : 0)) {
      }
    }
  }
  p.context_mask.store(0);
  p.locked.store(0);
  p.pid.store(0);
  p.generation.fetch_add(1);
  p.state.store(kSlotFree, std::memory_order_release);
}

int SimState::ReapDead() {
  int reaped = 0;
  for (int i = 0; i < kMaxProcesses; ++i) {
    SimProcess& p = layout_->processes[i];
    if (p.state.load(std::memory_order_acquire) != kSlotLive) continue;
    const int32_t pid = p.pid.load();
    if (SlotAlive(i, nullptr)) continue;
    uint32_t expected = kSlotLive;
    if (!p.state.compare_exchange_strong(expected, kSlotReaping)) continue;  // someone else won
    if (p.pid.load() != pid) {  // re-claimed in between: not ours to reap
      p.state.store(kSlotLive);
      continue;
    }
    ReapSlot(i);
    ++reaped;
  }
  return reaped;
}

bool SimState::Reserve(int d, uint64_t bytes) {
  SimDevice& dev = layout_->devices[d];
  for (int attempt = 0; attempt < 2; ++attempt) {
    uint64_t cur = dev.used_bytes.load(std::memory_order_relaxed);
    while (bytes <= dev.total_bytes && cur <= dev.total_bytes - bytes) {
      if (dev.used_bytes.compare_exchange_weak(cur, cur + bytes, std::memory_order_acq_rel)) {
        if (SimProcess* p = process()) p->used_bytes[d].fetch_add(bytes);
        return true;
      }
    }
    if (attempt == 0 && ReapDead() == 0) return false;
  }
  return false;
}

void SimState::Unreserve(int d, uint64_t bytes) {
  SimDevice& dev = layout_->devices[d];
  auto saturating_sub = [](std::atomic<uint64_t>& counter, uint64_t n) {
    uint64_t cur = counter.load(std::memory_order_relaxed);
    while (!counter.compare_exchange_weak(cur, cur > n ? cur - n : 0, std::memory_order_acq_rel)) {
    }
  };
  if (SimProcess* p = process()) saturating_sub(p->used_bytes[d], bytes);
  saturating_sub(dev.used_bytes, bytes);
}

uint64_t SimState::BookKernel(int d, uint64_t earliest_ns, uint64_t duration_ns,
                              uint64_t* start_ns) {
  SimDevice& dev = layout_->devices[d];
  uint64_t busy = dev.busy_until_ns.load(std::memory_order_acquire);
  uint64_t start = 0, end = 0;
  do {
    start = std::max(earliest_ns, busy);
    end = start + duration_ns;
  } while (duration_ns != 0 &&
           !dev.busy_until_ns.compare_exchange_weak(busy, end, std::memory_order_acq_rel));
  dev.kernels.fetch_add(1, std::memory_order_relaxed);
  if (duration_ns != 0) {
    dev.busy_ns_total.fetch_add(duration_ns, std::memory_order_relaxed);
    AddBusy(dev.busy, kDeviceBuckets, kDeviceBucketNs, start, end);
    if (SimProcess* p = process()) {
      p->busy_ns_total[d].fetch_add(duration_ns, std::memory_order_relaxed);
      AddBusy(p->busy[d], kProcessBuckets, kProcessBucketNs, start, end);
    }
  }
  if (start_ns != nullptr) *start_ns = start;
  return end;
}

// ---- MIG
// ------------------------------------------------------------------------------------------

bool SimState::MigDeviceReady(int d) const {
  return d >= kMaxGpus && d < kMaxDevices &&
         layout_->devices[d].mig_state.load(std::memory_order_acquire) == kMigReady;
}

const mig::GpuModel* SimState::MigModel(int gpu) const {
  if (gpu < 0 || gpu >= device_count()) return nullptr;
  const uint32_t m = layout_->devices[gpu].mig_model;
  if (m == 0 || m > mig::GpuModels().size()) return nullptr;
  return &mig::GpuModels()[m - 1];
}

DeviceFacts SimState::Facts(int d) const {
  const SimDevice& dev = layout_->devices[d];
  const bool mig = d >= kMaxGpus && dev.mig_parent >= 0 && dev.mig_parent < kMaxGpus;
  const int gpu = mig ? dev.mig_parent : d;
  const uint32_t spec = layout_->devices[gpu].spec;
  DeviceFacts f;
  f.spec = &GpuSpecs()[spec < GpuSpecs().size() ? spec : kDefaultGpuSpec];
  f.sms = dev.sm_count;
  f.total_bytes = dev.total_bytes;
  f.pci_bus = 0x10 + gpu;
  f.gpu_index = gpu;
  if (mig) {
    if (const mig::GpuModel* model = MigModel(gpu);
        model != nullptr && dev.mig_profile < static_cast<uint32_t>(model->profile_count)) {
      const mig::MigProfile& p = model->profiles[dev.mig_profile];
      f.mig_fraction_num = p.memory_slices;
      f.mig_fraction_den = model->memory_slices;
      f.mig_copy_engines = p.compute_slices;
    }
  }
  return f;
}

bool SimState::MigEnabled(int gpu) const {
  return MigModel(gpu) != nullptr && layout_->devices[gpu].mig_state.load() == 1;
}

int SimState::ProcessesOn(int d) const {
  int n = 0;
  for (const SimProcess& p : layout_->processes) {
    if (p.state.load(std::memory_order_acquire) != kSlotLive) continue;
    if (p.used_bytes[d].load() != 0 || (p.context_mask.load() >> d) & 1u) ++n;
  }
  return n;
}

int SimState::CreateGpuInstance(int gpu, int profile_index, int start, MigRefusal* why) {
  *why = MigRefusal::kNone;
  const mig::GpuModel* model = MigModel(gpu);
  if (model == nullptr || !MigEnabled(gpu) || profile_index < 0 ||
      profile_index >= model->profile_count) {
    *why = MigRefusal::kNotMig;
    return -1;
  }
  const mig::MigProfile& p = model->profiles[profile_index];
  if (start >= 0 && (start >= model->memory_slices || ((p.start_mask >> start) & 1u) == 0 ||
                     start + p.memory_slices > model->memory_slices)) {
    *why = MigRefusal::kBadPlacement;
    return -1;
  }
  // Reserve the slices: one CAS on the GPU's word, so two creators never overlap.
  SimDevice& g = layout_->devices[gpu];
  uint64_t cur = g.mig_slices.load(std::memory_order_acquire);
  int chosen = -1;
  for (;;) {
    const uint64_t used = cur & 0xff;
    const uint64_t compute = (cur >> kMigComputeShift) & 0xff;
    const bool media = (cur & kMigMediaBit) != 0;
    chosen = -1;
    for (int s = start >= 0 ? start : 0; s < model->memory_slices; ++s) {
      const uint64_t bits = ((1ull << p.memory_slices) - 1) << s;
      const bool fits = ((p.start_mask >> s) & 1u) != 0 &&
                        s + p.memory_slices <= model->memory_slices && (used & bits) == 0 &&
                        compute + static_cast<uint64_t>(p.compute_slices) <=
                            static_cast<uint64_t>(model->compute_slices) &&
                        !(media && p.media_extensions);
      if (fits) {
        chosen = s;
        break;
      }
      if (start >= 0) break;
    }
    if (chosen < 0) {
      *why = MigRefusal::kNoSpace;
      return -1;
    }
    const uint64_t next =
        (used | (((1ull << p.memory_slices) - 1) << chosen)) |
        ((compute + static_cast<uint64_t>(p.compute_slices)) << kMigComputeShift) |
        (media || p.media_extensions ? kMigMediaBit : 0);
    if (g.mig_slices.compare_exchange_weak(cur, next, std::memory_order_acq_rel)) break;
  }
  // A slot: instances hold their slot only while they hold slices (claimed after, freed before),
  // and there are never more instances than slots, so one is free.
  for (int k = 0; k < kMigSlotsPerGpu; ++k) {
    const int slot = MigSlot(gpu, k);
    SimDevice& d = layout_->devices[slot];
    uint32_t expected = kMigFree;
    if (!d.mig_state.compare_exchange_strong(expected, kMigCreating, std::memory_order_acq_rel)) {
      continue;
    }
    d.mig_parent = gpu;
    d.mig_model = g.mig_model;
    d.mig_profile = static_cast<uint32_t>(profile_index);
    d.mig_start = static_cast<uint32_t>(chosen);
    // A name longer than the field is cut there, as NVML cuts a name to the caller's buffer.
    if (std::snprintf(d.name, sizeof(d.name), "%s MIG %.*s", g.name,
                      static_cast<int>(p.name.size()), p.name.data()) < 0) {
      d.name[0] = '\0';
    }
    d.uuid[0] = '\0';
    const uint64_t share = g.total_bytes / static_cast<uint64_t>(model->memory_slices) *
                           static_cast<uint64_t>(p.memory_slices);
    d.total_bytes = share / (2ull << 20) * (2ull << 20);
    d.sm_count = MigInstanceSms(*model, p, g.sm_count);
    d.spec = g.spec;
    d.used_bytes.store(0);
    d.busy_until_ns.store(0);
    d.kernels.store(0);
    d.busy_ns_total.store(0);
    for (BusyBucket& b : d.busy) {
      b.epoch.store(0);
      b.busy_ns.store(0);
    }
    d.mig_state.store(kMigGpuInstance, std::memory_order_release);
    return slot;
  }
  // Unreachable by the argument above; give the slices back rather than leak them.
  ReleaseMigSlices(g, p, chosen);
  *why = MigRefusal::kNoSpace;
  return -1;
}

SimState::MigRefusal SimState::DestroyGpuInstance(int slot) {
  if (slot < kMaxGpus || slot >= kMaxDevices) return MigRefusal::kWrongState;
  SimDevice& d = layout_->devices[slot];
  uint32_t expected = kMigGpuInstance;
  if (!d.mig_state.compare_exchange_strong(expected, kMigBusy, std::memory_order_acq_rel)) {
    return expected == kMigReady ? MigRefusal::kInUse : MigRefusal::kWrongState;
  }
  const int gpu = d.mig_parent;
  const mig::GpuModel* model = MigModel(gpu);
  const mig::MigProfile& p = model->profiles[d.mig_profile];
  d.name[0] = '\0';
  d.mig_parent = -1;
  d.mig_generation.fetch_add(1);
  d.mig_state.store(kMigFree, std::memory_order_release);  // the slot first, then the slices
  ReleaseMigSlices(layout_->devices[gpu], p, static_cast<int>(d.mig_start));
  return MigRefusal::kNone;
}

SimState::MigRefusal SimState::CreateComputeInstance(int slot) {
  if (slot < kMaxGpus || slot >= kMaxDevices) return MigRefusal::kWrongState;
  SimDevice& d = layout_->devices[slot];
  uint32_t expected = kMigGpuInstance;
  if (!d.mig_state.compare_exchange_strong(expected, kMigBusy, std::memory_order_acq_rel)) {
    return expected == kMigReady ? MigRefusal::kNoSpace : MigRefusal::kWrongState;
  }
  MakeUuid("MIG", slot, d.mig_generation.load() + 1, object_name_, d.uuid, sizeof(d.uuid));
  d.mig_state.store(kMigReady, std::memory_order_release);
  return MigRefusal::kNone;
}

SimState::MigRefusal SimState::DestroyComputeInstance(int slot) {
  if (slot < kMaxGpus || slot >= kMaxDevices) return MigRefusal::kWrongState;
  SimDevice& d = layout_->devices[slot];
  uint32_t expected = kMigReady;
  if (!d.mig_state.compare_exchange_strong(expected, kMigBusy, std::memory_order_acq_rel)) {
    return MigRefusal::kWrongState;
  }
  ReapDead();
  if (ProcessesOn(slot) > 0) {
    d.mig_state.store(kMigReady, std::memory_order_release);
    return MigRefusal::kInUse;
  }
  d.uuid[0] = '\0';
  d.mig_state.store(kMigGpuInstance, std::memory_order_release);
  return MigRefusal::kNone;
}

SimState::MigRefusal SimState::SetMigMode(int gpu, bool on) {
  if (MigModel(gpu) == nullptr) return MigRefusal::kNotMig;
  ReapDead();
  SimDevice& g = layout_->devices[gpu];
  if (MigEnabled(gpu) == on) return MigRefusal::kNone;
  if (on ? ProcessesOn(gpu) > 0 : (g.mig_slices.load() != 0)) return MigRefusal::kInUse;
  g.mig_state.store(on ? 1 : 0, std::memory_order_release);
  return MigRefusal::kNone;
}

double SimState::DeviceBusyFraction(int d, uint64_t window_ns) const {
  return BusyFraction(layout_->devices[d].busy, kDeviceBuckets, kDeviceBucketNs, window_ns);
}

double SimState::ProcessBusyFraction(int slot, int d, uint64_t window_ns) const {
  return BusyFraction(layout_->processes[slot].busy[d], kProcessBuckets, kProcessBucketNs,
                      window_ns);
}

}  // namespace tessera::sim
