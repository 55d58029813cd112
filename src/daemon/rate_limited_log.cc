// RateLimitedLog: a token bucket of lines, refilled continuously, with a count of what it left out.
#include "daemon/rate_limited_log.h"

#include <algorithm>
#include <utility>

namespace tessera::daemon {

RateLimitedLog::RateLimitedLog(int lines_per_second, std::function<void(const std::string&)> sink)
    : rate_(std::max(1, lines_per_second)),
      sink_(std::move(sink)),
      tokens_(rate_),
      refilled_(Clock::now()) {}

void RateLimitedLog::Log(const std::string& line, Clock::time_point now) {
  if (now > refilled_) {
    tokens_ =
        std::min(rate_, tokens_ + rate_ * std::chrono::duration<double>(now - refilled_).count());
    refilled_ = now;
  }
  if (tokens_ >= 1) {
    tokens_ -= 1;
    sink_(line);
  } else {
    ++suppressed_;
  }
}

void RateLimitedLog::Flush(Clock::time_point now) {
  if (suppressed_ == 0 || now - noted_ < std::chrono::seconds(1)) return;
  sink_("tesserad: " + std::to_string(suppressed_) + " more refusals not logged (at most " +
        std::to_string(static_cast<int>(rate_)) + " lines a second: refusal_log_rate)");
  suppressed_ = 0;
  noted_ = now;
}

}  // namespace tessera::daemon
