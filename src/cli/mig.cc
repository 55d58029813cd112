// `tessera mig`: the MIG planner's door (plan, profiles) and `tessera mig apply`, which creates a
// plan's instances through NVML. A thin door: flags are parsed and validated here, every rule and
// search lives in src/mig (planner.h, apply.h). It reaches this program through one line in
// main.cc (RunMig), so the command-line library can take it over in one place.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"
#include "core/bytes.h"
#include "core/number.h"
#include "driver/library.h"
#include "mig/apply.h"
#include "mig/planner.h"
#include "mig/profiles.h"

namespace tessera::cli {
namespace {

namespace mig = tessera::mig;

constexpr const char* kUsage =
    "usage: tessera mig plan --gpu MODEL [--fit [--gpus N]] [--out FILE] [--config-name NAME]\n"
    "                        PROFILE[=COUNT]...\n"
    "       tessera mig profiles [--gpu MODEL]\n"
    "       tessera mig apply [--sim] [--index N] [--gpu MODEL] PROFILE[=COUNT]...\n"
    "\n"
    "plan      places the instances on one GPU of MODEL (memory slices and start slots, as NVIDIA\n"
    "          publishes them) or says why they do not fit. --fit: the instances are requests;\n"
    "          choose the layout of each of N GPUs (default 1) that serves the most of them.\n"
    "          --out FILE writes an nvidia-mig-parted config (version: v1) named NAME\n"
    "          (default tessera): nvidia-mig-parted apply -f FILE -c NAME.\n"
    "profiles  lists each model's profiles: ID, slices, start slots, instances per GPU.\n"
    "apply     creates the planned instances on GPU N (default 0) through NVML, after destroying\n"
    "          the ones there; refuses while processes run on the GPU or when MIG mode is off\n"
    "          (it never changes the mode). --sim (or TESSERA_SIM_GPUS set) uses the simulated\n"
    "          GPU, else NVML from TESSERA_REAL_NVML or the system; MODEL defaults to the one\n"
    "          NVML's product name denotes. Restart tesserad afterwards: it reads the node's\n"
    "          devices at start.\n"
    "\n"
    "models: %s\n";

int MigUsage(const std::string& message) {
  std::fprintf(stderr, "tessera mig: %s\n(see tessera mig --help)\n", message.c_str());
  return 2;
}

// The flag's value, or nullptr (after printing why) when it is missing.
const std::string* FlagValue(const std::vector<std::string>& args, size_t* i) {
  if (*i + 1 >= args.size()) return nullptr;
  return &args[++*i];
}

// Reads --gpu's value (args[*i + 1]) into *model; the usage exit status when it is missing or
// names no model we know.
std::optional<int> TakeModel(const std::vector<std::string>& args, size_t* i,
                             const mig::GpuModel** model) {
  const std::string* v = FlagValue(args, i);
  if (v == nullptr) return MigUsage("--gpu needs a model; one of " + mig::ModelNames());
  auto m = mig::FindGpuModel(*v);
  if (!m.ok()) return MigUsage(m.error());
  *model = *m;
  return std::nullopt;
}

int RunProfiles(const std::vector<std::string>& args) {
  const mig::GpuModel* only = nullptr;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--gpu") {
      if (auto bad = TakeModel(args, &i, &only)) return *bad;
    } else {
      return MigUsage("profiles: unexpected argument \"" + args[i] + "\"");
    }
  }
  for (const mig::GpuModel& m : mig::GpuModels()) {
    if (only != nullptr && only != &m) continue;
    std::printf("%s (%.*s): %d memory slices, %d compute slices\n", std::string(m.name).c_str(),
                static_cast<int>(m.products.size()), m.products.data(), m.memory_slices,
                m.compute_slices);
    std::printf("  %-12s %3s %8s %8s  %-16s %s\n", "PROFILE", "ID", "COMPUTE", "MEMORY",
                "START SLOTS", "PER GPU");
    for (const mig::MigProfile& p : m.Profiles()) {
      std::printf("  %-12s %3u %8d %8d  %-16s %d\n", std::string(p.name).c_str(), p.id,
                  p.compute_slices, p.memory_slices, mig::StartSlots(p).c_str(), p.published_max);
    }
  }
  return 0;
}

bool WriteFile(const std::string& path, const std::string& text, std::string* error) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    *error = "--out \"" + path + "\": cannot write: " + std::strerror(errno);
    return false;
  }
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) {
    *error = "--out \"" + path + "\": write failed: " + std::strerror(errno);
    return false;
  }
  return true;
}

