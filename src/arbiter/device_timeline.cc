// DeviceTimeline: the device's recent history of who ran when (see device_timeline.h).
// Arithmetic only: no clock, no I/O, no threads.
#include "arbiter/device_timeline.h"

#include <algorithm>

namespace tessera::arbiter {
namespace {

DeviceTimeline::Piece PieceOf(int process, int container, uint64_t start, uint64_t end) {
  return {process, container, end, end - start};
}

}  // namespace

void DeviceTimeline::Add(int process, int container, uint64_t start, uint64_t end,
                         std::vector<Delta>* deltas) {
  if (end <= start) return;
  int64_t own = 0;
  // Before what the timeline remembers nobody can be compared: charged as reported.
  if (start < forgotten_until_) {
    const uint64_t cut = std::min(end, forgotten_until_);
    own += static_cast<int64_t>(cut - start);
    late_.push_back(PieceOf(process, container, start, cut));
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
    // A piece that ended by the settled instant is settled as it is made.
    auto keep = [&](Segment s) {
      if (!s.settled && s.end <= settled_until_) {
        s.settled = true;
        late_.push_back(PieceOf(s.process, s.container, s.start, s.end));
      }
      pieces.push_back(s);
    };
    uint64_t cursor = start;
    for (auto s = first; s != last; ++s) {
      if (s->start > cursor) {
        keep({cursor, s->start, end, process, container, false});
        own += static_cast<int64_t>(s->start - cursor);
      }
      const uint64_t from = std::max(s->start, start), to = std::min(s->end, end);
      // The newcomer's work ended first, so it held the device here; the same container's own
      // overlapping work is already counted once, and a settled owner keeps what it has.
      if (s->container != container && s->source_end > end && !s->settled) {
        if (s->start < from) keep({s->start, from, s->source_end, s->process, s->container, false});
        keep({from, to, end, process, container, false});
        own += static_cast<int64_t>(to - from);
        deltas->push_back({s->process, s->container, -static_cast<int64_t>(to - from)});
        if (to < s->end) keep({to, s->end, s->source_end, s->process, s->container, false});
      } else {
        pieces.push_back(*s);
      }
      cursor = std::max(cursor, s->end);
    }
    if (cursor < end) {
      keep({cursor, end, end, process, container, false});
      own += static_cast<int64_t>(end - cursor);
    }
    const auto at = first - segments_.begin();
    segments_.erase(first, last);
    segments_.insert(segments_.begin() + at, pieces.begin(), pieces.end());
    while (segments_.size() > max_segments_) {
      const Segment& oldest = segments_.front();
      if (!oldest.settled) {
        late_.push_back(PieceOf(oldest.process, oldest.container, oldest.start, oldest.end));
      }
      forgotten_until_ = std::max(forgotten_until_, oldest.end);
      segments_.pop_front();
    }
  }
  if (own != 0) deltas->push_back({process, container, own});
}

void DeviceTimeline::Settle(uint64_t until, std::vector<Piece>* pieces) {
  pieces->insert(pieces->end(), late_.begin(), late_.end());
  late_.clear();
  if (until <= settled_until_) return;
  // Every segment that ended by settled_until_ is settled already; the rest are in order.
  auto it = std::partition_point(segments_.begin(), segments_.end(),
                                 [&](const Segment& s) { return s.end <= settled_until_; });
  for (; it != segments_.end() && it->end <= until; ++it) {
    if (it->settled) continue;
    it->settled = true;
    pieces->push_back(PieceOf(it->process, it->container, it->start, it->end));
  }
  settled_until_ = until;
}

void DeviceTimeline::Expire(uint64_t now, std::vector<Piece>* pieces) {
  if (now < horizon_ns_) return;
  const uint64_t before = now - horizon_ns_;
  while (!segments_.empty() && segments_.front().end <= before) {
    const Segment& oldest = segments_.front();
    if (!oldest.settled) {
      pieces->push_back(PieceOf(oldest.process, oldest.container, oldest.start, oldest.end));
    }
    forgotten_until_ = std::max(forgotten_until_, oldest.end);
    segments_.pop_front();
  }
  forgotten_until_ = std::max(
      forgotten_until_, std::min(before, segments_.empty() ? before : segments_.front().start));
}

}  // namespace tessera::arbiter
