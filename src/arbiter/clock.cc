// MonotonicClock: the host's steady clock. No other clock logic lives here.
#include "arbiter/clock.h"

namespace tessera::arbiter {

Nanos MonotonicClock::Now() const {
  return std::chrono::duration_cast<Nanos>(std::chrono::steady_clock::now().time_since_epoch());
}

}  // namespace tessera::arbiter