void PrintLayout(const std::string& label, const mig::Layout& layout) {
  std::printf("%s%s\n", label.c_str(), mig::FormatPlacements(layout).c_str());
  std::printf("  memory slices: %s\n", mig::SliceMap(layout).c_str());
  std::printf("  compute slices: %d of %d used\n", layout.UsedComputeSlices(),
              layout.model->compute_slices);
}

int RunPlan(const std::vector<std::string>& args) {
  const mig::GpuModel* model = nullptr;
  bool fit = false;
  int gpus = 1;
  bool gpus_given = false;
  std::string out_path, config_name = "tessera";
  std::vector<std::string> requests;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--gpu") {
      if (auto bad = TakeModel(args, &i, &model)) return *bad;
    } else if (a == "--fit") {
      fit = true;
    } else if (a == "--gpus") {
      const std::string* v = FlagValue(args, &i);
      if (v == nullptr) return MigUsage("--gpus needs a number of GPUs from 1 to 64");
      auto n = ParseUnsigned(*v, "--gpus", 1, 64);
      if (!n.ok()) return MigUsage(n.error());
      gpus = static_cast<int>(*n);
      gpus_given = true;
    } else if (a == "--out") {
      const std::string* v = FlagValue(args, &i);
      if (v == nullptr) return MigUsage("--out needs a file name");
      out_path = *v;
    } else if (a == "--config-name") {
      const std::string* v = FlagValue(args, &i);
      if (v == nullptr) return MigUsage("--config-name needs a name of [A-Za-z0-9_.-]");
      Status valid = mig::ValidConfigName(*v, "--config-name");
      if (!valid.ok()) return MigUsage(valid.message());
      config_name = *v;
    } else if (a.rfind("--", 0) == 0) {
      return MigUsage("plan: unknown flag \"" + a +
                      "\"; expected --gpu, --fit, --gpus, --out or --config-name");
    } else {
      requests.push_back(a);
    }
  }
  if (model == nullptr) return MigUsage("plan needs --gpu MODEL; one of " + mig::ModelNames());
  if (gpus_given && !fit) return MigUsage("--gpus goes with --fit (plan places one GPU)");
  if (requests.empty()) {
    return MigUsage("plan needs at least one PROFILE[=COUNT]; " + std::string(model->name) +
                    " profiles: " + mig::ProfileNames(*model));
  }
  auto counts = mig::ParseProfileCounts(*model, requests);
  if (!counts.ok()) return MigUsage(counts.error());

  std::vector<mig::Layout> layouts;
  std::vector<std::string> comment;
  std::string command = "tessera mig plan --gpu " + std::string(model->name);
  if (fit) command += " --fit --gpus " + std::to_string(gpus);
  command += " " + mig::FormatCounts(*model, *counts);
  comment.push_back("Written by: " + command);
  if (fit) {
    const mig::FitResult r = mig::Fit(*model, gpus, *counts);
    std::printf("%s x%d: the best layouts serve %d of %d requested instances (%s)\n",
                std::string(model->name).c_str(), gpus, mig::TotalInstances(r.served),
                mig::TotalInstances(r.requested),
                r.exact ? "exact search" : "search too large: best layout GPU by GPU");
    for (size_t g = 0; g < r.gpus.size(); ++g) {
      PrintLayout("GPU " + std::to_string(g) + ": ", r.gpus[g]);
      comment.push_back("GPU " + std::to_string(g) +
                        " placement (memory slice starts): " + mig::FormatPlacements(r.gpus[g]));
    }
    mig::ProfileCounts missing{};
    for (size_t i = 0; i < missing.size(); ++i) missing[i] = r.requested[i] - r.served[i];
    if (mig::TotalInstances(missing) > 0) {
      std::printf("not served: %s\n", mig::FormatCounts(*model, missing).c_str());
    }
    layouts = r.gpus;
  } else {
    auto layout = mig::Place(*model, *counts);
    if (!layout.ok()) {
      std::fprintf(stderr, "tessera mig plan: %s\nprofiles of the %s: %s\n", layout.error().c_str(),
                   std::string(model->name).c_str(), mig::ProfileNames(*model).c_str());
      return 1;
    }
    PrintLayout(
        std::string(model->name) + ": " + mig::FormatCounts(*model, *counts) + " fits on one GPU: ",
        *layout);
    comment.push_back("Placement (memory slice starts): " + mig::FormatPlacements(*layout));
    layouts.push_back(*layout);
  }
  if (!out_path.empty()) {
    std::string error;
    if (!WriteFile(out_path, mig::MigPartedConfig(layouts, config_name, comment), &error)) {
      std::fprintf(stderr, "tessera mig plan: %s\n", error.c_str());
      return 1;
    }
    std::printf("wrote %s: nvidia-mig-parted apply -f %s -c %s\n", out_path.c_str(),
                out_path.c_str(), config_name.c_str());
  }
  return 0;
}

