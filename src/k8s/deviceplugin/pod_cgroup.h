// The pod a process runs in, from its cgroup (/proc/PID/cgroup): kubelet puts every container in
// a cgroup below its pod's, named "pod<uid>" (cgroupfs driver: .../kubepods/burstable/pod<uid>/
// <container>) or "kubepods-<qos>-pod<uid with _ for ->.slice" (systemd driver). The kernel writes
// this file, so a process cannot claim another pod. Pure parsing plus one file read; no policy.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

namespace tessera::k8s {

// The pod UID in the text of a /proc/PID/cgroup file, or nullopt when it names none.
std::optional<std::string> PodUidFromCgroup(const std::string& cgroup_text);
// Reads `proc_root`/PID/cgroup; nullopt when the process is gone or in no pod.
std::optional<std::string> PodUidOfProcess(const std::string& proc_root, pid_t pid);

}  // namespace tessera::k8s
