// Clock: where the arbiter reads the time. Abstract so the arbiter's decisions can be driven by a
// ManualClock in tests; MonotonicClock is the real one (CLOCK_MONOTONIC via std::steady_clock).
//
// Nothing here sleeps, blocks or does I/O. Durations and instants are Nanos (nanoseconds); an
// instant is a Nanos since the clock's arbitrary epoch.
#pragma once

#include <chrono>

namespace tessera::arbiter {

using Nanos = std::chrono::nanoseconds;

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

// A clock that moves only when told to: for deterministic tests and simulations.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(Nanos start = Nanos{0}) : now_(start) {}
  Nanos Now() const override { return now_; }
  // Moves the clock forward by `delta`; a negative delta is ignored (time never goes backwards).
  void Advance(Nanos delta) {
    if (delta > Nanos{0}) {
      now_ += delta;
    }
  }
  // Moves the clock to `instant` if that is later than now.
  void AdvanceTo(Nanos instant) {
    if (instant > now_) {
      now_ = instant;
    }
  }

 private:
  Nanos now_;
};

}  // namespace tessera::arbiter
