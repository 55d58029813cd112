// SlicePublisher: the ResourceSlice controller of one node's pool (see the header).
#include "k8s/dra/publisher.h"

#include <cstdio>
#include <set>

#include "k8s/dra/slices.h"

namespace tessera::k8s::dra {
namespace {

using namespace std::chrono_literals;

constexpr char kSlicesPath[] = "/apis/resource.k8s.io/v1/resourceslices";
constexpr size_t kMinIndexLength = 5;

void Log(const std::string& line) {
  std::fprintf(stderr, "tessera-dra-plugin: slices: %s\n", line.c_str());
}

// Hex digits of the largest index, at least kMinIndexLength.
size_t IndexLength(size_t slices) {
  size_t hex = 1;
  for (size_t v = slices > 0 ? slices - 1 : 0; v >= 16; v /= 16) ++hex;
  return std::max(kMinIndexLength, hex);
}

// The index a slice's name starts with, or -1.
int DecodeIndex(const std::string& name, size_t length) {
  const size_t dash = name.find('-');
  if (dash != length) return -1;
  int value = 0;
  for (size_t i = 0; i < length; ++i) {
    const char c = name[i];
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else {
      return -1;
    }
    if (value > (1 << 26)) return -1;
    value = value * 16 + digit;
  }
  return value;
}

std::string EncodeIndex(size_t index, size_t length) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%0*zx", static_cast<int>(length), index);
  return buf;
}

// The part of a slice's spec the controller compares, with quantities in canonical form.
Json Comparable(const Json& spec) {
  Json out = {{"devices", spec.value("devices", Json::array())},
              {"sharedCounters", spec.value("sharedCounters", Json::array())}};
  CanonicalizeQuantities(&out);
  return out;
}

}  // namespace

SlicePublisher::SlicePublisher(ApiClient* api, std::string driver, std::string node,
                               std::string node_uid)
    : api_(api),
      driver_(std::move(driver)),
      node_(std::move(node)),
      node_uid_(std::move(node_uid)) {}

SlicePublisher::~SlicePublisher() { Stop(); }

void SlicePublisher::Start() {
  ListOptions o;
  o.field_selector = "spec.nodeName=" + node_ + ",spec.driver=" + driver_;
  watch_ = std::make_unique<Reflector>(
      api_, kSlicesPath, o,
      Reflector::Handlers{[this](const std::vector<Json>& items) {
                            std::lock_guard<std::mutex> lock(mu_);
                            actual_.clear();
                            for (const Json& s : items) {
                              actual_[s["metadata"].value("name", "")] = s;
                            }
                            listed_ = true;
                            dirty_ = true;
                            cv_.notify_all();
                          },
                          [this](const WatchEvent& e) {
                            if (e.type == "BOOKMARK") return;
                            const std::string name = e.object["metadata"].value("name", "");
                            if (e.type == "DELETED") {
                              Forget(name);
                            } else {
                              Store(e.object);
                            }
                          }});
  watch_->Start();
  thread_ = std::thread([this] { Run(); });
}

void SlicePublisher::Stop() {
  if (stop_.exchange(true)) return;
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (watch_) watch_->Stop();
}

void SlicePublisher::Set(std::vector<Json> slices) {
  std::lock_guard<std::mutex> lock(mu_);
  if (slices == desired_) return;
  desired_ = std::move(slices);
  dirty_ = true;
  in_sync_ = false;
  cv_.notify_all();
}

bool SlicePublisher::InSync() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_sync_;
}

bool SlicePublisher::WaitInSync(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [this] { return in_sync_; });
}

int64_t SlicePublisher::generation() const {
  std::lock_guard<std::mutex> lock(mu_);
  return generation_;
}

std::string SlicePublisher::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_error_;
}

void SlicePublisher::Store(const Json& slice) {
  const std::string name = slice["metadata"].value("name", "");
  std::lock_guard<std::mutex> lock(mu_);
  // Our own write and the watch's event of it may arrive in either order: the newer one stays.
  auto rv = [](const Json& s) {
    return std::strtoull(s["metadata"].value("resourceVersion", "0").c_str(), nullptr, 10);
  };
  auto it = actual_.find(name);
  if (it != actual_.end() && rv(it->second) > rv(slice)) return;
  actual_[name] = slice;
  dirty_ = true;
  cv_.notify_all();
}

void SlicePublisher::Forget(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (actual_.erase(name) != 0) {
    dirty_ = true;
    in_sync_ = false;
    cv_.notify_all();
  }
}

void SlicePublisher::Run() {
  auto retry_at = std::chrono::steady_clock::now();
  while (!stop_.load()) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      while (!stop_.load() &&
             !(listed_ && dirty_ && std::chrono::steady_clock::now() >= retry_at)) {
        if (listed_ && dirty_) {
          cv_.wait_until(lock, retry_at);
        } else {
          cv_.wait_for(lock, 1s);
        }
      }
      if (stop_.load()) return;
      dirty_ = false;
    }
    auto done = Sync();
    std::lock_guard<std::mutex> lock(mu_);
    if (!done.ok()) {
      if (last_error_ != done.error()) Log(done.error() + " (trying again in 1 s)");
      last_error_ = done.error();
      dirty_ = true;
      retry_at = std::chrono::steady_clock::now() + 1s;
    } else {
      last_error_.clear();
      in_sync_ = *done && !dirty_;
      retry_at = std::chrono::steady_clock::now();
      cv_.notify_all();
    }
  }
}

