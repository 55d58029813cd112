// k8s_container_run: a STAND-IN for a container runtime, for tests only. It starts a real process
// the way a runtime would apply what kubelet handed it from a device plugin: in a new mount
// namespace, with each mount done for real (a bind mount, remounted read-only when asked), the
// allocation's environment, and the edits of the CDI devices named (read from CDI spec files, as
// containerd and podman do; a device no spec defines is an error, as there). It has no image: the
// container sees the host's root, where targets that do not exist (/etc/ld.so.preload,
// /run/tessera, /usr/local/tessera/...) are created in an overlay of their top folder (/etc, /run,
// /usr) private to the namespace, so nothing changes on the host. Optionally it first joins a
// cgroup (a kubelet-style pod<uid> path), as the runtime puts a container in its pod's. The CDI
// edits' createRuntime and prestart hooks run as runc runs them: once the container's cgroup and
// namespaces exist and before its program starts, with the OCI state on stdin (this process is
// the container's init, so its pid is the state's), the hook's own args and env, and its timeout;
// a hook that fails stops the container (exit 125, "error running hook #N"). Other hook names are
// refused, so a test never passes by a hook this stand-in does not run.
//   k8s_container_run [--mount HOST:CONTAINER[:ro]]... [--env K=V]... [--cdi-dir DIR]
//                     [--cdi NAME]... [--cgroup DIR] [--scratch DIR] -- PROGRAM ARGS...
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Mount {
  std::string host, container;
  bool read_only = false;
};

struct Hook {
  std::string path;
  std::vector<std::string> args, env;
  int timeout_seconds = 0;
};

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "k8s_container_run: %s\n", message.c_str());
  std::fflush(stderr);
  _exit(125);
}

void MkdirP(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') mkdir(path.substr(0, i).c_str(), 0755);
  }
}

// Applies the CDI devices `names` from the specs in `dir` (JSON; kind=name). As the CDI library
// does, a spec's own containerEdits are applied once for a container that uses any of its
// devices, before each device's edits, and a spec with a device without edits is not loaded.
void ApplyCdi(const std::string& dir, const std::vector<std::string>& names,
              std::vector<Mount>* mounts, std::map<std::string, std::string>* env,
              std::vector<Hook>* hooks) {
  std::map<std::string, nlohmann::json> edits;       // qualified name -> containerEdits
  std::map<std::string, std::string> spec_of;        // qualified name -> its spec's file
  std::map<std::string, nlohmann::json> spec_edits;  // file -> the spec's containerEdits
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string file = e->d_name;
      if (file.size() < 5 || file.substr(file.size() - 5) != ".json") continue;
      std::ifstream in(dir + "/" + file);
      std::stringstream text;
      text << in.rdbuf();
      nlohmann::json spec = nlohmann::json::parse(text.str(), nullptr, false);
      if (!spec.is_object()) Die("CDI spec " + dir + "/" + file + " is not JSON");
      const std::string version = spec.value("cdiVersion", "");
      static const std::set<std::string> kKnown = {"0.3.0", "0.4.0", "0.5.0"};
      if (kKnown.count(version) == 0) {
        Die("CDI spec " + file + ": cdiVersion \"" + version +
            "\" is newer than this runtime reads (0.5.0)");
      }
      bool valid = true;
      for (const auto& dev : spec.value("devices", nlohmann::json::array())) {
        const auto e = dev.value("containerEdits", nlohmann::json::object());
        bool empty = true;
        for (const char* k : {"env", "mounts", "deviceNodes", "hooks"}) {
          empty = empty && (!e.contains(k) || e[k].empty());
        }
        valid = valid && !empty;
      }
      if (!valid) {
        std::fprintf(stderr,
                     "k8s_container_run: CDI spec %s: invalid device, empty device edits; "
                     "the spec is not loaded\n",
                     file.c_str());
        continue;
      }
      for (const auto& dev : spec.value("devices", nlohmann::json::array())) {
        const std::string qualified = spec.value("kind", "") + "=" + dev.value("name", "");
        edits[qualified] = dev.value("containerEdits", nlohmann::json::object());
        spec_of[qualified] = file;
      }
      spec_edits[file] = spec.value("containerEdits", nlohmann::json::object());
    }
    closedir(d);
  }
  auto apply = [&](const nlohmann::json& e) {
    for (const auto& kv : e.value("env", nlohmann::json::array())) {
      const std::string s = kv.get<std::string>();
      (*env)[s.substr(0, s.find('='))] = s.substr(s.find('=') + 1);
    }
    for (const auto& m : e.value("mounts", nlohmann::json::array())) {
      Mount mount{m.value("hostPath", ""), m.value("containerPath", ""), false};
      for (const auto& o : m.value("options", nlohmann::json::array()))
        mount.read_only |= o == "ro";
      mounts->push_back(mount);
    }
    for (const auto& h : e.value("hooks", nlohmann::json::array())) {
      const std::string name = h.value("hookName", "");
      if (name != "createRuntime" && name != "prestart") {
        Die("CDI edits: hook \"" + name + "\" is not run by this stand-in");
      }
      Hook hook{h.value("path", ""), {}, {}, h.value("timeout", 0)};
      for (const auto& a : h.value("args", nlohmann::json::array())) hook.args.push_back(a);
      for (const auto& v : h.value("env", nlohmann::json::array())) hook.env.push_back(v);
      hooks->push_back(hook);
    }
  };
  std::set<std::string> specs_applied;
  for (const std::string& name : names) {
    auto it = edits.find(name);
    if (it == edits.end()) Die("unresolvable CDI devices " + name);
    if (specs_applied.insert(spec_of[name]).second) apply(spec_edits[spec_of[name]]);
    apply(it->second);
  }
}

