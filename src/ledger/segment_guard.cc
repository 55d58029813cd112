// SegmentGuard implementation: a SIGBUS handler that maps a page of zeros over a page of a guarded
// range that no longer has a file behind it. Everything the handler touches is a lock-free atomic
// or a raw system call: it runs on whichever daemon thread touched the lost page.
#include "ledger/segment_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <mutex>

namespace tessera::ledger {
namespace {

struct Guard {
  std::atomic<bool> taken{false};
  std::atomic<uintptr_t> begin{0}, end{0};  // 0, 0 while not armed
  std::atomic<size_t> segment_size{1};
  std::atomic<uint64_t> cut[kMaxContainers / 64] = {};
};

Guard g_guards[kMaxGuards];
struct sigaction g_previous {};
std::once_flag g_installed;

void OnBus(int sig, siginfo_t* info, void* context) {
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Guard& g : g_guards) {
    const uintptr_t begin = g.begin.load(std::memory_order_acquire);
    const uintptr_t end = g.end.load(std::memory_order_acquire);
    if (begin == 0 || addr < begin || addr >= end) continue;
    const uintptr_t page = addr & ~static_cast<uintptr_t>(kPageSize - 1);
    const long mapped = syscall(SYS_mmap, page, kPageSize, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (mapped == -1) break;  // cannot mend it: fail as if unguarded
    const size_t i = (addr - begin) / g.segment_size.load(std::memory_order_relaxed);
    if (i < static_cast<size_t>(kMaxContainers)) {
      g.cut[i / 64].fetch_or(uint64_t{1} << (i % 64), std::memory_order_acq_rel);
    }
    return;  // the access is made again, on the zeros
  }
  // Not a guarded page: whoever handled SIGBUS before, or the default action (the faulting
  // access runs again and ends the process as it would have).
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
  } else {
    signal(SIGBUS, SIG_DFL);
  }
}

void Install() {
  struct sigaction action {};
  action.sa_sigaction = OnBus;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  sigaction(SIGBUS, &action, &g_previous);
}

}  // namespace

SegmentGuard::SegmentGuard(void* base, size_t segment_size, int count) {
  std::call_once(g_installed, Install);
  for (int i = 0; i < kMaxGuards; ++i) {
    bool expected = false;
    if (!g_guards[i].taken.compare_exchange_strong(expected, true)) continue;
    Guard& g = g_guards[i];
    for (auto& word : g.cut) word.store(0);
    g.segment_size.store(segment_size);
    const auto begin = reinterpret_cast<uintptr_t>(base);
    g.end.store(begin + segment_size * static_cast<size_t>(count), std::memory_order_release);
    g.begin.store(begin, std::memory_order_release);
    slot_ = i;
    return;
  }
}

SegmentGuard::~SegmentGuard() {
  if (slot_ < 0) return;
  Guard& g = g_guards[slot_];
  g.begin.store(0, std::memory_order_release);
  g.end.store(0, std::memory_order_release);
  g.taken.store(false, std::memory_order_release);
}

std::bitset<kMaxContainers> SegmentGuard::TakeCut() {
  std::bitset<kMaxContainers> out;
  if (slot_ < 0) return out;
  for (int w = 0; w < kMaxContainers / 64; ++w) {
    const uint64_t bits = g_guards[slot_].cut[w].exchange(0, std::memory_order_acq_rel);
    for (int b = 0; b < 64; ++b) {
      if ((bits >> b) & 1) out.set(static_cast<size_t>(w * 64 + b));
    }
  }
  return out;
}

}  // namespace tessera::ledger
