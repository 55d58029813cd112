// DeviceTimeline: the device's recent history of who ran when (see device_timeline.h).
// Arithmetic only: no clock, no I/O, no threads.
#include "arbiter/device_timeline.h"

#include <algorithm>

namespace tessera::arbiter {

void DeviceTimeline::Add(int process, int container, uint64_t start, uint64_t end,
                         std::vector<Delta>* deltas) {
  if (end <= start) return;
  int64_t own = 0;
  // Before what the timeline remembers nobody can be compared: charged as reported.
  if (start < forgotten_until_) {
    const uint64_t cut = std::min(end, forgotten_until_);
    own += static_cast<int64_t>(cut - start);
    start = cut;
  }
  if (start < end) {
    // Segments are disjoint and ordered by start, so their ends are ordered too.
    auto first = std::partition_point(segments_.begin(), segments_.end(),
                                      [&](const Segment& s) { return s.end <= start; });
    auto last = first;
    while (last != segments_.end() && last->start < end) ++last;
    std::vector<Segment> pieces;
    pieces.reserve(static_cast<size_t>(last - first) * 3 + 2);
    uint64_t cursor = start;
    for (auto s = first; s != last; ++s) {
      if (s->start > cursor) {
        pieces.push_back({cursor, s->start, end, process, container});
        own += static_cast<int64_t>(s->start - cursor);
      }
      const uint64_t from = std::max(s->start, start), to = std::min(s->end, end);
      // The newcomer's work ended first, so it held the device here; the same container's own
      // overlapping work is already counted once.
      if (s->container != container && s->source_end > end) {
        if (s->start < from)
          pieces.push_back({s->start, from, s->source_end, s->process, s->container});
        pieces.push_back({from, to, end, process, container});
        own += static_cast<int64_t>(to - from);
        deltas->push_back({s->process, s->container, -static_cast<int64_t>(to - from)});
        if (to < s->end) pieces.push_back({to, s->end, s->source_end, s->process, s->container});
      } else {
        pieces.push_back(*s);
      }
      cursor = std::max(cursor, s->end);
    }
    if (cursor < end) {
      pieces.push_back({cursor, end, end, process, container});
      own += static_cast<int64_t>(end - cursor);
    }
    const auto at = first - segments_.begin();
    segments_.erase(first, last);
    segments_.insert(segments_.begin() + at, pieces.begin(), pieces.end());
    while (segments_.size() > max_segments_) {
      forgotten_until_ = std::max(forgotten_until_, segments_.front().end);
      segments_.pop_front();
    }
  }
  if (own != 0) deltas->push_back({process, container, own});
}

void DeviceTimeline::Expire(uint64_t now) {
  if (now < horizon_ns_) return;
  const uint64_t before = now - horizon_ns_;
  while (!segments_.empty() && segments_.front().end <= before) {
    forgotten_until_ = std::max(forgotten_until_, segments_.front().end);
    segments_.pop_front();
  }
  forgotten_until_ = std::max(
      forgotten_until_, std::min(before, segments_.empty() ? before : segments_.front().start));
}

}  // namespace tessera::arbiter
