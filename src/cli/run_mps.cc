// MpsRunEnvironment (run_mps.h): resolves the one GPU of the run through the daemon's STATUS and
// builds the MPS client environment with mps/mps.h. No policy of its own.
#include "cli/run_mps.h"

#include <chrono>
#include <nlohmann/json.hpp>

#include "core/bytes.h"
#include "core/device_selector.h"
#include "core/percent.h"
#include "ipc/unix_socket.h"
#include "mps/mps.h"

namespace tessera::cli {

Result<std::vector<std::string>> MpsRunEnvironment(const std::string& socket,
                                                   const std::string& mps_root,
                                                   const std::string& devices,
                                                   const std::string& core, const std::string& mem,
                                                   std::string* shm_dir) {
  using Out = Result<std::vector<std::string>>;
  auto reply = ipc::Call(socket, "STATUS", nullptr, std::chrono::milliseconds(3000));
  if (!reply.ok() || reply->rfind("OK ", 0) != 0) {
    return Out::Error("the daemon at " + socket +
                      " did not answer STATUS: " + (reply.ok() ? *reply : reply.error()));
  }
  std::vector<std::string> uuids;
  try {
    const nlohmann::json status = nlohmann::json::parse(reply->substr(3));
    for (const auto& d : status.at("devices")) uuids.push_back(d.at("uuid").get<std::string>());
  } catch (const nlohmann::json::exception& e) {
    return Out::Error(std::string("the daemon's STATUS is not what this tessera reads: ") +
                      e.what());
  }
  int device = 0;
  if (devices.empty()) {
    if (uuids.size() != 1) {
      return Out::Error("--devices is needed on an MPS node with " + std::to_string(uuids.size()) +
                        " GPUs: a container's processes are clients of one GPU's MPS server");
    }
  } else {
    auto selector = ParseDeviceSelector(devices, "--devices");
    if (!selector.ok()) return selector.status();
    auto resolved = ResolveDeviceSelector(*selector, uuids, "--devices");
    if (!resolved.ok()) return resolved.status();
    if (resolved->size() != 1) {
      return Out::Error("--devices=\"" + devices + "\": an MPS node gives a container one GPU " +
                        "(its processes are clients of that GPU's MPS server); expected one index "
                        "or UUID");
    }
    device = (*resolved)[0];
  }
  std::optional<Percent> share;
  if (!core.empty()) {
    auto p = ParsePercent(core, "--core", 1, 100);
    if (!p.ok()) return p.status();
    share = *p;
  }
  std::optional<Bytes> memory;
  if (!mem.empty()) {
    auto limits = ParseBytesList(mem, "--mem");
    if (!limits.ok()) return limits.status();
    memory = limits->front();
  }
  const mps::MpsPaths paths = mps::PathsFor(mps_root, uuids[static_cast<size_t>(device)]);
  *shm_dir = paths.shm_dir;
  return mps::MpsClientEnvironment(paths, share, memory);
}

}  // namespace tessera::cli
