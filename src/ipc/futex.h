// Futex wait and wake on a 32-bit word in shared memory: how the compute gate hands the GPU token
// from the daemon to waiting processes (and how processes wake the daemon) without a round trip
// through a socket. Process-shared futexes (no FUTEX_PRIVATE_FLAG): the word may be mapped at a
// different address in every process. These are system calls: never on a fast path.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace tessera::ipc {

// Sleeps while `*word == expected`, at most `timeout_ns` (0: do not sleep). Returns when woken,
// when the word differs, on a signal, or on timeout; callers re-check their condition. The word
// may be in a read-only mapping (a process waits on the daemon's words in the node view).
inline void FutexWait(const std::atomic<uint32_t>* word, uint32_t expected, uint64_t timeout_ns) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  if (timeout_ns == 0) return;
  timespec ts{static_cast<time_t>(timeout_ns / 1000000000ull),
              static_cast<long>(timeout_ns % 1000000000ull)};
  syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr,
          0);
}

// Wakes every waiter on `word` (which, too, may be in a read-only mapping).
inline void FutexWakeAll(const std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), FUTEX_WAKE, 0x7fffffff, nullptr,
          nullptr, 0);
}

// CLOCK_MONOTONIC in nanoseconds (a vDSO call, not a system call): the time base the daemon,
// the gate and simgpu's device clock share.
inline uint64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace tessera::ipc
