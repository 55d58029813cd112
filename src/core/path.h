// Absolute paths in settings: the daemon socket (TESSERA_SOCKET, the config key `socket`), the
// real libraries (TESSERA_REAL_LIBCUDA/NVML), mount points (the config key `ctl_mount`).
//
// Only the text is checked (non-empty, no NUL, starts with '/', bounded length); nothing is
// looked up on disk, so a path may name something that does not exist yet. No I/O.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "core/result.h"

namespace tessera {

// sockaddr_un::sun_path holds 108 bytes including the terminating NUL.
inline constexpr size_t kMaxSocketPathBytes = 107;
// PATH_MAX is 4096 including the terminating NUL.
inline constexpr size_t kMaxPathBytes = 4095;
inline constexpr size_t kMaxLibraryPathBytes = kMaxPathBytes;

// An absolute path of at most `max_bytes`; `expected` completes "expected ..." and `too_long`
// follows "N bytes " when the path is longer than `max_bytes`.
Result<std::string> ParseAbsolutePath(std::string_view text, std::string_view name,
                                      size_t max_bytes, std::string_view expected,
                                      std::string_view too_long);

// An absolute path that fits a Unix socket address (at most kMaxSocketPathBytes).
Result<std::string> ParseSocketPath(std::string_view text, std::string_view name);

// An absolute path to a shared library (at most kMaxLibraryPathBytes).
Result<std::string> ParseLibraryPath(std::string_view text, std::string_view name);

// An absolute path to a directory such as a mount point (at most kMaxPathBytes).
Result<std::string> ParseDirectoryPath(std::string_view text, std::string_view name);

}  // namespace tessera
