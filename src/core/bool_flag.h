// On/off flags such as TESSERA_DISABLE, TESSERA_FAIL_OPEN and CGPU_DISABLE.
//
// Accepts 1/0, true/false, yes/no and on/off, ignoring ASCII case and surrounding whitespace.
// Anything else, the empty string included, is an error: a flag is never guessed. No I/O.
#pragma once

#include <string_view>

#include "core/result.h"

namespace tessera {

// Errors look like: TESSERA_DISABLE="maybe": not a flag; expected 1 or 0, true or false, ...
Result<bool> ParseBoolFlag(std::string_view text, std::string_view input_name);

}  // namespace tessera
