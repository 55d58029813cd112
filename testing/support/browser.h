// Headless Chromium for the page tests: loads a page, lets its scripts run, and returns the DOM it
// rendered, or writes a screenshot. The real browser from Debian's `chromium` package
// (/usr/bin/chromium, or $TESSERA_CHROMIUM); a test that needs it fails when it is missing.
#pragma once

#include <string>

#include "core/result.h"

namespace tessera::testing {

class Chromium {
 public:
  // `scratch`: a folder for the browser's profile (created; left for the caller to remove).
  explicit Chromium(std::string scratch);

  // The browser's path, or an error saying how to install it.
  static Result<std::string> Find();

  // The serialized DOM after the page's scripts ran for `budget_ms` of the page's (virtual) time;
  // fetches the page makes are answered in real time within that budget.
  Result<std::string> RenderedDom(const std::string& url, int budget_ms = 3000) const;
  // A PNG of the page at `width` x `height` after the same wait.
  Status Screenshot(const std::string& url, const std::string& png_path, int width = 1280,
                    int height = 900, int budget_ms = 3000) const;

 private:
  Result<std::string> Run(const std::string& url, const std::string& action, int budget_ms) const;
  std::string scratch_;
};

}  // namespace tessera::testing
