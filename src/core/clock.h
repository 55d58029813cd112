// Clock: where code that decides by time reads the time (the arbiter, the extender's cluster
// picture). Abstract so those decisions can be driven by a ManualClock in tests; MonotonicClock is
// the real one (CLOCK_MONOTONIC through std::chrono::steady_clock), and RealClock() is the one
// instance of it that callers share.
//
// Steady time only: an instant is a Nanos since the clock's arbitrary epoch, meaningful only
// against instants of the same clock. Nothing here sleeps, blocks or does I/O.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/duration.h"

namespace tessera {

class Clock {
 public:
  virtual ~Clock() = default;
  // The current instant. Never goes backwards.
  virtual Nanos Now() const = 0;
};

// The host's monotonic clock.
class MonotonicClock final : public Clock {
 public:
  Nanos Now() const override;
};

// The host's monotonic clock, shared: what a caller gets that names no clock of its own.
const Clock& RealClock();

// A clock that moves only when told to: for deterministic tests and simulations. It may be read
// and moved from different threads (a test moves it while a server's threads read it).
class ManualClock final : public Clock {
 public:
  explicit ManualClock(Nanos start = Nanos{0}) : now_(start.count()) {}
  Nanos Now() const override { return Nanos{now_.load()}; }
  // Moves the clock forward by `delta`; a negative delta is ignored (time never goes backwards).
  void Advance(Nanos delta) {
    if (delta > Nanos{0}) {
      now_.fetch_add(delta.count());
    }
  }
  // Moves the clock to `instant` if that is later than now.
  void AdvanceTo(Nanos instant) {
    int64_t seen = now_.load();
    while (instant.count() > seen && !now_.compare_exchange_weak(seen, instant.count())) {
    }
  }

 private:
  std::atomic<int64_t> now_;
};

}  // namespace tessera
