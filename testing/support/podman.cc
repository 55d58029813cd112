// Podman for tests: availability, images built here, containers with bounds and cleanup.
#include "testing/support/podman.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

namespace tessera::podman {

using namespace std::chrono_literals;

namespace {

constexpr char kOwnerLabel[] = "tessera.test.owner";

std::string Which(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = dir + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  for (const char* dir2 : {"/usr/sbin", "/sbin"}) {  // runc lives in sbin, not always in PATH
    const std::string candidate = std::string(dir2) + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// Runs argv (a path first) with stdout+stderr captured; kills it after `timeout`.
std::pair<int, std::string> RunArgv(const std::vector<std::string>& argv,
                                    std::chrono::milliseconds timeout) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return {-1, "pipe: " + std::string(std::strerror(errno))};
  const pid_t pid = fork();
  if (pid < 0) {
    close(out[0]);
    close(out[1]);
    return {-1, "fork: " + std::string(std::strerror(errno))};
  }
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(out[1], 2);
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(out[1]);
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool timed_out = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000))) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(out[0], buf, sizeof(buf));
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  if (timed_out) {
    return {-1, text + "\n(killed after " + std::to_string(timeout.count()) + " ms)"};
  }
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text};
}

std::string Join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

}  // namespace

std::vector<std::string> Ulimits() {
  rlimit files{}, procs{};
  getrlimit(RLIMIT_NOFILE, &files);
  getrlimit(RLIMIT_NPROC, &procs);
  const uint64_t nofile = files.rlim_max == RLIM_INFINITY ? 1048576 : files.rlim_max;
  // podman lowers its own nproc limit to 32768 before starting the runtime.
  const uint64_t nproc =
      std::min<uint64_t>(32768, procs.rlim_max == RLIM_INFINITY ? 32768 : procs.rlim_max);
  return {"--ulimit", "nofile=" + std::to_string(nofile) + ":" + std::to_string(nofile), "--ulimit",
          "nproc=" + std::to_string(nproc) + ":" + std::to_string(nproc)};
}

void RemoveOrphans() {
  auto [rc, out] =
      RunPodman({"ps", "-a", "--filter", std::string("label=") + kOwnerLabel, "--format",
                 std::string("{{.Names}} {{index .Labels \"") + kOwnerLabel + "\"}}"},
                30s);
  if (rc != 0) return;
  std::stringstream lines(out);
  std::string name, owner;
  while (lines >> name >> owner) {
    const long pid = std::strtol(owner.c_str(), nullptr, 10);
    if (pid <= 0 || (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)) {
      RunPodman({"rm", "-f", "--time", "0", name}, 30s);
    }
  }
}

namespace {

std::string CheckPodman() {
  if (geteuid() != 0) {
    return "the runtime tests run podman as root (CDI specs in /var/run/cdi, privileged "
           "containers); this process runs as uid " +
           std::to_string(geteuid());
  }
  std::vector<std::string> missing;
  if (Which("podman").empty()) missing.push_back("podman");
  if (Which("runc").empty()) missing.push_back("runc");
  struct stat st {};
  if (stat("/bin/busybox", &st) != 0) missing.push_back("busybox-static (/bin/busybox)");
  if (!missing.empty()) {
    return "a real container runtime is needed and " + Join(missing, ", ") +
           " is missing (scripts/dev installs them; or apt-get install podman runc "
           "busybox-static)";
  }
  auto [ldd_rc, ldd_out] = RunArgv({"/bin/sh", "-c", "ldd /bin/busybox 2>&1"}, 10s);
  if (ldd_out.find("not a dynamic executable") == std::string::npos &&
      ldd_out.find("statically linked") == std::string::npos) {
    return "/bin/busybox is not the static busybox (install busybox-static): ldd says " + ldd_out;
  }
  RemoveOrphans();
  ImageContents probe;
  probe.name = "probe";
  auto image = Image::Build(probe);
  if (!image.ok()) return "podman cannot build a test image: " + image.error();
  std::vector<std::string> args = {
      "run",       "--rm", "--network", "none",
      "--timeout", "30",   "--name",    process::UniqueName("tessera-test-probe")};
  for (const std::string& u : Ulimits()) args.push_back(u);
  args.insert(args.end(), {*image, "/bin/true"});
  auto [rc, out] = RunPodman(args, 60s);
  if (rc != 0) {
    return "podman (runc) cannot run a container here: exit " + std::to_string(rc) + ": " + out;
  }
  return "";
}

// The identity of the files that make an image: their paths, sizes and modification times.
std::string Identity(const ImageContents& c, const std::vector<std::string>& libraries) {
  std::string text = c.name + "\n";
  auto add = [&](const std::string& host, const std::string& target) {
    struct stat st {};
    stat(host.c_str(), &st);
    text += host + " " + target + " " + std::to_string(st.st_size) + " " +
            std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + "\n";
  };
  add("/bin/busybox", "/bin/busybox");
  for (const auto& [host, target] : c.files) add(host, target);
  for (const std::string& lib : libraries) add(lib, lib);
  return text;
}

// FNV-1a, 64 bits, as hex: names an image by its identity (not a security boundary).
std::string Hash(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : text) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// The shared libraries `files` load (ldd's paths and the dynamic loader), less `without`.
Result<std::vector<std::string>> Libraries(const std::vector<std::string>& files,
                                           const std::vector<std::string>& without) {
  std::set<std::string> libs;
  for (const std::string& f : files) {
    auto [rc, out] = RunArgv({"/bin/sh", "-c", "ldd " + ShellQuote(f) + " 2>&1"}, 30s);
    if (out.find("not a dynamic executable") != std::string::npos) continue;
    if (rc != 0) return Result<std::vector<std::string>>::Error("ldd " + f + ": " + out);
    std::stringstream lines(out);
    std::string line;
    while (std::getline(lines, line)) {
      std::string soname, arrow, path;
      std::stringstream words(line);
      words >> soname >> arrow >> path;
      if (arrow == "=>") {
        if (std::find(without.begin(), without.end(), soname) != without.end()) continue;
        if (path == "not") {
          return Result<std::vector<std::string>>::Error("ldd " + f + ": " + soname + " not found");
        }
        if (!path.empty() && path[0] == '/') libs.insert(path);
      } else if (!soname.empty() && soname[0] == '/') {
        libs.insert(soname);  // the dynamic loader, by its absolute path
      }
    }
  }
  return std::vector<std::string>(libs.begin(), libs.end());
}

std::once_flag g_once;
std::string g_problem;

}  // namespace

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