int RunApply(const std::vector<std::string>& args) {
  const mig::GpuModel* model = nullptr;
  bool sim = std::getenv("TESSERA_SIM_GPUS") != nullptr;
  unsigned int index = 0;
  std::vector<std::string> requests;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--gpu") {
      if (auto bad = TakeModel(args, &i, &model)) return *bad;
    } else if (a == "--index") {
      const std::string* v = FlagValue(args, &i);
      if (v == nullptr) return MigUsage("--index needs a GPU index from 0 to 63");
      auto n = ParseUnsigned(*v, "--index", 0, 63);
      if (!n.ok()) return MigUsage(n.error());
      index = static_cast<unsigned int>(*n);
    } else if (a == "--sim") {
      sim = true;
    } else if (a.rfind("--", 0) == 0) {
      return MigUsage("apply: unknown flag \"" + a + "\"; expected --sim, --index or --gpu");
    } else {
      requests.push_back(a);
    }
  }
  if (requests.empty()) return MigUsage("apply needs at least one PROFILE[=COUNT]");
  const char* real = std::getenv("TESSERA_REAL_NVML");
  const std::string path = sim ? ExecutableDir() + "/../lib/libtessera-simgpu.so"
                           : real != nullptr && *real != '\0'
                               ? real
                               : "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1";
  auto lib = DynamicLibrary::Open(path);
  if (!lib.ok()) {
    std::fprintf(stderr, "tessera mig apply: cannot open NVML: %s\n", lib.error().c_str());
    return 1;
  }
  // NVML stays loaded until the process exits, as in tesserad: unloading it would strand what its
  // initialisation allocated.
  static DynamicLibrary* nvml_library = new DynamicLibrary(std::move(*lib));
  auto nvml = mig::MigNvml::Load(*nvml_library);
  if (!nvml.ok()) {
    std::fprintf(stderr, "tessera mig apply: %s\n", nvml.error().c_str());
    return 1;
  }
  // The model names the profiles; without --gpu it comes from NVML's product name.
  const mig::GpuModel* names = model;
  if (names == nullptr) {
    nvmlDevice_t dev = nullptr;
    char product[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    if (nvml->handle_by_index(index, &dev) == NVML_SUCCESS) {
      nvml->name(dev, product, sizeof(product));
      names = mig::GpuModelFromProductName(product);
    }
    if (names == nullptr) {
      std::fprintf(stderr,
                   "tessera mig apply: GPU %u (%s) is no MIG-capable model we know by its name; "
                   "name it with --gpu MODEL, one of %s\n",
                   index, product, mig::ModelNames().c_str());
      return 1;
    }
  }
  auto counts = mig::ParseProfileCounts(*names, requests);
  if (!counts.ok()) return MigUsage(counts.error());
  auto created = mig::ApplyMigLayout(*nvml, index, names, *counts);
  if (!created.ok()) {
    std::fprintf(stderr, "tessera mig apply: %s\n", created.error().c_str());
    return 1;
  }
  std::printf("GPU %u (%s): %zu MIG device%s\n", index, std::string(names->name).c_str(),
              created->size(), created->size() == 1 ? "" : "s");
  std::printf("  %-12s %5s %3s %10s  %s\n", "PROFILE", "START", "GI", "MEMORY", "UUID");
  for (const mig::MigDevice& d : *created) {
    std::printf("  %-12s %5d %3u %10s  %s\n", d.profile.c_str(), d.start, d.gpu_instance,
                FormatBytes(Bytes(d.memory_bytes)).c_str(), d.uuid.c_str());
  }
  return 0;
}

}  // namespace

int RunMig(const std::vector<std::string>& args) {
  if (args.empty()) return MigUsage("expected plan, profiles or apply");
  const std::string& sub = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (sub == "--help" || sub == "-h" || sub == "help") {
    std::printf(kUsage, mig::ModelNames().c_str());
    return 0;
  }
  if (sub == "plan") return RunPlan(rest);
  if (sub == "profiles") return RunProfiles(rest);
  if (sub == "apply") return RunApply(rest);
  return MigUsage("unknown subcommand \"" + sub + "\"; expected plan, profiles or apply");
}

}  // namespace tessera::cli
