// Nanos, the unit of durations and steady instants (core/clock.h), and durations as users write
// them in configuration ("2ms", "100us", "1.5s"), parsed into Nanos and formatted back.
//
// Syntax accepted by ParseDuration (surrounding whitespace ignored, units case-sensitive as in Go
// and Prometheus): <digits>[.<digits>]<unit> with <unit> one of ns, us (or µs), ms, s, m, h.
// A unit is required: a bare "20" could mean anything and is refused. A fraction must come out as
// a whole number of nanoseconds ("1.5us" is 1500ns; "1.5ns" is refused). Negative durations and
// compound forms ("1m30s") are refused. Pure functions; no I/O, no locale.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "core/result.h"

namespace tessera {

// A duration, or an instant counted from a clock's epoch, in nanoseconds.
using Nanos = std::chrono::nanoseconds;

// A duration or instant in seconds, for arithmetic in seconds (the placement engine's clock).
inline double Seconds(Nanos d) { return std::chrono::duration<double>(d).count(); }

// Parses one duration (syntax above) within [min, max]. `input_name` starts every error message:
//   quota_min="50us": 50us is out of range; expected a duration from 100us to 1s, such as 2ms
Result<Nanos> ParseDuration(std::string_view text, std::string_view input_name,
                            Nanos min = Nanos::zero(), Nanos max = std::chrono::hours(24 * 365));

// The form ParseDuration reads back to the same value, in the largest unit that shows it as a
// whole number ("2ms", "1500us", "1s", "90s", "2m", "1h", "0s").
std::string FormatDuration(Nanos duration);

}  // namespace tessera
