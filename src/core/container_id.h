// Container ids: the names tenants are registered under and that appear as control-tree path
// components (`<gpu>/<container>/weight`, docs/contracts.md).
//
// A valid id is 1 to 64 characters from [A-Za-z0-9_.-], and is neither "." nor ".." (those would
// name a directory of the control tree, not a container). Ids are taken exactly as written: no
// trimming, no case folding. No I/O.
#pragma once

#include <string>
#include <string_view>

#include "core/result.h"

namespace tessera {

inline constexpr size_t kMaxContainerIdLength = 64;

// True when `id` is a valid container id (rules above).
bool IsValidContainerId(std::string_view id);

// `text` as a container id, or an error such as
//   TESSERA_CONTAINER="web 1": character 4 (" ") is not allowed; expected 1 to 64 characters ...
Result<std::string> ParseContainerId(std::string_view text, std::string_view input_name);

}  // namespace tessera
