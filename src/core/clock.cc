// MonotonicClock and the shared RealClock: the host's steady clock. No other clock logic lives
// here.
#include "core/clock.h"

#include <chrono>

namespace tessera {

Nanos MonotonicClock::Now() const {
  return std::chrono::duration_cast<Nanos>(std::chrono::steady_clock::now().time_since_epoch());
}

const Clock& RealClock() {
  // Never destroyed: threads still running at exit may read it.
  static const MonotonicClock* const clock = new MonotonicClock();
  return *clock;
}

}  // namespace tessera
