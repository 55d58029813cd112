// IsolatedContainerEdits, MakeContainerId and WriteFileAtomically.
#include "k8s/deviceplugin/container_edits.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "core/text.h"
#include "mps/mps.h"
#include "simgpu/sim_state.h"

namespace tessera::k8s {
Status CopyFile(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  if (!in) return Status::Error(from + ": cannot be read");
  const std::string tmp = to + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << in.rdbuf();
    if (!out) return Status::Error(tmp + ": cannot be written");
  }
  chmod(tmp.c_str(), 0755);
  if (rename(tmp.c_str(), to.c_str()) != 0) return Status::Error(to + ": " + std::strerror(errno));
  return Status::Ok();
}

Result<NodeMounts> PrepareNodeMounts(const std::string& state_dir, const std::string& shim_source,
                                     const std::string& container_sockets,
                                     const std::string& sim_library_source) {
  NodeMounts m;
  m.container_socket_dir = container_sockets;
  m.shim_dir = state_dir + "/lib";
  m.preload_file = state_dir + "/ld.so.preload";
  mkdir(state_dir.c_str(), 0755);
  mkdir(m.shim_dir.c_str(), 0755);
  for (const char* lib : {"libcuda.so.1", "libnvidia-ml.so.1"}) {
    if (Status s = CopyFile(shim_source + "/" + lib, m.shim_dir + "/" + lib); !s.ok()) {
      return Result<NodeMounts>::Error(
          "--shim-dir=\"" + shim_source + "\": " + s.message() +
          "; expected the folder of Tessera's shims (build/lib/tessera)");
    }
  }
  const std::string preload = std::string(kContainerShimDir) + "/libcuda.so.1\n" +
                              kContainerShimDir + "/libnvidia-ml.so.1\n";
  if (Status s = WriteFileAtomically(m.preload_file, preload, 0644); !s.ok()) return s;
  if (!sim_library_source.empty()) {
    const std::string sim_dir = state_dir + "/sim";
    mkdir(sim_dir.c_str(), 0755);
    m.sim_library = sim_dir + "/libtessera-simgpu.so";
    if (Status s = CopyFile(sim_library_source, m.sim_library); !s.ok()) {
      return Result<NodeMounts>::Error("--sim: " + s.message());
    }
    // The node's simulated GPUs are a file (simgpu's state); containers get the file itself.
    auto state = sim::SimStatePath(std::getenv("TESSERA_SIM_STATE"));
    if (!state.ok()) return Result<NodeMounts>::Error("--sim: " + state.error());
    m.sim_state = *state;
    if (const char* v = std::getenv("TESSERA_SIM_GPUS"))
      m.sim_env.emplace_back("TESSERA_SIM_GPUS", v);
  }
  return m;
}

Status SimStateReachable(const NodeMounts& node) {
  struct stat st {};
  if (node.sim_library.empty() || stat(node.sim_state.c_str(), &st) == 0) return Status::Ok();
  return Status::Error("--sim: the simulated GPUs' state " + node.sim_state +
                       " does not exist (TESSERA_SIM_STATE of tesserad --sim, as this plugin sees "
                       "it; a file both see at the host's path, e.g. under /run/tessera)");
}

