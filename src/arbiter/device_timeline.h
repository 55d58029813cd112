// DeviceTimeline: who one GPU ran when, rebuilt from the busy intervals the processes' gates
// measured, so that each one is charged the device time its kernels occupied and not the time
// they waited behind someone else's.
//
// A gate measures an interval [first launch, completion] from its own events: it knows when its
// work ended, not when it began on a device that also ran other containers' work queued ahead of
// it. The device runs work in submission order, so where the intervals of two containers overlap
// the one whose interval ended first held the device there (the other's work was queued behind
// it): each instant belongs to the earliest-ending interval that covers it. Intervals arrive in
// whatever order the samplers report them; one that arrives after a later-ending one it overlaps
// takes that part back, and the owner it takes it from is refunded (negative deltas). Parts of an
// interval that no earlier-ending one covers are its own; parts of two intervals of the same
// container never count twice.
//
// Two readings: Add's deltas at once (provisional: a later report may still move time between
// owners, for an arbiter that must not wait), and Settle's pieces once they ended `settle` ago
// (final: never moved again, so counters built from them never go down). A report that arrives
// after the part it overlaps was settled gets none of it.
//
// Exact when each mark covers one launch, or a run of launches no other container's work ran in
// between; a mark whose launches interleave with another container's is charged from where its
// uncovered parts lie. Only the last `horizon` of the timeline is kept: an interval that reaches
// further back than that is charged there as reported.
//
// Pure arithmetic over instants (CLOCK_MONOTONIC ns): no clock, no I/O, no threads, no logging.
// Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace tessera::arbiter {

class DeviceTimeline {
 public:
  // A change of one process's provisional time (ns; negative: refunded).
  struct Delta {
    int process = 0;
    int container = 0;
    int64_t ns = 0;
  };
  // Device time settled as one process's: [end - ns, end].
  struct Piece {
    int process = 0;
    int container = 0;
    uint64_t end = 0;
    uint64_t ns = 0;
  };

  // Keeps `horizon_ns` of history; at most `max_segments` pieces (the oldest are forgotten first).
  explicit DeviceTimeline(uint64_t horizon_ns = 500'000'000, size_t max_segments = 65536)
      : horizon_ns_(horizon_ns), max_segments_(max_segments) {}

  // Adds the busy interval [start, end) that process `process` of container `container` measured;
  // appends the provisional changes to *deltas (the newcomer's own time, and refunds to those it
  // took instants back from). Ignored when end <= start.
  void Add(int process, int container, uint64_t start, uint64_t end, std::vector<Delta>* deltas);

  // Settles everything that ended by `until` (non-decreasing from call to call) and appends it to
  // *pieces, each instant once.
  void Settle(uint64_t until, std::vector<Piece>* pieces);

  // Forgets what ended before `now - horizon` (settling it first if it was not).
  void Expire(uint64_t now, std::vector<Piece>* pieces);

  size_t segment_count() const { return segments_.size(); }
  // Whether some of what was added is not settled yet.
  bool unsettled() const {
    return !late_.empty() || (!segments_.empty() && !segments_.back().settled);
  }
  // Everything that ended by this instant is settled (the latest Settle).
  uint64_t settled_until() const { return settled_until_; }

 private:
  struct Segment {
    uint64_t start;
    uint64_t end;
    uint64_t source_end;  // the end of the interval this piece came from
    int process;
    int container;
    bool settled;
  };

  uint64_t horizon_ns_;
  size_t max_segments_;
  std::deque<Segment> segments_;  // ordered by start, disjoint
  uint64_t forgotten_until_ = 0;  // nothing is known before this instant any more
  uint64_t settled_until_ = 0;    // every segment that ended by then is settled
  // Settled in Add (a late report's part that lies before settled_until_), for the next Settle.
  std::vector<Piece> late_;
};

}  // namespace tessera::arbiter
