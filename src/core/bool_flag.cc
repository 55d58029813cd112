// On/off flag parsing. Pure function; no I/O.
#include "core/bool_flag.h"

#include "core/text.h"

namespace tessera {

Result<bool> ParseBoolFlag(std::string_view text, std::string_view input_name) {
  static constexpr std::string_view kTrue[] = {"1", "true", "yes", "on"};
  static constexpr std::string_view kFalse[] = {"0", "false", "no", "off"};
  const std::string_view s = TrimSpaces(text);
  for (std::string_view word : kTrue) {
    if (EqualsIgnoreCase(s, word)) {
      return true;
    }
  }
  for (std::string_view word : kFalse) {
    if (EqualsIgnoreCase(s, word)) {
      return false;
    }
  }
  return Result<bool>::Error(InputError(input_name, text, s.empty() ? "empty value" : "not a flag",
                                        "1 or 0, true or false, yes or no, on or off"));
}

}  // namespace tessera
