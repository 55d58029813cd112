// The command-line conventions every Tessera program shares, on CLI11: an error is one line
// naming the program and subcommand, then where --help is; --help and --version exit 0; any
// malformed command line exits 2. What a value may be is each program's business (src/core's
// parsers), not this file's. Header-only; used by the programs' main.cc only (never by a library,
// and never by the shims or simgpu).
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

namespace tessera::cmdline {

// "tessera run: MESSAGE\n(see tessera run --help)\n" for the innermost subcommand named.
inline std::string FailureMessage(const CLI::App* app, const CLI::Error& e) {
  std::string name = app->get_name();
  for (const CLI::App* sub = app; sub != nullptr;) {
    const auto chosen = sub->get_subcommands();
    sub = chosen.empty() ? nullptr : chosen.front();
    if (sub != nullptr) name += " " + sub->get_name();
  }
  return name + ": " + e.what() + "\n(see " + name + " --help)\n";
}

// Parses the command line into `app`'s options. nullopt: go on; otherwise the exit status, after
// printing: 0 for --help and --version, 2 for a malformed command line.
inline std::optional<int> Parse(CLI::App& app, int argc, char** argv) {
  app.failure_message(FailureMessage);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  return std::nullopt;
}

}  // namespace tessera::cmdline
