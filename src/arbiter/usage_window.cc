// UsageWindow: sliding-window accounting of one container's measured GPU time. Arithmetic only.
#include "arbiter/usage_window.h"

#include <algorithm>
#include <cmath>

namespace tessera::arbiter {
namespace {

// The part of `used` (spread evenly over [start, end]) that lies in [from, end].
Nanos PortionFrom(Nanos start, Nanos end, Nanos used, Nanos from) {
  if (from <= start) {
    return used;
  }
  if (from >= end) {
    return Nanos{0};
  }
  const double fraction =
      static_cast<double>((end - from).count()) / static_cast<double>((end - start).count());
  return Nanos{static_cast<int64_t>(std::llround(fraction * static_cast<double>(used.count())))};
}

}  // namespace

void UsageWindow::Add(Nanos end, Nanos used) {
  if (used <= Nanos{0}) {
    return;
  }
  const Nanos start = end - used;
  total_ += used;
  if (!spans_.empty() && start <= spans_.back().end) {
    Span& last = spans_.back();
    last.start = std::min(last.start, start);
    last.end = std::max(last.end, end);
    last.used += used;
    return;
  }
  spans_.push_back(Span{start, end, used});
  if (spans_.size() > kMaxSpans) {
    Span first = spans_.front();
    spans_.pop_front();
    Span& second = spans_.front();
    second.start = first.start;
    second.used += first.used;
  }
}

void UsageWindow::Remove(Nanos amount) {
  while (amount > Nanos{0} && !spans_.empty()) {
    Span& last = spans_.back();
    const Nanos take = std::min(amount, last.used);
    last.used -= take;
    total_ -= take;
    amount -= take;
    if (last.used <= Nanos{0}) {
      spans_.pop_back();
    } else {
      // What is left of the span stays where it ended.
      last.start = std::max(last.start, last.end - last.used);
    }
  }
}

void UsageWindow::Expire(Nanos now) {
  const Nanos window_start = now - length_;
  while (!spans_.empty() && spans_.front().end <= window_start) {
    total_ -= spans_.front().used;
    spans_.pop_front();
  }
}

Nanos UsageWindow::Used(Nanos now) {
  Expire(now);
  const Nanos window_start = now - length_;
  Nanos used = total_;
  for (const Span& span : spans_) {
    if (span.start >= window_start) {
      break;
    }
    used -= span.used - PortionFrom(span.start, span.end, span.used, window_start);
  }
  return used;
}

Nanos UsageWindow::TimeUntilBelow(Nanos now, Nanos limit) {
  const Nanos used = Used(now);
  if (used < limit) {
    return Nanos{0};
  }
  // The window's start must slide past `excess` of the recorded time, oldest first.
  Nanos excess = used - limit + Nanos{1};
  Nanos window_start = now - length_;
  for (const Span& span : spans_) {
    const Nanos from = std::max(span.start, window_start);
    const Nanos portion = PortionFrom(span.start, span.end, span.used, from);
    if (portion >= excess) {
      const double density = static_cast<double>(span.used.count()) /
                             static_cast<double>((span.end - span.start).count());
      const auto slide =
          static_cast<int64_t>(std::ceil(static_cast<double>(excess.count()) / density));
      const Nanos new_start = std::min(from + Nanos{slide}, span.end);
      return new_start - (now - length_);
    }
    excess -= portion;
    window_start = span.end;
  }
  return length_;
}

}  // namespace tessera::arbiter
