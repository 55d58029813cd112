// Container identity: which container a process belongs to, by what the kernel says about it (its
// cgroup, its pid namespace), never by which socket it connected to or what it says of itself.
//
// Recording. `IDENTIFY id=X pid=P` on the node socket (root only) says: container X is the runtime
// container whose init process is P. The device plugin's CDI spec carries an OCI createRuntime
// hook (tessera-oci-hook) that sends it while P, the runtime's init, waits for the hook: P is then
// in the container's cgroup and namespaces and nothing of the container has run yet. tesserad reads
// /proc/P/cgroup and /proc/P/ns/{pid,mnt} and keeps, of P's cgroup paths, those that tell it apart
// from tesserad's own (a runtime puts each container in a cgroup of its own); where none does, its
// pid namespace. A container may have several records (a restarted container is a new runtime
// container); a record lasts while its init process lives (the same pid and start time): when a
// pid namespace's init exits, the kernel kills every process in it.
//
// Checking. A process is a member of X when, in every hierarchy of one of X's records, its cgroup
// path is the recorded one or below it (a container may make sub-groups; leaving its group needs
// write access to the host's cgroup tree, which a container does not have); for a record by pid
// namespace, when its pid namespace is X's. The process is named by SO_PEERCRED's pid, taken by
// the kernel at connect().
//
// Records are kept as files in a folder of the daemon's (one per container) so that a restarted
// tesserad knows them; a file is read back as untrusted input.
//
// A container no runtime hook identified (a device plugin without CDI) is only learnt: each
// process that registered through the container's own socket (which only the pod that mounts it
// reaches) is noted with its cgroup, and while it lives a process that never registered but is
// in the same cgroup is taken for the container's. Learnt cgroups serve attribution only (who is
// charged for memory or time on the GPU), never admission, and are kept in memory only.
//
// Thread-safety: every method takes the book's mutex (the event loop and the reconciler's thread
// both ask). What it must not do: talk to sockets, or touch the ledger.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "protocol/protocol.h"

namespace tessera::daemon {

class Registry;

// One line of /proc/PID/cgroup: the hierarchy ("ID:controllers", "0:" for cgroup v2) and the path.
struct CgroupEntry {
  std::string hierarchy;
  std::string path;
  bool operator==(const CgroupEntry& o) const { return hierarchy == o.hierarchy && path == o.path; }
};

// What the kernel says about one process.
struct ProcessIdentity {
  std::vector<CgroupEntry> cgroups;
  uint64_t pid_ns = 0;       // inode of /proc/PID/ns/pid
  uint64_t mnt_ns = 0;       // inode of /proc/PID/ns/mnt
  uint64_t start_ticks = 0;  // field 22 of /proc/PID/stat: with the pid, names the process
};

// Parses the text of a /proc/PID/cgroup file. Every line must be ID:CONTROLLERS:/PATH.
Result<std::vector<CgroupEntry>> ParseProcCgroup(std::string_view text);
// Reads `proc_root`/PID/{cgroup,stat,ns/pid,ns/mnt}.
Result<ProcessIdentity> ReadProcessIdentity(const std::string& proc_root, pid_t pid);
// Whether `path` is `group` or below it ("/a/b" is below "/a", "/ab" is not).
bool CgroupWithin(std::string_view path, std::string_view group);

// One runtime container's record.
struct ContainerIdentity {
  pid_t init_pid = 0;
  uint64_t init_start_ticks = 0;
  // The hierarchies that tell the container apart from tesserad; empty: matched by pid_ns.
  std::vector<CgroupEntry> cgroups;
  uint64_t pid_ns = 0, mnt_ns = 0;
  std::string runtime_id;  // the runtime's id of the container (OCI state "id"), for the log

