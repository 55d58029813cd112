// UsageWindow: how much GPU time one container used during the last `length` of time (a sliding
// window), from the measured charges it was given.
//
// A charge of `used` reported at instant `end` is taken to cover [end - used, end] evenly. Charges
// that touch or overlap the previous one are merged into one span (spread evenly over the union),
// so one exclusive run of back-to-back kernels is one span and the memory stays small; with
// exclusive tokens (a container's runs never overlap) the answers are exact. Pure arithmetic: no
// clock, no I/O, no threads. Not thread-safe.
#pragma once

#include <cstddef>
#include <deque>

#include "core/duration.h"

namespace tessera::arbiter {

class UsageWindow {
 public:
  explicit UsageWindow(Nanos length) : length_(length) {}

  Nanos length() const { return length_; }
  // Changes the window length; the history already recorded is kept (up to the new length).
  void SetLength(Nanos length) { length_ = length; }

  // Records `used` GPU time that ended at `end`. A non-positive `used` is ignored.
  void Add(Nanos end, Nanos used);
  // Takes back `amount` of what was recorded (a charge later found to be another's), from the
  // latest spans first; never below zero. A non-positive `amount` is ignored.
  void Remove(Nanos amount);

  // GPU time used in (now - length, now]. Forgets spans that ended before the window.
  Nanos Used(Nanos now);

  // How long after `now` Used() first drops below `limit` if nothing more is charged: 0 when it
  // already is below. `limit` must be positive.
  Nanos TimeUntilBelow(Nanos now, Nanos limit);

  // All history is forgotten.
  void Clear() {
    spans_.clear();
    total_ = Nanos{0};
  }

  size_t span_count() const { return spans_.size(); }

 private:
  // `used` GPU time spread evenly over [start, end]; start < end.
  struct Span {
    Nanos start;
    Nanos end;
    Nanos used;
  };
  // Spans beyond this many are merged pairwise from the oldest (approximate, bounded memory).
  static constexpr size_t kMaxSpans = 4096;

  void Expire(Nanos now);

  Nanos length_;
  std::deque<Span> spans_;  // ordered, disjoint
  Nanos total_{0};          // sum of spans_[i].used
};

}  // namespace tessera::arbiter