Result<bool> SlicePublisher::Sync() {
  std::vector<Json> desired;
  std::vector<Json> slices;
  {
    std::lock_guard<std::mutex> lock(mu_);
    desired = desired_;
    for (const auto& [name, s] : actual_) {
      if (s["spec"]["pool"].value("name", "") == node_) slices.push_back(s);
    }
  }
  auto remove = [&](const std::vector<Json>& obsolete) -> Status {
    for (const Json& s : obsolete) {
      const std::string name = s["metadata"].value("name", "");
      auto r = api_->Delete(std::string(kSlicesPath) + "/" + name, s["metadata"].value("uid", ""),
                            s["metadata"].value("resourceVersion", ""));
      if (!r.ok() && r.kind() != ApiErrorKind::kNotFound) {
        return Status::Error("deleting ResourceSlice " + name + ": " + r.error().message);
      }
      ++writes_;
      Forget(name);
    }
    return Status::Ok();
  };
  if (desired.empty()) {
    if (Status s = remove(slices); !s.ok()) return s;
    return slices.empty();
  }
  if (node_uid_.empty()) {
    auto node = api_->GetNode(node_);
    if (!node.ok()) return Status::Error("reading node " + node_ + ": " + node.error().message);
    node_uid_ = (*node)["metadata"].value("uid", "");
  }

  // The highest generation; older slices are obsolete, as are names that match no index.
  int64_t generation = 0;
  for (const Json& s : slices) {
    generation = std::max<int64_t>(generation, s["spec"]["pool"].value("generation", int64_t{0}));
  }
  const size_t length = IndexLength(desired.size());
  std::map<size_t, Json> current;
  std::vector<Json> obsolete;
  for (const Json& s : slices) {
    if (s["spec"]["pool"].value("generation", int64_t{0}) < generation) {
      obsolete.push_back(s);
      continue;
    }
    const int index = DecodeIndex(s["metadata"].value("name", ""), length);
    if (index >= 0 && static_cast<size_t>(index) < desired.size() && current.count(index) == 0) {
      current[static_cast<size_t>(index)] = s;
    } else {
      obsolete.push_back(s);
    }
  }
  const int64_t count = static_cast<int64_t>(desired.size());
  Json pool = {{"name", node_}, {"generation", generation}, {"resourceSliceCount", count}};
  std::set<size_t> changed;
  for (const auto& [i, s] : current) {
    if (s["spec"]["pool"] != pool || Comparable(s["spec"]) != Comparable(desired[i])) {
      changed.insert(i);
    }
  }
  const size_t fresh = desired.size() - current.size();
  bool bumped = false;
  if (fresh != 0 || changed.size() > 1) {
    ++generation;
    bumped = true;
  }
  pool["generation"] = generation;
  if (obsolete.empty() && changed.empty() && fresh == 0) {
    std::lock_guard<std::mutex> lock(mu_);
    generation_ = generation;
    return true;
  }
  if (Status s = remove(obsolete); !s.ok()) return s;
  auto spec_of = [&](size_t i) {
    Json spec = {{"driver", driver_}, {"pool", pool}, {"nodeName", node_}};
    for (const char* k : {"devices", "sharedCounters"}) {
      if (desired[i].contains(k)) spec[k] = desired[i][k];
    }
    return spec;
  };
  for (auto& [i, s] : current) {
    if (changed.count(i) == 0 && !bumped) continue;
    Json slice = s;
    slice["spec"] = spec_of(i);
    const std::string name = slice["metadata"].value("name", "");
    auto r = api_->Update(std::string(kSlicesPath) + "/" + name, slice);
    if (!r.ok()) return Status::Error("updating ResourceSlice " + name + ": " + r.error().message);
    ++writes_;
    Store(*r);
  }
  for (size_t i = 0; i < desired.size(); ++i) {
    if (current.count(i) != 0) continue;
    const Json owner = {{"apiVersion", "v1"},
                        {"kind", "Node"},
                        {"name", node_},
                        {"uid", node_uid_},
                        {"controller", true}};
    Json slice = {{"apiVersion", kResourceApiVersion},
                  {"kind", "ResourceSlice"},
                  {"metadata",
                   {{"generateName", EncodeIndex(i, length) + "-" + driver_ + "-" + node_ + "-"},
                    {"ownerReferences", Json::array({owner})}}},
                  {"spec", spec_of(i)}};
    auto r = api_->Create(kSlicesPath, slice);
    if (!r.ok())
      return Status::Error("creating ResourceSlice " + std::to_string(i) + ": " +
                           r.error().message);
    ++writes_;
    Store(*r);
  }
  std::lock_guard<std::mutex> lock(mu_);
  generation_ = generation;
  return false;  // look again: the next pass sees what was written
}

}  // namespace tessera::k8s::dra