  // Whether `process` is one of this container's.
  bool Holds(const ProcessIdentity& process) const;
  // "cgroup memory:/a/b, pids:/a/b" or "pid namespace 4026532180", for messages.
  std::string Describe() const;
};

class IdentityBook {
 public:
  // `proc_root`: where /proc is (tests pass a folder of their own). `store_dir`: the folder that
  // keeps the records over a restart (created 0700); empty: kept in memory only.
  explicit IdentityBook(std::string proc_root = "/proc", std::string store_dir = "");
  IdentityBook(const IdentityBook&) = delete;
  IdentityBook& operator=(const IdentityBook&) = delete;

  // Reads the stored records back (at start); returns a line per record dropped and why.
  std::vector<std::string> Load();

  // IDENTIFY: container `id`'s processes are those in the cgroup (or pid namespace) of `pid`,
  // the init process of the runtime container. Refused when nothing tells that process from
  // tesserad's own, or when it cannot be read.
  Result<ContainerIdentity> Record(const std::string& id, pid_t pid, const std::string& runtime_id);
  // CONTAINER identify=1 (or =0): whether container `id`'s processes must be identified before
  // any is served (the runtime hook will identify them).
  void Expect(const std::string& id, bool expected);
  // Drops the expectation of every container not in `live` (it was removed).
  void RetainExpected(const std::set<std::string>& live);
  // Forgets container `id` entirely (it was removed).
  void Forget(const std::string& id);
  // Drops records whose init process has exited (the sweep, once a second); returns a line each.
  std::vector<std::string> Prune();

  enum class Verdict {
    kMember,      // the process is one of the container's
    kStranger,    // the container has records and the process is in none of them
    kUnrecorded,  // the container has no record (yet)
  };
  Verdict Check(const std::string& id, pid_t pid) const;
  bool Expected(const std::string& id) const;
  // A process registered through container `id`'s own socket: learnt as the container's (see
  // the file comment) when the container has no record.
  void NoteRegistrant(const std::string& id, pid_t pid);
  // The container one of whose records holds `pid` (the most specific one), or nullopt. Learnt
  // cgroups are not asked: they decide no admission.
  std::optional<std::string> ContainerOf(pid_t pid) const;
  // For several processes at once (the reconciler's pass): by records, else by learnt cgroups.
  std::map<int32_t, std::string> ContainersOf(const std::set<int32_t>& pids) const;
  // Containers with at least one record.
  std::set<std::string> Identified() const;
  // True the first time it is asked about `id` (the "no identity" note is said once).
  bool FirstUnidentifiedUse(const std::string& id) const;

 private:
  std::optional<std::string> ContainerOfLocked(const ProcessIdentity& process, bool learnt) const;
  void StoreLocked(const std::string& id) const;
  bool InitAlive(const ContainerIdentity& r) const;

  const std::string proc_root_;
  const std::string store_dir_;
  mutable std::mutex mu_;
  ProcessIdentity self_;  // tesserad's own, read once
  std::map<std::string, std::vector<ContainerIdentity>> records_;
  std::map<std::string, std::vector<ContainerIdentity>> learnt_;  // by registrant, see above
  std::set<std::string> expected_;
  mutable std::set<std::string> noted_;
};

// The server's identity checks, kept here so that the event loop only calls them.
// At accept() on container `id`'s socket: "" to serve the peer `pid`, else the refusal. With
// `require`, a container without a record serves nobody; without, it serves anyone (said once).
std::string AdmitToContainerSocket(const IdentityBook& book, bool require, const std::string& id,
                                   pid_t pid);
// At HELLO (any socket) of process `pid` into container `id`: "" to go on, else the refusal.
std::string AdmitHello(const IdentityBook& book, const std::string& id, pid_t pid);
// The server's once-a-second sweep: drops records whose init process exited and the
// expectation of containers no longer in the ledger, logging what it dropped.
void SweepIdentities(IdentityBook& book, const Registry& registry);
// IDENTIFY id=X pid=P [runtime_id=R] from a peer of uid `peer_uid` on the node socket: root
// only; X must be a live container an operator registered (CONTAINER).
Result<protocol::Message> Identify(IdentityBook& book, const Registry& registry,
                                   const protocol::Message& request, uid_t peer_uid);

}  // namespace tessera::daemon