bool SkipRequested() {
  const char* v = std::getenv("TESSERA_SKIP_RUNTIME_TESTS");
  return v != nullptr && std::string(v) == "1";
}

std::string Problem() {
  std::call_once(g_once, [] { g_problem = CheckPodman(); });
  return g_problem;
}

std::vector<std::string> Command() {
  static const std::string podman = Which("podman");
  return {podman.empty() ? "/usr/bin/podman" : podman,
          "--runtime",
          "runc",
          "--cgroup-manager",
          "cgroupfs",
          "--events-backend",
          "file"};
}

std::pair<int, std::string> RunPodman(const std::vector<std::string>& args,
                                      std::chrono::milliseconds timeout) {
  std::vector<std::string> argv = Command();
  argv.insert(argv.end(), args.begin(), args.end());
  return RunArgv(argv, timeout);
}

Result<std::string> Image::Build(const ImageContents& c) {
  for (char ch : c.name) {
    if (!(std::islower(static_cast<unsigned char>(ch)) ||
          std::isdigit(static_cast<unsigned char>(ch)) || ch == '-')) {
      return Result<std::string>::Error("image name \"" + c.name + "\": expected [a-z0-9-]");
    }
  }
  std::vector<std::string> inputs = c.libraries_of;
  for (const auto& [host, target] : c.files) {
    if (access(host.c_str(), R_OK) != 0) {
      return Result<std::string>::Error("image " + c.name + ": " + host + " cannot be read");
    }
    if (target.empty() || target[0] != '/') {
      return Result<std::string>::Error("image " + c.name + ": \"" + target +
                                        "\" is not an absolute path");
    }
    inputs.push_back(host);
  }
  auto libraries = Libraries(inputs, c.without);
  if (!libraries.ok()) return libraries.status();

  const std::string root = process::BuildDir() + "/podman";
  mkdir(root.c_str(), 0755);
  const std::string dir = root + "/" + c.name + "-rootfs";
  const std::string d = ShellQuote(dir);
  std::string script = "set -e; rm -rf " + d + "; mkdir -p " + d + "/bin " + d + "/tmp " + d +
                       "/etc; chmod 1777 " + d + "/tmp; cp /bin/busybox " + d +
                       "/bin/busybox; for a in $(/bin/busybox --list); do [ \"$a\" = busybox ] || "
                       "ln -sf busybox " +
                       d + "/bin/$a; done; ";
  auto copy = [&](const std::string& host, const std::string& target) {
    const std::string to = ShellQuote(dir + target);
    script += "mkdir -p \"$(dirname " + to + ")\"; cp -L " + ShellQuote(host) + " " + to + "; ";
  };
  for (const std::string& lib : *libraries) copy(lib, lib);
  for (const auto& [host, target] : c.files) copy(host, target);
  script += "echo 'root:x:0:0:root:/:/bin/sh' > " + d + "/etc/passwd; ";
  script += "tar -C " + d + " -cf " + ShellQuote(dir + ".tar") + " .";

  // The tag covers the files and the recipe: a changed file or recipe makes a new image.
  const std::string repo =
      "localhost/tessera-test-" + c.name + "-" + Hash(process::BuildDir()).substr(0, 8);
  const std::string ref = repo + ":" + Hash(Identity(c, *libraries) + script);

  // One builder at a time per image name and build tree; the others then find it built.
  const std::string lock_path = root + "/" + c.name + ".lock";
  const int lock = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock < 0 || flock(lock, LOCK_EX) != 0) {
    if (lock >= 0) close(lock);
    return Result<std::string>::Error(lock_path + ": " + std::strerror(errno));
  }
  struct Unlock {
    int fd;
    ~Unlock() { close(fd); }
  } unlock{lock};

  if (RunPodman({"image", "exists", ref}, 30s).first == 0) return ref;
  auto [rc, out] = RunArgv({"/bin/sh", "-c", script}, 120s);
  if (rc != 0) return Result<std::string>::Error("image " + c.name + ": building the root: " + out);
  auto [irc, iout] = RunPodman({"import", "--quiet", dir + ".tar", ref}, 120s);
  if (irc != 0) return Result<std::string>::Error("podman import " + ref + ": " + iout);
  unlink((dir + ".tar").c_str());
  // Older images of this name and build tree are of files since replaced.
  auto [lrc, list] = RunPodman(
      {"images", "--format", "{{.Repository}}:{{.Tag}}", "--filter", "reference=" + repo}, 30s);
  if (lrc == 0) {
    std::stringstream refs(list);
    std::string other;
    while (refs >> other) {
      if (other != ref) RunPodman({"rmi", "--force", other}, 30s);
    }
  }
  return ref;
}