// Runs `hook` with the OCI state of this process's container on stdin (runc's way: its args,
// its env only, killed at its timeout). Dies when it fails.
void RunHook(size_t index, const Hook& hook, const std::string& state) {
  int in[2];
  if (pipe(in) != 0) Die(std::string("pipe: ") + std::strerror(errno));
  const pid_t child = fork();
  if (child < 0) Die(std::string("fork: ") + std::strerror(errno));
  if (child == 0) {
    dup2(in[0], 0);
    close(in[0]);
    close(in[1]);
    std::vector<char*> argv, envp;
    for (const std::string& a : hook.args) argv.push_back(const_cast<char*>(a.c_str()));
    if (argv.empty()) argv.push_back(const_cast<char*>(hook.path.c_str()));
    argv.push_back(nullptr);
    for (const std::string& e : hook.env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    execve(hook.path.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  close(in[0]);
  const ssize_t written = write(in[1], state.data(), state.size());
  (void)written;
  close(in[1]);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::seconds(hook.timeout_seconds > 0 ? hook.timeout_seconds : 60);
  int status = 0;
  while (waitpid(child, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      Die("error running hook #" + std::to_string(index) + ": timeout after " +
          std::to_string(hook.timeout_seconds) + "s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    Die("error running hook #" + std::to_string(index) + ": exit status " +
        std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<Mount> mounts;
  std::map<std::string, std::string> env;
  std::vector<std::string> cdi;
  std::string cdi_dir = "/var/run/cdi", cgroup, scratch = "/tmp";
  int i = 1;
  for (; i < argc && std::strcmp(argv[i], "--") != 0; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) Die("missing a value after " + a);
    const std::string v = argv[++i];
    if (a == "--mount") {
      Mount m;
      const size_t c1 = v.find(':');
      const size_t c2 = v.find(':', c1 + 1);
      m.host = v.substr(0, c1);
      m.container = v.substr(c1 + 1, c2 == std::string::npos ? std::string::npos : c2 - c1 - 1);
      m.read_only = c2 != std::string::npos && v.substr(c2 + 1) == "ro";
      mounts.push_back(m);
    } else if (a == "--env") {
      env[v.substr(0, v.find('='))] = v.substr(v.find('=') + 1);
    } else if (a == "--cdi") {
      cdi.push_back(v);
    } else if (a == "--cdi-dir") {
      cdi_dir = v;
    } else if (a == "--cgroup") {
      cgroup = v;
    } else if (a == "--scratch") {
      scratch = v;
    } else {
      Die("unknown argument " + a);
    }
  }
  if (i + 1 >= argc) Die("no program after --");
  if (!cgroup.empty()) {
    MkdirP(cgroup);
    std::ofstream procs(cgroup + "/cgroup.procs");
    procs << getpid() << "\n";
    if (!procs) Die("cannot join cgroup " + cgroup);
  }
  std::vector<Hook> hooks;
  ApplyCdi(cdi_dir, cdi, &mounts, &env, &hooks);
  if (unshare(CLONE_NEWNS) != 0) Die(std::string("unshare(CLONE_NEWNS): ") + std::strerror(errno));
  const std::string state = nlohmann::json{
      {"ociVersion", "1.0.2"},
      {"id", "k8s-container-run-" + std::to_string(getpid())},
      {"status", "creating"},
      {"pid", getpid()},
      {"bundle", scratch}}.dump();
  for (size_t h = 0; h < hooks.size(); ++h) RunHook(h, hooks[h], state);
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    Die(std::string("making / private: ") + std::strerror(errno));
  }
  // Targets that do not exist go in an overlay of their top folder, private to this namespace.
  std::set<std::string> overlaid;
  for (const Mount& m : mounts) {
    struct stat st {};
    if (stat(m.container.c_str(), &st) == 0) continue;
    const std::string top = "/" + m.container.substr(1, m.container.find('/', 1) - 1);
    if (overlaid.count(top) != 0) continue;
    std::string tag = top.substr(1);
    const std::string up = scratch + "/overlay-" + tag + "-up",
                      work = scratch + "/overlay-" + tag + "-work";
    MkdirP(up);
    MkdirP(work);
    const std::string options = "lowerdir=" + top + ",upperdir=" + up + ",workdir=" + work;
    if (mount("overlay", top.c_str(), "overlay", 0, options.c_str()) != 0) {
      Die("overlay on " + top + ": " + std::strerror(errno));
    }
    overlaid.insert(top);
  }
  for (const Mount& m : mounts) {
    struct stat src {};
    if (stat(m.host.c_str(), &src) != 0)
      Die("mount source " + m.host + ": " + std::strerror(errno));
    struct stat dst {};
    if (stat(m.container.c_str(), &dst) != 0) {
      MkdirP(m.container.substr(0, m.container.rfind('/')));
      if (S_ISDIR(src.st_mode)) {
        MkdirP(m.container);
      } else {
        const int fd = open(m.container.c_str(), O_CREAT | O_WRONLY, 0644);
        if (fd < 0) Die("creating mount target " + m.container + ": " + std::strerror(errno));
        close(fd);
      }
    }
    if (mount(m.host.c_str(), m.container.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) {
      Die("bind " + m.host + " on " + m.container + ": " + std::strerror(errno));
    }
    if (m.read_only && mount(nullptr, m.container.c_str(), nullptr,
                             MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0) {
      Die("read-only " + m.container + ": " + std::strerror(errno));
    }
  }
  for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
  execv(argv[i + 1], argv + i + 1);
  Die(std::string("cannot run ") + argv[i + 1] + ": " + std::strerror(errno));
}
