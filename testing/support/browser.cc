// Headless Chromium, run as a program once per page load (see browser.h).
#include "testing/support/browser.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "process/child_process.h"

namespace tessera::testing {
namespace {

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

}  // namespace

Chromium::Chromium(std::string scratch) : scratch_(std::move(scratch)) {
  mkdir(scratch_.c_str(), 0700);
}

Result<std::string> Chromium::Find() {
  const char* env = std::getenv("TESSERA_CHROMIUM");
  const std::string path = env != nullptr && *env != '\0' ? env : "/usr/bin/chromium";
  if (access(path.c_str(), X_OK) != 0) {
    return Result<std::string>::Error(
        "no browser at " + path +
        " (set TESSERA_CHROMIUM, or apt-get install chromium; scripts/dev test installs it)");
  }
  return path;
}

Result<std::string> Chromium::Run(const std::string& url, const std::string& action,
                                  int budget_ms) const {
  auto browser = Find();
  if (!browser.ok()) return browser;
  // The flags a closed network and a root user need: no sandbox (root), no GPU, none of the
  // background connections that this machine's network refuses.
  const std::string command =
      "timeout 60 " + Quote(*browser) +
      " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run"
      " --disable-background-networking --disable-component-update --disable-sync"
      " --disable-dev-shm-usage --hide-scrollbars --user-data-dir=" +
      Quote(scratch_ + "/profile") + " --virtual-time-budget=" + std::to_string(budget_ms) + " " +
      action + " " + Quote(url) + " 2>" + Quote(scratch_ + "/stderr.txt");
  auto [status, out] = process::RunShell(command);
  if (status != 0) {
    auto [_, err] = process::RunShell("tail -5 " + Quote(scratch_ + "/stderr.txt"));
    return Result<std::string>::Error("chromium exited with " + std::to_string(status) +
                                      " loading " + url + ": " + err);
  }
  return out;
}

Result<std::string> Chromium::RenderedDom(const std::string& url, int budget_ms) const {
  return Run(url, "--dump-dom", budget_ms);
}

Status Chromium::Screenshot(const std::string& url, const std::string& png_path, int width,
                            int height, int budget_ms) const {
  auto r = Run(url,
               "--window-size=" + std::to_string(width) + "," + std::to_string(height) +
                   " --screenshot=" + Quote(png_path),
               budget_ms);
  if (!r.ok()) return Status::Error(r.error());
  struct stat st {};
  if (stat(png_path.c_str(), &st) != 0 || st.st_size == 0) {
    return Status::Error("chromium wrote no screenshot at " + png_path);
  }
  return Status::Ok();
}

}  // namespace tessera::testing
