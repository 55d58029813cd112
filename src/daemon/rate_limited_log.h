// RateLimitedLog: the daemon's log of refusals and dropped connections, at most a set number of
// lines a second, so that a client sending thousands of bad requests cannot turn tesserad's stderr
// (and the journal behind it) into its own megabytes a second. Lines beyond the rate are counted,
// not written, and one line a second at most says how many were left out. Not thread-safe: the
// event loop is its one caller. Holds no policy about what is worth logging.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace tessera::daemon {

class RateLimitedLog {
 public:
  using Clock = std::chrono::steady_clock;
  // `lines_per_second` >= 1: also the burst (a full second's worth may be written at once).
  // `sink` writes one line (no '\n' in it).
  RateLimitedLog(int lines_per_second, std::function<void(const std::string&)> sink);
  // Writes `line` if the rate allows, else counts it.
  void Log(const std::string& line, Clock::time_point now = Clock::now());
  // Writes how many lines were left out since the last such note, once a second at most; call it
  // often (the event loop does on every turn).
  void Flush(Clock::time_point now = Clock::now());
  // Lines left out and not yet reported.
  uint64_t suppressed() const { return suppressed_; }

 private:
  const double rate_;
  std::function<void(const std::string&)> sink_;
  double tokens_;
  Clock::time_point refilled_;
  uint64_t suppressed_ = 0;
  Clock::time_point noted_{};
};

}  // namespace tessera::daemon
