// CSV node and pod lists with file:line: column errors. Parsing only; no placement.
#include "placement/trace.h"

#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "placement/mig.h"

namespace tessera::placement {

namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

std::string Quote(std::string_view v) {
  std::string out = "\"";
  for (char ch : v.substr(0, 64)) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (u < 0x20 || u >= 0x7f) {
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += ch;
    }
  }
  if (v.size() > 64) out += "...";
  return out + "\"";
}

std::vector<std::string_view> SplitFields(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    fields.push_back(
        Trim(line.substr(start, comma == std::string_view::npos ? line.npos : comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return fields;
}

// Reads rows of one CSV text, resolving columns by header name, and formats errors.
class CsvReader {
 public:
  CsvReader(std::string_view text, std::string_view file) : text_(text), file_(file) {}

  // Reads the header; `required` must all be present.
  Status ReadHeader(const std::vector<std::string_view>& required) {
    if (!NextLine())
      return Status::Error(std::string(file_) + ": empty file; expected a header row");
    header_ = SplitFields(line_);
    for (size_t i = 0; i < header_.size(); ++i)
      column_[std::string(header_[i])] = static_cast<int>(i);
    for (std::string_view name : required) {
      if (column_.count(std::string(name)) == 0) {
        std::string want;
        for (std::string_view r : required) {
          if (!want.empty()) want += ',';
          want += r;
        }
        return Status::Error(Where() + ": header has no column \"" + std::string(name) +
                             "\"; expected the columns " + want);
      }
    }
    return Status::Ok();
  }

  int Column(std::string_view name) const {
    auto it = column_.find(std::string(name));
    return it == column_.end() ? -1 : it->second;
  }

  // Advances to the next non-blank data row; false at the end.
  bool NextRow() {
    while (NextLine()) {
      if (Trim(line_).empty()) continue;
      fields_ = SplitFields(line_);
      return true;
    }
    return false;
  }

  Status CheckWidth() const {
    if (fields_.size() < header_.size()) {
      const size_t col = fields_.size();
      return Status::Error(Where() + ": column " + std::to_string(col + 1) + " (" +
                           std::string(header_[col]) + "): missing; the row has " +
                           std::to_string(fields_.size()) + " fields, expected " +
                           std::to_string(header_.size()));
    }
    if (fields_.size() > header_.size()) {
      return Status::Error(Where() + ": column " + std::to_string(header_.size() + 1) +
                           ": unexpected extra field " + Quote(fields_[header_.size()]) +
                           "; expected " + std::to_string(header_.size()) + " fields");
    }
    return Status::Ok();
  }

  std::string_view Field(int col) const { return fields_[static_cast<size_t>(col)]; }

  std::string ColumnError(int col, std::string_view reason, std::string_view expected) const {
    std::string msg = Where() + ": column " + std::to_string(col + 1) + " (" +
                      std::string(header_[static_cast<size_t>(col)]) + "): " + Quote(Field(col)) +
                      " " + std::string(reason);
    if (!expected.empty()) msg += "; expected " + std::string(expected);
    return msg;
  }

  Result<int64_t> Integer(int col, int64_t min, int64_t max) const {
    const std::string_view v = Field(col);
    const std::string range = std::to_string(min) + " to " + std::to_string(max);
    if (v.empty()) return Result<int64_t>::Error(ColumnError(col, "is empty", range));
    int64_t value = 0;
    for (char ch : v) {
      if (ch < '0' || ch > '9') {
        return Result<int64_t>::Error(ColumnError(col, "is not a whole number", range));
      }
      if (value > (INT64_MAX - 9) / 10) {
        return Result<int64_t>::Error(ColumnError(col, "is out of range", range));
      }
      value = value * 10 + (ch - '0');
    }
    if (value < min || value > max) {
      return Result<int64_t>::Error(ColumnError(col, "is out of range", range));
    }
    return value;
  }

  int line() const { return line_no_; }
  std::string Where() const { return std::string(file_) + ":" + std::to_string(line_no_); }

 private:
  bool NextLine() {
    if (pos_ >= text_.size()) return false;
    const size_t nl = text_.find('\n', pos_);
    const size_t end = nl == std::string_view::npos ? text_.size() : nl;
    line_ = text_.substr(pos_, end - pos_);
    pos_ = end + 1;
    ++line_no_;
    return true;
  }

  std::string_view text_;
  std::string_view file_;
  size_t pos_ = 0;
  int line_no_ = 0;
  std::string_view line_;
  std::vector<std::string_view> header_;
  std::vector<std::string_view> fields_;
  std::map<std::string, int> column_;
};

constexpr int64_t kMaxCpuMilli = int64_t{1} << 40;
constexpr int64_t kMaxMemoryMib = int64_t{1} << 40;
constexpr int64_t kMaxSeconds = int64_t{1} << 40;  // trace times, in seconds

// A MIG model's memory in MiB, from its full-GPU profile's name ("7g.80gb": 80 GiB).
int64_t MigModelMemoryMib(const mig::GpuModel& model) {
  for (const mig::MigProfile& p : model.Profiles()) {
    if (p.memory_slices != model.memory_slices) continue;
    const size_t dot = p.name.find('.');
    int64_t gb = 0;
    for (size_t i = dot + 1; i < p.name.size() && p.name[i] >= '0' && p.name[i] <= '9'; ++i) {
      gb = gb * 10 + (p.name[i] - '0');
    }
    return gb * 1024;
  }
  return 0;
}

// The sharing modes a node file names, as GpuModes; the tag is the word's place in this list.
struct ModeWord {
  std::string_view word;
  GpuMode mode;
};
constexpr ModeWord kModeWords[] = {
    {"memory+compute", {NodeMode::kMemoryAndCompute, false, 0}},
    {"memory-only", {NodeMode::kMemoryOnly, false, 1}},
    {"whole-gpu", {NodeMode::kWholeGpus, false, 2}},
    {"mps", {NodeMode::kMemoryAndCompute, true, 3}},
    {"mig", {NodeMode::kMig, false, 4}},
};
const GpuMode* FindModeWord(std::string_view word) {
  for (const ModeWord& m : kModeWords) {
    if (m.word == word) return &m.mode;
  }
  return nullptr;
}

// The mode column: one mode for every GPU, or each GPU's, in index order, as MODE=COUNT parts
// separated by '|' whose counts sum to the node's GPUs ("mps=4|memory+compute=4"; never mig).
Status ParseModeColumn(const CsvReader& csv, int col, NodeSpec* node) {
  const std::string_view text = csv.Field(col);
  if (text.find('=') == std::string_view::npos) {
    const GpuMode* m = FindModeWord(text);
    if (m == nullptr) {
      return Status::Error(csv.ColumnError(
          col, "is not a sharing mode",
          "memory+compute, memory-only, whole-gpu, mps or mig, or each GPU's as MODE=COUNT parts "
          "separated by | such as mps=4|memory+compute=4"));
    }
    node->mode = m->mode;
    node->mode_tag = m->tag;
    if (m->one_gpu_per_request) node->max_gpus_per_request = 1;  // its MPS server's one GPU
    return Status::Ok();
  }
  std::vector<GpuMode> modes;
  for (size_t pos = 0;;) {
    const size_t bar = text.find('|', pos);
    const std::string_view part =
        text.substr(pos, bar == std::string_view::npos ? std::string_view::npos : bar - pos);
    const size_t eq = part.find('=');
    const GpuMode* m = eq == std::string_view::npos ? nullptr : FindModeWord(part.substr(0, eq));
    if (m == nullptr || m->mode == NodeMode::kMig) {
      return Status::Error(csv.ColumnError(
          col, "has a part \"" + std::string(part) + "\" that is no GPU mode and count",
          "MODE=COUNT parts separated by |, MODE memory+compute, memory-only, whole-gpu or mps "
          "(mig is a whole node's), COUNT 1-" +
              std::to_string(kMaxGpusPerNode)));
    }
    const std::string_view digits = part.substr(eq + 1);
    int count = 0;
    bool number = !digits.empty() && digits.size() <= 2;
    for (char c : digits) {
      number = number && c >= '0' && c <= '9';
      count = count * 10 + (c - '0');
    }
    if (!number || count < 1 || static_cast<int>(modes.size()) + count > kMaxGpusPerNode) {
      return Status::Error(
          csv.ColumnError(col,
                          "has a part \"" + std::string(part) + "\" whose count is not 1-" +
                              std::to_string(kMaxGpusPerNode) + " (or exceeds that in all)",
                          "MODE=COUNT parts whose counts sum to the node's GPUs"));
    }
    modes.insert(modes.end(), static_cast<size_t>(count), *m);
    if (bar == std::string_view::npos) break;
    pos = bar + 1;
  }
  if (static_cast<int>(modes.size()) != node->gpu_count) {
    return Status::Error(csv.ColumnError(
        col, "gives modes to " + std::to_string(modes.size()) + " GPUs",
        "counts summing to the node's " + std::to_string(node->gpu_count) + " GPUs (column gpu)"));
  }
  // The node's own mode is its first GPU's (what per-node estimates count it as).
  node->mode = modes.front().mode;
  node->mode_tag = modes.front().tag;
  node->gpu_modes = std::move(modes);
  return Status::Ok();
}

// The mig column of a mig node: "dynamic", "dynamic COUNTS" or "COUNTS"; the layout of each GPU.
Status ParseMigColumn(const CsvReader& csv, int col, const mig::GpuModel& model, NodeSpec* node) {
  std::vector<std::string> words;
  std::istringstream in{std::string(csv.Field(col))};
  for (std::string w; in >> w;) words.push_back(w);
  if (!words.empty() && words.front() == "dynamic") {
    node->mig_relayout = true;
    words.erase(words.begin());
  } else if (words.empty()) {
    return Status::Error(csv.ColumnError(col, "is empty for a mig node",
                                         "profile counts such as 3g.40gb=1 1g.10gb=4, or dynamic"));
  }
  auto counts = mig::ParseProfileCounts(model, words);
  if (!counts.ok())
    return Status::Error(csv.ColumnError(col, "is not a layout: " + counts.error(), ""));
  auto layout = mig::Place(model, *counts);
  if (!layout.ok())
    return Status::Error(csv.ColumnError(col, "cannot be cut: " + layout.error(), ""));
  node->mig_gpus.assign(static_cast<size_t>(node->gpu_count), *layout);
  return Status::Ok();
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Result<std::string>::Error(path + ": cannot open for reading");
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) return Result<std::string>::Error(path + ": read error");
  return s.str();
}

}  // namespace

Result<NodeList> ParseNodeCsv(std::string_view text, std::string_view file_name) {
  CsvReader csv(text, file_name);
  Status header = csv.ReadHeader({"sn", "cpu_milli", "memory_mib", "gpu", "model"});
  if (!header.ok()) return header;
  const int c_sn = csv.Column("sn"), c_cpu = csv.Column("cpu_milli"),
            c_mem = csv.Column("memory_mib"), c_gpu = csv.Column("gpu"),
            c_model = csv.Column("model"), c_mode = csv.Column("mode"),
            c_gmem = csv.Column("gpu_memory_mib"), c_mig = csv.Column("mig");
  NodeList list;
  std::map<std::string, int, std::less<>> seen;
  while (csv.NextRow()) {
    Status width = csv.CheckWidth();
    if (!width.ok()) return width;
    NodeSpec node;
    node.name = std::string(csv.Field(c_sn));
    if (node.name.empty()) return Status::Error(csv.ColumnError(c_sn, "is empty", "a node name"));
    if (auto it = seen.find(node.name); it != seen.end()) {
      return Status::Error(
          csv.ColumnError(c_sn, "names a node already listed",
                          "unique names (first at line " + std::to_string(it->second) + ")"));
    }
    seen.emplace(node.name, csv.line());
    auto cpu = csv.Integer(c_cpu, 0, kMaxCpuMilli);
    if (!cpu.ok()) return cpu.status();
    auto mem = csv.Integer(c_mem, 0, kMaxMemoryMib);
    if (!mem.ok()) return mem.status();
    auto gpu = csv.Integer(c_gpu, 0, kMaxGpusPerNode);
    if (!gpu.ok()) return gpu.status();
    node.cpu_milli = *cpu;
    node.memory_mib = *mem;
    node.gpu_count = static_cast<int>(*gpu);
    const std::string_view model = csv.Field(c_model);
    if (c_mode >= 0 && !csv.Field(c_mode).empty()) {
      if (Status st = ParseModeColumn(csv, c_mode, &node); !st.ok()) return st;
    }
    const bool mig_given = c_mig >= 0 && !csv.Field(c_mig).empty();
    if (mig_given && node.mode != NodeMode::kMig) {
      return Status::Error(csv.ColumnError(c_mig, "is a MIG layout for a node not in mode mig",
                                           "empty unless the mode column says mig"));
    }
    const mig::GpuModel* mig_model = nullptr;
    if (node.mode == NodeMode::kMig) {
      auto found = mig::FindGpuModel(model, "model");
      if (!found.ok()) return Status::Error(csv.ColumnError(c_model, found.error(), ""));
      if (node.gpu_count == 0) {
        return Status::Error(csv.ColumnError(c_gpu, "is 0 for a mig node", "1 or more GPUs"));
      }
      if (!mig_given) {
        return Status::Error(csv.Where() +
                             ": a mig node needs a mig column (profile counts such "
                             "as 3g.40gb=1 1g.10gb=4, or dynamic)");
      }
      mig_model = *found;
    }
    int64_t gpu_mem = 0;
    if (c_gmem >= 0 && !csv.Field(c_gmem).empty()) {
      auto m = csv.Integer(c_gmem, 1, kMaxMemoryMib);
      if (!m.ok()) return m.status();
      gpu_mem = *m;
    }
    if (mig_model != nullptr) {
      if (gpu_mem == 0) gpu_mem = MigModelMemoryMib(*mig_model);
      if (Status s = ParseMigColumn(csv, c_mig, *mig_model, &node); !s.ok()) return s;
    }
    if (node.gpu_count > 0) {
      if (model.empty() || model.find('|') != std::string_view::npos) {
        return Status::Error(csv.ColumnError(c_model, "is not a GPU model name",
                                             "a model name such as T4 for a node with GPUs"));
      }
      const int known = list.models.Find(model);
      if (known >= 0 && gpu_mem > 0 && list.models.model(known).memory_mib != gpu_mem) {
        return Status::Error(csv.ColumnError(c_gmem, "differs from an earlier node of this model",
                                             std::to_string(list.models.model(known).memory_mib)));
      }
      auto id = list.models.Intern(model, gpu_mem);
      if (!id.ok()) return Status::Error(csv.ColumnError(c_model, id.error(), ""));
      node.model = *id;
    }
    list.nodes.push_back(std::move(node));
  }
  if (list.nodes.empty()) {
    return Status::Error(std::string(file_name) + ": no nodes; expected at least one row");
  }
  return list;
}

Result<PodList> ParsePodCsv(std::string_view text, std::string_view file_name,
                            const ModelTable& models) {
  CsvReader csv(text, file_name);
  // gpu_spec is optional (the FGD authors' multi-GPU lists have only the first five columns):
  // without it every pod may use any model.
  Status header = csv.ReadHeader({"name", "cpu_milli", "memory_mib", "num_gpu"});
  if (!header.ok()) return header;
  const int c_name = csv.Column("name"), c_cpu = csv.Column("cpu_milli"),
            c_mem = csv.Column("memory_mib"), c_num = csv.Column("num_gpu"),
            c_milli = csv.Column("gpu_milli"), c_spec = csv.Column("gpu_spec"),
            c_gmem = csv.Column("gpu_mem_mib"), c_core = csv.Column("gpu_core_percent"),
            c_gib = csv.Column("gpu_mem_gib"), c_created = csv.Column("creation_time"),
            c_deleted = csv.Column("deletion_time"), c_mig = csv.Column("mig_profile");
  // Our own request form (docs/contracts.md) instead of the trace's: gpu_core_percent (0..100 in
  // steps of 5) and gpu_mem_gib per GPU.
  const bool share_form = c_milli < 0 && c_core >= 0;
  if (c_milli < 0 && c_core < 0) {
    return Status::Error(std::string(file_name) +
                         ":1: header has neither \"gpu_milli\" nor \"gpu_core_percent\"; "
                         "expected one of them for the per-GPU share");
  }
  PodList list;
  while (csv.NextRow()) {
    Status width = csv.CheckWidth();
    if (!width.ok()) return width;
    Request r;
    auto cpu = csv.Integer(c_cpu, 0, kMaxCpuMilli);
    if (!cpu.ok()) return cpu.status();
    auto mem = csv.Integer(c_mem, 0, kMaxMemoryMib);
    if (!mem.ok()) return mem.status();
    auto num = csv.Integer(c_num, 0, kMaxGpusPerNode);
    if (!num.ok()) return num.status();
    r.cpu_milli = *cpu;
    r.memory_mib = *mem;
    r.gpu_count = static_cast<int>(*num);
    const std::string_view mig_profile = c_mig >= 0 ? csv.Field(c_mig) : std::string_view();
    if (share_form) {
      auto core = csv.Integer(c_core, 0, 100);
      if (!core.ok()) return core.status();
      if (*core % 5 != 0) {
        return Status::Error(
            csv.ColumnError(c_core, "is not a multiple of 5", "0 to 100 in steps of 5"));
      }
      int64_t gib = 0;
      if (c_gib >= 0 && !csv.Field(c_gib).empty()) {
        auto g = csv.Integer(c_gib, 0, 1 << 20);
        if (!g.ok()) return g.status();
        gib = *g;
      }
      if (r.gpu_count == 0 && (*core != 0 || gib != 0)) {
        return Status::Error(csv.ColumnError(*core != 0 ? c_core : c_gib,
                                             "is a GPU share for a pod with num_gpu 0",
                                             "0 when num_gpu is 0"));
      }
      if (!mig_profile.empty() && (*core != 0 || gib != 0)) {
        return Status::Error(csv.ColumnError(*core != 0 ? c_core : c_gib,
                                             "is a GPU share for a MIG request",
                                             "0 or empty when mig_profile is given"));
      }
      if (r.gpu_count > 0 && *core == 0 && gib == 0 && mig_profile.empty()) {
        return Status::Error(
            csv.ColumnError(c_core, "gives a GPU pod no share",
                            "a gpu_core_percent or a gpu_mem_gib when num_gpu > 0"));
      }
      if (r.gpu_count > 0 && mig_profile.empty()) {
        auto form = RequestFromShareForm(r.cpu_milli, r.memory_mib, r.gpu_count, gib,
                                         static_cast<int>(*core));
        if (!form.ok()) return Status::Error(csv.ColumnError(c_core, form.error(), ""));
        r = *form;
      }
    } else {
      auto milli = csv.Integer(c_milli, 0, kMilliPerGpu);
      if (!milli.ok()) return milli.status();
      r.gpu_milli = static_cast<int>(*milli);
    }
    if (!share_form && c_gmem >= 0 && !csv.Field(c_gmem).empty()) {
      auto m = csv.Integer(c_gmem, 1, kMaxMemoryMib);
      if (!m.ok()) return m.status();
      r.gpu_mem_mib = *m;
    }
    if (!share_form && r.gpu_count == 0 && r.gpu_milli != 0) {
      return Status::Error(csv.ColumnError(c_milli, "is a GPU share for a pod with num_gpu 0",
                                           "0 when num_gpu is 0"));
    }
    if (!share_form && r.gpu_count == 0 && r.gpu_mem_mib > 0) {
      return Status::Error(csv.ColumnError(c_gmem, "is GPU memory for a pod with num_gpu 0",
                                           "empty when num_gpu is 0"));
    }
    if (!mig_profile.empty()) {
      // One instance of a MIG profile: nothing else of a GPU.
      if (r.gpu_count != 1) {
        return Status::Error(csv.ColumnError(c_num, "is not 1 for a MIG request",
                                             "1 (one instance) when mig_profile is given"));
      }
      if (!share_form && (r.gpu_milli != 0 || r.gpu_mem_mib > 0)) {
        return Status::Error(csv.ColumnError(r.gpu_milli != 0 ? c_milli : c_gmem,
                                             "is a GPU share for a MIG request",
                                             "0 or empty when mig_profile is given"));
      }
    } else if (!share_form && r.gpu_count > 0 && r.gpu_milli == 0 && r.gpu_mem_mib <= 0) {
      return Status::Error(csv.ColumnError(c_milli, "gives a GPU pod no share",
                                           "1 to 1000 (or a gpu_mem_mib) when num_gpu > 0"));
    }
    const std::string_view spec = c_spec >= 0 ? csv.Field(c_spec) : std::string_view();
    if (!spec.empty()) {
      ModelSet allowed = ModelSet::None();
      size_t start = 0;
      while (true) {
        const size_t bar = spec.find('|', start);
        const std::string_view name =
            Trim(spec.substr(start, bar == std::string_view::npos ? spec.npos : bar - start));
        if (name.empty()) {
          return Status::Error(csv.ColumnError(c_spec, "has an empty model name",
                                               "model names separated by |, or empty for any"));
        }
        const int id = models.Find(name);
        if (id >= 0) allowed = allowed.With(id);
        if (bar == std::string_view::npos) break;
        start = bar + 1;
      }
      r.allowed = allowed;
    }
    if (!mig_profile.empty()) {
      auto m = RequestForMigProfile(r.cpu_milli, r.memory_mib, mig_profile, r.allowed);
      if (!m.ok()) return Status::Error(csv.ColumnError(c_mig, m.error(), ""));
      r = *m;
    }
    PodTimes times;
    if (c_created >= 0) {
      auto created = csv.Integer(c_created, 0, kMaxSeconds);
      if (!created.ok()) return created.status();
      times.created = *created;
    }
    if (c_deleted >= 0 && !csv.Field(c_deleted).empty()) {
      auto deleted = csv.Integer(c_deleted, 0, kMaxSeconds);
      if (!deleted.ok()) return deleted.status();
      if (*deleted < times.created) {
        return Status::Error(csv.ColumnError(
            c_deleted, "is before the pod's creation_time " + std::to_string(times.created),
            "a time at or after it, or empty for a pod that never left"));
      }
      times.deleted = *deleted;
    }
    list.names.emplace_back(csv.Field(c_name));
    list.requests.push_back(r);
    list.times.push_back(times);
  }
  if (list.requests.empty()) {
    return Status::Error(std::string(file_name) + ": no pods; expected at least one row");
  }
  return list;
}

Result<NodeList> LoadNodeCsv(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseNodeCsv(*text, path);
}

Result<PodList> LoadPodCsv(const std::string& path, const ModelTable& models) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParsePodCsv(*text, path, models);
}

}  // namespace tessera::placement
