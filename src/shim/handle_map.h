// HandleMap: the process-local, lock-free map from a device pointer or handle to what it was
// charged (device, bytes). Open addressing over a fixed table mapped once with MAP_NORESERVE, so
// inserts and erases are a few atomic operations with no locks, syscalls or allocation. Keys are
// stored plus 2 (0 marks an empty slot, 1 a removed one), so any handle value but the top two
// can be a key (simgpu's VMM handles start at 1). With 1M slots it holds far more live
// allocations than any allocator keeps; when full, Insert returns false and the caller does not
// charge (and says so once), rather than blocking.
#pragma once

#include <sys/mman.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace tessera::shim {

struct Charge {
  uint32_t device = 0;
  uint64_t bytes = 0;
};

class HandleMap {
 public:
  static constexpr size_t kSlots = size_t{1} << 20;

  bool Insert(uint64_t handle, Charge charge) {
    Slot* slots = Table();
    const uint64_t key = handle + 2;
    if (slots == nullptr || key <= kTombstone) return false;
    for (size_t i = Hash(key), probes = 0; probes < kSlots; i = (i + 1) & (kSlots - 1), ++probes) {
      uint64_t seen = slots[i].key.load(std::memory_order_acquire);
      if ((seen == kEmpty || seen == kTombstone) &&
          slots[i].key.compare_exchange_strong(seen, key, std::memory_order_acq_rel)) {
        // The slot is ours. A key is only ever erased after the call that inserted it returned
        // (a free follows its allocation), so nobody reads these before they are stored.
        slots[i].device.store(charge.device, std::memory_order_release);
        slots[i].bytes.store(charge.bytes, std::memory_order_release);
        return true;
      }
    }
    return false;
  }

  // Removes `key`; true (with what it was charged) when it was present.
  bool Erase(uint64_t handle, Charge* out) {
    Slot* slots = table_.load(std::memory_order_acquire);
    const uint64_t key = handle + 2;
    if (slots == nullptr || key <= kTombstone) return false;
    for (size_t i = Hash(key), probes = 0; probes < kSlots; i = (i + 1) & (kSlots - 1), ++probes) {
      uint64_t seen = slots[i].key.load(std::memory_order_acquire);
      if (seen == kEmpty) return false;
      if (seen == key) {
        out->device = slots[i].device.load(std::memory_order_acquire);
        out->bytes = slots[i].bytes.load(std::memory_order_acquire);
        if (slots[i].key.compare_exchange_strong(seen, kTombstone, std::memory_order_acq_rel)) {
          return true;
        }
        return false;  // another thread erased it first
      }
    }
    return false;
  }

 private:
  static constexpr uint64_t kEmpty = 0;
  static constexpr uint64_t kTombstone = 1;
  struct Slot {
    std::atomic<uint64_t> key;
    std::atomic<uint32_t> device;
    std::atomic<uint64_t> bytes;
  };

  static size_t Hash(uint64_t key) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return static_cast<size_t>(key) & (kSlots - 1);
  }

  // The table is mapped on first insert (one syscall, once per process).
  Slot* Table() {
    Slot* t = table_.load(std::memory_order_acquire);
    if (t != nullptr) return t;
    void* mem = mmap(nullptr, sizeof(Slot) * kSlots, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED) return nullptr;
    Slot* expected = nullptr;
    if (!table_.compare_exchange_strong(expected, static_cast<Slot*>(mem))) {
      munmap(mem, sizeof(Slot) * kSlots);
      return expected;
    }
    return static_cast<Slot*>(mem);
  }

  std::atomic<Slot*> table_{nullptr};
};

}  // namespace tessera::shim