CdiEdits IsolatedContainerEdits(const NodeMounts& node, const IsolatedContainer& c,
                                bool registered) {
  CdiEdits out;
  const bool sim = !node.sim_library.empty();
  if (registered) {
    std::vector<std::string> limits;
    for (const Bytes& b : c.limits) limits.push_back(FormatBytes(b));
    out.env.emplace_back("TESSERA_SOCKET", std::string(kContainerSocketDir) + "/tessera.sock");
    out.env.emplace_back("TESSERA_CONTAINER", c.id);
    out.env.emplace_back("TESSERA_VISIBLE_DEVICES", Join(c.uuids));
    out.env.emplace_back("TESSERA_MEM_LIMIT", Join(limits));
    if (c.core) out.env.emplace_back("TESSERA_CORE_LIMIT", std::to_string(c.core->value()));
    if (c.weight != 1) out.env.emplace_back("TESSERA_WEIGHT", std::to_string(c.weight));
    if (c.high_priority) out.env.emplace_back("TESSERA_HIGH_PRIO", "1");
    out.mounts.push_back({node.shim_dir, kContainerShimDir, true});
    out.mounts.push_back({node.preload_file, kContainerPreload, true});
    out.mounts.push_back({node.container_socket_dir + "/" + c.id, kContainerSocketDir, true});
    if (!node.oci_hook.empty()) {
      // createRuntime: on the host, once the container's init process is in its cgroup and
      // namespaces and before anything of the container runs (it waits for the hook).
      out.hooks.push_back(
          {"createRuntime",
           node.oci_hook,
           {"tessera-oci-hook", "--container", c.id, "--socket", node.tesserad_socket},
           15});
    }
    if (!c.mps_root.empty() && !c.uuids.empty() && !c.limits.empty()) {
      // The MPS client side: the GPU's pipe folder (clients connect to the control socket there)
      // and the shared memory where the GPU's MPS clients and server meet: the server's own
      // /dev/shm (mps::EnterServerShm), never the host's, which holds tesserad's ledger.
      const mps::MpsPaths paths = mps::PathsFor(c.mps_root, c.uuids[0]);
      out.mounts.push_back({paths.pipe_dir, kContainerMpsPipeDir, false});
      out.mounts.push_back({paths.shm_dir, kContainerShm, false});
      auto env = mps::MpsClientEnvironment({kContainerMpsPipeDir, "", ""}, c.core, c.limits[0]);
      for (const std::string& kv : env.ok() ? *env : std::vector<std::string>{}) {
        out.env.emplace_back(kv.substr(0, kv.find('=')), kv.substr(kv.find('=') + 1));
      }
    }
    if (sim) {
      const std::string lib = std::string(kContainerSimDir) + "/libtessera-simgpu.so";
      out.mounts.push_back({node.sim_library, lib, true});
      out.env.emplace_back("TESSERA_REAL_LIBCUDA", lib);
      out.env.emplace_back("TESSERA_REAL_NVML", lib);
    }
  }
  if (sim) {
    // The node's simulated GPUs themselves, not a name each container would resolve in its own
    // /dev/shm (a new, empty simulated machine per container).
    out.mounts.push_back({node.sim_state, kContainerSimState, false});
    out.env.emplace_back("TESSERA_SIM_STATE", kContainerSimState);
    for (const auto& kv : node.sim_env) out.env.push_back(kv);
  }
  return out;
}

Result<std::string> RegisterIsolated(const TesseradClient& tesserad, const IsolatedContainer& c,
                                     const std::vector<int>& indices, size_t devices, bool mps,
                                     const std::string& node) {
  ContainerRegistration reg;
  reg.id = c.id;
  reg.limits.assign(devices, Bytes(0));
  for (size_t i = 0; i < indices.size() && i < c.limits.size(); ++i) {
    if (indices[i] < 0 || static_cast<size_t>(indices[i]) >= devices) {
      return Result<std::string>::Error("tesserad has no device " + std::to_string(indices[i]) +
                                        (i < c.uuids.size() ? " (GPU " + c.uuids[i] + ")" : "") +
                                        " any more");
    }
    reg.limits[static_cast<size_t>(indices[i])] = c.limits[i];
  }
  reg.core = c.core;
  reg.weight = c.weight;
  reg.high_priority = c.high_priority;
  reg.identify = c.identify;
  auto reply = tesserad.Register(reg);
  if (!reply.ok()) return reply.status();
  if (!mps || c.uuids.empty()) return std::string();
  std::string why;
  const std::string pipe = mps::PathsFor(reply->mps_root, c.uuids[0]).pipe_dir;
  struct stat st {};
  if (reply->mps_root.empty()) {
    why = "node " + node + " is in mode mps, but tesserad at " + tesserad.socket() +
          " runs no MPS control daemons (start it with --mps)";
  } else if (stat(pipe.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    why = "tesserad's MPS pipe folder of GPU " + c.uuids[0] + ", " + pipe +
          ", is not a folder here (does tesserad run MPS on this GPU, with --mps or its index in "
          "--mps-gpus? does the plugin see the host's " +
          reply->mps_root + " at the same path?)";
  }
  if (!why.empty()) {
    (void)tesserad.Unregister(c.id);
    return Result<std::string>::Error(why);
  }
  return reply->mps_root;
}

std::string MakeContainerId(std::string_view prefix, std::string_view first,
                            std::string_view second, std::string_view unique) {
  auto clean = [](std::string_view in) {
    std::string s(in);
    for (char& c : s) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
    }
    return s;
  };
  std::string body = clean(first) + "." + clean(second);
  const size_t room = 63 - prefix.size() - 7;  // 63 in all, less the prefix and "-xxxxxx"
  if (body.size() > room) body = body.substr(0, room);
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char c : unique) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  char suffix[8];
  std::snprintf(suffix, sizeof(suffix), "%06llx", static_cast<unsigned long long>(h & 0xffffff));
  return std::string(prefix) + body + "-" + suffix;
}

Status WriteFileAtomically(const std::string& path, const std::string& text, mode_t mode) {
  const std::string tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return Status::Error(tmp + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0) {
      const int err = errno;
      close(fd);
      unlink(tmp.c_str());
      return Status::Error(tmp + ": " + std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  fsync(fd);
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return Status::Error(path + ": " + std::strerror(err));
  }
  return Status::Ok();
}

}  // namespace tessera::k8s
