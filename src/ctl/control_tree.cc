// The control tree's paths, formats and write rules over a NodeControl snapshot.
//
// Must not: keep state between calls, do I/O, log, or change the node except through exactly one
// NodeControl setter per accepted write.
#include "ctl/control_tree.h"

#include <algorithm>
#include <array>
#include <utility>
#include <variant>

#include "arbiter/arbiter.h"
#include "core/container_id.h"
#include "core/number.h"
#include "core/text.h"

namespace tessera::ctl {
namespace {

enum class FileKind {
  kVersion,
  kDefaultMemsize,
  kPolicy,
  kMaxInst,
  kFreeWeight,
  kPrioRatio,
  kWeight,
  kMemsize,
  kHighPriority,
  kMeminfo,
  kId,
};

struct FileSpec {
  std::string_view name;
  FileKind kind;
  bool writable;        // in the full view
  bool visible_scoped;  // shown (read-only) in a container-scoped view
};

// Each folder's files, in listing order.
constexpr std::array<FileSpec, 2> kRootFiles = {{
    {"version", FileKind::kVersion, false, true},
    {"default_memsize", FileKind::kDefaultMemsize, true, false},
}};
constexpr std::array<FileSpec, 4> kGpuFiles = {{
    {"policy", FileKind::kPolicy, true, false},
    {"max_inst", FileKind::kMaxInst, true, false},
    {"free_weight", FileKind::kFreeWeight, false, true},
    {"prio_ratio", FileKind::kPrioRatio, true, false},
}};
constexpr std::array<FileSpec, 5> kContainerFiles = {{
    {"weight", FileKind::kWeight, true, true},
    {"memsize", FileKind::kMemsize, true, true},
    {"highprio", FileKind::kHighPriority, true, true},
    {"meminfo", FileKind::kMeminfo, false, true},
    {"id", FileKind::kId, false, true},
}};

constexpr std::string_view kPathsExpected =
    "a path such as version, default_memsize, <gpu>/policy, <gpu>/max_inst, <gpu>/free_weight, "
    "<gpu>/prio_ratio or <gpu>/<container>/{weight,memsize,highprio,meminfo,id}";
constexpr std::string_view kWritableExpected =
    "a write to default_memsize, <gpu>/policy, <gpu>/max_inst, <gpu>/prio_ratio or "
    "<gpu>/<container>/{weight,memsize,highprio}";
constexpr std::string_view kSizeExpected =
    "a size in bytes such as 4294967296, or with a unit such as 4GiB or 512MiB";

template <size_t N>
const FileSpec* FindFile(const std::array<FileSpec, N>& files, std::string_view name) {
  for (const FileSpec& file : files) {
    if (file.name == name) {
      return &file;
    }
  }
  return nullptr;
}

// What a path names, resolved against one snapshot.
struct Node {
  enum class Kind { kRoot, kGpu, kContainer, kFile };
  Kind kind = Kind::kRoot;
  const FileSpec* file = nullptr;             // for kFile
  const GpuState* gpu = nullptr;              // for kGpu, kContainer and GPU/container files
  const ContainerState* container = nullptr;  // for kContainer and container files
  std::string name;                           // the last component ("" for the root)
};

// The reason a path does not resolve, without the path (the caller forms the message).
struct PathError {
  std::string reason;
};

const GpuState* FindGpu(const NodeSnapshot& snapshot, std::string_view component) {
  uint64_t index = 0;
  if (ParseDigits(component, &index) != DigitsError::kNone) {
    return nullptr;
  }
  if (std::to_string(index) != component) {  // one spelling per GPU: no leading zeros
    return nullptr;
  }
  for (const GpuState& gpu : snapshot.gpus) {
    if (gpu.index >= 0 && static_cast<uint64_t>(gpu.index) == index) {
      return &gpu;
    }
  }
  return nullptr;
}

const ContainerState* FindContainer(const GpuState& gpu, std::string_view id) {
  for (const ContainerState& container : gpu.containers) {
    if (container.id == id) {
      return &container;
    }
  }
  return nullptr;
}

// Whether a container with `id` is reachable in the tree (valid id, not hidden by a GPU file).
bool ShowsContainer(std::string_view id) {
  return IsValidContainerId(id) && !IsControlTreeGpuFileName(id);
}

// Whether GPU `gpu` appears in a view scoped to `scope` (nullopt: the full view).
bool GpuVisible(const GpuState& gpu, const std::optional<std::string>& scope) {
  return !scope || FindContainer(gpu, *scope) != nullptr;
}

std::variant<Node, PathError> Resolve(std::string_view path, const NodeSnapshot& snapshot,
                                      const std::optional<std::string>& scope) {
  if (path.size() > kMaxPathLength) {
    return PathError{"path is " + std::to_string(path.size()) + " bytes long, at most " +
                     std::to_string(kMaxPathLength) + " are allowed"};
  }
  std::string_view rest = path;
  if (!rest.empty() && rest.front() == '/') {
    rest.remove_prefix(1);
  }
  if (!rest.empty() && rest.back() == '/') {
    rest.remove_suffix(1);
  }
  std::vector<std::string_view> parts;
  while (!rest.empty()) {
    const size_t slash = rest.find('/');
    std::string_view part = rest.substr(0, slash);
    if (part.empty()) {
      return PathError{"empty path component"};
    }
    if (part == "." || part == "..") {
      return PathError{"\".\" and \"..\" are not allowed in a path"};
    }
    parts.push_back(part);
    if (slash == std::string_view::npos) {
      break;
    }
    rest.remove_prefix(slash + 1);
  }

  const PathError not_found{"no such file or folder"};
  Node node;
  if (parts.empty()) {
    return node;
  }
  node.name = std::string(parts.back());
  if (parts.size() > 3) {
    return not_found;
  }
  if (const FileSpec* file = FindFile(kRootFiles, parts[0])) {
    if (parts.size() != 1 || (scope && !file->visible_scoped)) {
      return not_found;
    }
    node.kind = Node::Kind::kFile;
    node.file = file;
    return node;
  }
  node.gpu = FindGpu(snapshot, parts[0]);
  if (node.gpu == nullptr || !GpuVisible(*node.gpu, scope)) {
    return not_found;
  }
  if (parts.size() == 1) {
    node.kind = Node::Kind::kGpu;
    return node;
  }
  if (const FileSpec* file = FindFile(kGpuFiles, parts[1])) {
    if (parts.size() != 2 || (scope && !file->visible_scoped)) {
      return not_found;
    }
    node.kind = Node::Kind::kFile;
    node.file = file;
    return node;
  }
  if (!ShowsContainer(parts[1]) || (scope && *scope != parts[1])) {
    return not_found;
  }
  node.container = FindContainer(*node.gpu, parts[1]);
  if (node.container == nullptr) {
    return not_found;
  }
  if (parts.size() == 2) {
    node.kind = Node::Kind::kContainer;
    return node;
  }
  node.file = FindFile(kContainerFiles, parts[2]);
  if (node.file == nullptr) {
    return not_found;
  }
  node.kind = Node::Kind::kFile;
  return node;
}

// How a path is named at the start of an error: as written when it is short and plain, else
// quoted (so that a message stays one printable line whatever the caller sent).
std::string PathName(std::string_view path) {
  const bool plain = !path.empty() && path.size() <= kMaxPathLength &&
                     std::all_of(path.begin(), path.end(), [](char c) {
                       return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                              (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-' ||
                              c == '/';
                     });
  return plain ? std::string(path) : "control-tree path " + QuoteValue(path);
}

// Errors of Stat, List and Read: `control-tree path "P": reason; expected ...`.
std::string PathReadError(std::string_view path, std::string_view reason) {
  return "control-tree path " + QuoteValue(path) + ": " + std::string(reason) + "; expected " +
         std::string(kPathsExpected);
}

std::string Decimal(uint64_t value) { return std::to_string(value) + "\n"; }

std::string SizeText(const std::optional<Bytes>& size) {
  return size ? Decimal(size->count()) : std::string("unlimited\n");
}

std::string MeminfoText(const GpuState& gpu, const ContainerState& container) {
  Bytes free = gpu.memory_free;
  if (container.memsize) {
    free = std::min(free, Bytes::SaturatingSub(*container.memsize, container.used));
  }
  std::string text = "Free: " + std::to_string(free.count()) + "\n";
  for (const ProcessMemory& process : container.processes) {
    text += "PID: " + std::to_string(process.pid) +
            " Mem: " + std::to_string(process.used.count()) + "\n";
  }
  return text;
}

std::string FileText(const Node& node, const NodeSnapshot& snapshot) {
  switch (node.file->kind) {
    case FileKind::kVersion:
      return snapshot.version + "\n";
    case FileKind::kDefaultMemsize:
      return SizeText(snapshot.default_memsize);
    case FileKind::kPolicy:
      return Decimal(static_cast<uint64_t>(node.gpu->policy));
    case FileKind::kMaxInst:
      return std::to_string(node.gpu->max_inst) + "\n";
    case FileKind::kFreeWeight:
      return std::to_string(node.gpu->free_weight) + "\n";
    case FileKind::kPrioRatio:
      return std::to_string(node.gpu->prio_ratio.value()) + "\n";
    case FileKind::kWeight:
      return std::to_string(node.container->weight) + "\n";
    case FileKind::kMemsize:
      return SizeText(node.container->memsize);
    case FileKind::kHighPriority:
      return node.container->high_priority ? "1\n" : "0\n";
    case FileKind::kMeminfo:
      return MeminfoText(*node.gpu, *node.container);
    case FileKind::kId:
      return node.container->id + "\n";
  }
  return "\n";
}

// A size written to the tree: a plain byte count, or a size with a unit (core/bytes.h). A bare
// number means bytes here (cGPU's files are in bytes), unlike the environment's GiB.
Result<Bytes> ParseTreeSize(std::string_view text, std::string_view name) {
  const std::string_view s = TrimSpaces(text);
  uint64_t count = 0;
  switch (ParseDigits(s, &count)) {
    case DigitsError::kNone:
      return Bytes(count);
    case DigitsError::kEmpty:
      return Result<Bytes>::Error(InputError(name, text, "empty value", kSizeExpected));
    case DigitsError::kOverflow:
      return Result<Bytes>::Error(InputError(name, text, "too large", kSizeExpected));
    case DigitsError::kNotDigits:
      break;
  }
  if (s.find_first_not_of("0123456789.") == std::string_view::npos) {
    // ParseBytes would explain this in terms of GiB, which is not what a bare number means here.
    return Result<Bytes>::Error(
        InputError(name, text, "a fraction of a byte count needs a unit", kSizeExpected));
  }
  Result<Bytes> size = ParseBytes(text, name);
  if (size.ok()) {
    return size;
  }
  // ParseBytes's message is `name="text": reason; expected <sizes where a bare number is GiB>`;
  // keep its reason and say what the tree expects instead.
  const std::string& message = size.error();
  const std::string head = std::string(name) + "=" + QuoteValue(text) + ": ";
  std::string reason = "not a size";
  const size_t tail = message.rfind("; expected ");
  if (message.rfind(head, 0) == 0 && tail != std::string::npos && tail > head.size()) {
    reason = message.substr(head.size(), tail - head.size());
  }
  return Result<Bytes>::Error(InputError(name, text, reason, kSizeExpected));
}

Status Refuse(std::string_view name, std::string_view text, std::string_view reason,
              std::string_view expected) {
  return Status::Error(InputError(name, text, reason, expected));
}

int SumOfWeights(const GpuState& gpu) {
  int sum = 0;
  for (const ContainerState& container : gpu.containers) {
    sum += container.weight;
  }
  return sum;
}

// Parses and checks a write to `node` (a writable file) and applies it through `control`.
Status ApplyWrite(NodeControl* control, const Node& node, std::string_view name,
                  std::string_view text, const WriteOptions& options) {
  switch (node.file->kind) {
    case FileKind::kDefaultMemsize: {
      Result<Bytes> size = ParseTreeSize(text, name);
      if (!size.ok()) {
        return size.status();
      }
      if (size->is_zero()) {
        return Refuse(name, text, "0 bytes would refuse every allocation",
                      "at least 1 byte, e.g. 4GiB");
      }
      return control->SetDefaultMemsize(*size);
    }
    case FileKind::kPolicy: {
      Result<ArbiterPolicy> policy = ParseArbiterPolicy(text, name);
      if (!policy.ok()) {
        return policy.status();
      }
      return control->SetPolicy(node.gpu->index, *policy);
    }
    case FileKind::kMaxInst: {
      Result<uint64_t> max_inst = ParseUnsigned(text, name, 1, arbiter::kMaxInstLimit);
      if (!max_inst.ok()) {
        return max_inst.status();
      }
      const int weights = SumOfWeights(*node.gpu);
      if (static_cast<int>(*max_inst) < weights) {
        return Refuse(name, text,
                      std::to_string(*max_inst) + " is below the sum of the weights of GPU " +
                          std::to_string(node.gpu->index) + "'s containers (" +
                          std::to_string(weights) + ")",
                      "a whole number from " + std::to_string(std::max(weights, 1)) + " to " +
                          std::to_string(arbiter::kMaxInstLimit));
      }
      return control->SetMaxInst(node.gpu->index, static_cast<int>(*max_inst));
    }
    case FileKind::kPrioRatio: {
      Result<Percent> ratio =
          ParsePercent(text, name, arbiter::kMinPrioRatio, arbiter::kMaxPrioRatio);
      if (!ratio.ok()) {
        return ratio.status();
      }
      return control->SetPrioRatio(node.gpu->index, *ratio);
    }
    case FileKind::kWeight: {
      const int max_inst = std::max(node.gpu->max_inst, 1);
      Result<uint64_t> weight =
          ParseUnsigned(text, name, 1, static_cast<uint64_t>(max_inst),
                        "a whole number from 1 to max_inst (" + std::to_string(max_inst) + ")");
      if (!weight.ok()) {
        return weight.status();
      }
      const int allowed = std::min(max_inst, node.gpu->free_weight + node.container->weight);
      if (static_cast<int>(*weight) > allowed) {
        return Refuse(name, text,
                      std::to_string(*weight) + " is more than GPU " +
                          std::to_string(node.gpu->index) + " has free for this container",
                      "a whole number from 1 to " + std::to_string(allowed) + " (free_weight " +
                          std::to_string(node.gpu->free_weight) + " + its current weight " +
                          std::to_string(node.container->weight) + ")");
      }
      return control->SetWeight(node.gpu->index, node.container->id, static_cast<int>(*weight));
    }
    case FileKind::kMemsize: {
      Result<Bytes> size = ParseTreeSize(text, name);
      if (!size.ok()) {
        return size.status();
      }
      if (size->is_zero()) {
        return Refuse(name, text, "0 bytes would refuse every allocation",
                      "at least 1 byte, e.g. 4GiB");
      }
      if (*size < node.container->used && !options.force) {
        return Refuse(name, text,
                      FormatBytes(*size) + " is below what the container uses on GPU " +
                          std::to_string(node.gpu->index) + " now (" +
                          std::to_string(node.container->used.count()) + " bytes)",
                      "at least " + std::to_string(node.container->used.count()) +
                          " bytes, or a forced write");
      }
      return control->SetMemsize(node.gpu->index, node.container->id, *size, options.force);
    }
    case FileKind::kHighPriority: {
      Result<uint64_t> flag = ParseUnsigned(text, name, 0, 1, "0 or 1");
      if (!flag.ok()) {
        return flag.status();
      }
      return control->SetHighPriority(node.gpu->index, node.container->id, *flag == 1);
    }
    case FileKind::kVersion:
    case FileKind::kFreeWeight:
    case FileKind::kMeminfo:
    case FileKind::kId:
      break;
  }
  return Refuse(name, text, "read-only file", kWritableExpected);
}

}  // namespace

bool IsControlTreeGpuFileName(std::string_view name) {
  return FindFile(kGpuFiles, name) != nullptr;
}

ControlTree::ControlTree(NodeControl* node) : node_(node) {}

ControlTree::ControlTree(NodeControl* node, std::optional<std::string> scope)
    : node_(node), scope_(std::move(scope)) {}

ControlTree ControlTree::ScopedTo(std::string container_id) const {
  return ControlTree(node_, std::move(container_id));
}

Result<Entry> ControlTree::Stat(std::string_view path) const {
  const NodeSnapshot snapshot = node_->Snapshot();
  auto resolved = Resolve(path, snapshot, scope_);
  if (const PathError* error = std::get_if<PathError>(&resolved)) {
    return Result<Entry>::Error(PathReadError(path, error->reason));
  }
  const Node& node = std::get<Node>(resolved);
  if (node.kind != Node::Kind::kFile) {
    return Entry{node.name, true, false};
  }
  return Entry{node.name, false, node.file->writable && !scope_};
}

Result<std::vector<Entry>> ControlTree::List(std::string_view path) const {
  using R = Result<std::vector<Entry>>;
  const NodeSnapshot snapshot = node_->Snapshot();
  auto resolved = Resolve(path, snapshot, scope_);
  if (const PathError* error = std::get_if<PathError>(&resolved)) {
    return R::Error(PathReadError(path, error->reason));
  }
  const Node& node = std::get<Node>(resolved);
  std::vector<Entry> entries;
  auto add_files = [&](const auto& files) {
    for (const FileSpec& file : files) {
      if (!scope_ || file.visible_scoped) {
        entries.push_back(Entry{std::string(file.name), false, file.writable && !scope_});
      }
    }
  };
  switch (node.kind) {
    case Node::Kind::kFile:
      return R::Error(PathReadError(path, "not a folder"));
    case Node::Kind::kRoot: {
      add_files(kRootFiles);
      std::vector<int> indices;
      for (const GpuState& gpu : snapshot.gpus) {
        if (gpu.index >= 0 && GpuVisible(gpu, scope_)) {
          indices.push_back(gpu.index);
        }
      }
      std::sort(indices.begin(), indices.end());
      indices.erase(std::unique(indices.begin(), indices.end()), indices.end());
      for (int index : indices) {
        entries.push_back(Entry{std::to_string(index), true, false});
      }
      break;
    }
    case Node::Kind::kGpu: {
      add_files(kGpuFiles);
      std::vector<std::string> ids;
      for (const ContainerState& container : node.gpu->containers) {
        if (ShowsContainer(container.id) && (!scope_ || *scope_ == container.id)) {
          ids.push_back(container.id);
        }
      }
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
      for (std::string& id : ids) {
        entries.push_back(Entry{std::move(id), true, false});
      }
      break;
    }
    case Node::Kind::kContainer:
      add_files(kContainerFiles);
      break;
  }
  return entries;
}

Result<std::string> ControlTree::Read(std::string_view path) const {
  using R = Result<std::string>;
  const NodeSnapshot snapshot = node_->Snapshot();
  auto resolved = Resolve(path, snapshot, scope_);
  if (const PathError* error = std::get_if<PathError>(&resolved)) {
    return R::Error(PathReadError(path, error->reason));
  }
  const Node& node = std::get<Node>(resolved);
  if (node.kind != Node::Kind::kFile) {
    return R::Error(PathReadError(path, "a folder, not a file"));
  }
  return FileText(node, snapshot);
}

Status ControlTree::Write(std::string_view path, std::string_view text,
                          const WriteOptions& options) const {
  const std::string name = PathName(path);
  if (scope_) {
    return Refuse(name, text, "the view of container " + QuoteValue(*scope_) + " is read-only",
                  "writes through the node's full view, by root or the writer group");
  }
  if (!options.writer_may_write) {
    return Refuse(name, text, "this caller may not write to the control tree",
                  "a write by root or a member of the configured writer group");
  }
  const NodeSnapshot snapshot = node_->Snapshot();
  auto resolved = Resolve(path, snapshot, scope_);
  if (const PathError* error = std::get_if<PathError>(&resolved)) {
    return Refuse(name, text, error->reason, kWritableExpected);
  }
  const Node& node = std::get<Node>(resolved);
  if (node.kind != Node::Kind::kFile) {
    return Refuse(name, text, "a folder, not a file", kWritableExpected);
  }
  if (!node.file->writable) {
    return Refuse(name, text, "read-only file", kWritableExpected);
  }
  if (text.size() > kMaxWriteLength) {
    return Refuse(name, text, "value is " + std::to_string(text.size()) + " bytes long",
                  "at most " + std::to_string(kMaxWriteLength) + " bytes");
  }
  return ApplyWrite(node_, node, name, text, options);
}

}  // namespace tessera::ctl