Container::Container(const std::string& label, const RunOptions& o) {
  name_ = process::UniqueName("tessera-test-" + label);
  pid_file_ = "/tmp/" + name_ + ".pid";
  std::vector<std::string> argv = Command();
  argv.insert(argv.end(), {"run", "--rm", "-i", "--name", name_, "--label",
                           std::string(kOwnerLabel) + "=" + std::to_string(getpid()), "--timeout",
                           std::to_string(o.timeout.count()), "--pidfile", pid_file_, "--network",
                           o.network.empty() ? "none" : o.network});
  const std::vector<std::string> ulimits = Ulimits();
  argv.insert(argv.end(), ulimits.begin(), ulimits.end());
  if (!o.pid.empty()) argv.insert(argv.end(), {"--pid", o.pid});
  if (!o.ipc.empty()) argv.insert(argv.end(), {"--ipc", o.ipc});
  if (o.privileged) argv.push_back("--privileged");
  for (const std::string& e : o.env) argv.insert(argv.end(), {"--env", e});
  for (const RunOptions::Volume& v : o.volumes) {
    argv.insert(argv.end(), {"--volume", v.host + ":" + v.container +
                                             (v.options.empty() ? "" : ":" + v.options)});
  }
  for (const std::string& d : o.devices) argv.insert(argv.end(), {"--device", d});
  argv.insert(argv.end(), o.extra.begin(), o.extra.end());
  argv.push_back(o.image);
  argv.insert(argv.end(), o.command.begin(), o.command.end());
  process_ = std::make_unique<process::ChildProcess>(argv, std::vector<std::string>{});
}

Container::~Container() {
  Remove();
  if (process_) {
    process_->Kill(SIGKILL);  // podman run itself, if still attached
    process_->Wait(10s);
  }
  unlink(pid_file_.c_str());
}

void Container::Remove() {
  if (removed_ || !started()) return;
  removed_ = true;
  RunPodman({"rm", "-f", "--time", "0", name_}, 30s);
}

std::optional<pid_t> Container::HostPid(std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  do {
    std::ifstream in(pid_file_);
    long pid = 0;
    if (in >> pid && pid > 0) return static_cast<pid_t>(pid);
    std::this_thread::sleep_for(20ms);
  } while (std::chrono::steady_clock::now() < end);
  return std::nullopt;
}

Status Container::Kill(int signal) {
  auto [rc, out] = RunPodman({"kill", "--signal", std::to_string(signal), name_}, 30s);
  if (rc != 0) return Status::Error("podman kill " + name_ + ": " + out);
  return Status::Ok();
}

std::optional<int> Container::Wait(std::chrono::milliseconds timeout) {
  return process_->Wait(timeout);
}

}  // namespace tessera::podman
