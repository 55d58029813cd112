// The tessera subcommands. Each takes the arguments after its name and returns the exit status
// (0 success, 1 failure, 2 bad usage). They print for people on stdout and errors on stderr.
#pragma once

#include <string>
#include <vector>

namespace tessera::cli {

// Hidden subcommand the demo re-executes itself with to play one tenant.
inline constexpr const char* kDemoTenantCommand = "__demo-tenant";

int RunVersion(const std::vector<std::string>& args);
int RunDemo(const std::vector<std::string>& args);
int RunDemoTenant(const std::vector<std::string>& args);
int RunSim(const std::vector<std::string>& args);
int RunRun(const std::vector<std::string>& args);
int RunSmi(const std::vector<std::string>& args);
int RunCtl(const std::vector<std::string>& args);
int RunMig(const std::vector<std::string>& args);  // mig.cc: plan, profiles, apply

// Directory holding this executable (build/bin), for finding build/lib next to it.
std::string ExecutableDir();

}  // namespace tessera::cli
