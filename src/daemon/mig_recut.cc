// MIGCUT: checks, cuts through mig::ApplyMigLayout and lists the devices after (mig_recut.h).
#include "daemon/mig_recut.h"

#include <algorithm>

#include "daemon/devices.h"
#include "driver/library.h"
#include "mig/apply.h"
#include "mig/planner.h"
#include "mig/profiles.h"

namespace tessera::daemon {

namespace {

using Out = Result<protocol::Message>;

bool IsGpuUuid(const std::string& s) {
  if (s.size() < 5 || s.size() > 60 || s.rfind("GPU-", 0) != 0) return false;
  return std::all_of(s.begin() + 4, s.end(), [](char c) {
    return std::isxdigit(static_cast<unsigned char>(c)) != 0 || c == '-';
  });
}

// NVML stays loaded for the process's life, as in DiscoverNvmlDevices.
Result<const DynamicLibrary*> Nvml(const std::string& path) {
  static const DynamicLibrary* library = nullptr;
  if (library == nullptr) {
    auto lib = DynamicLibrary::Open(path);
    if (!lib.ok()) return lib.status();
    library = new DynamicLibrary(std::move(*lib));
  }
  return library;
}

}  // namespace

Result<protocol::Message> CutMigGpu(const protocol::Message& request, const MigCutContext& context,
                                    std::vector<ledger::DeviceInfo>* new_devices) {
  const std::string gpu = request.Get("gpu");
  if (!IsGpuUuid(gpu)) {
    return Out::Error("MIGCUT gpu=\"" + gpu +
                      "\": expected a GPU UUID such as GPU-2e1fc313-a110-49be-8c5d-7c0bff8a19b5");
  }
  const std::string layout = request.Get("layout");
  std::vector<std::string> words;
  for (size_t at = 0; at <= layout.size();) {
    const size_t end = std::min(layout.find(',', at), layout.size());
    std::string word = layout.substr(at, end - at);
    std::replace(word.begin(), word.end(), ':', '=');
    if (!word.empty()) words.push_back(word);
    at = end + 1;
  }
  if (words.empty() || words.size() > 7) {
    return Out::Error("MIGCUT layout=\"" + layout +
                      "\": expected 1 to 7 of <profile>:<count>, comma-separated");
  }
  auto lib = Nvml(context.nvml_path);
  if (!lib.ok()) return lib.status();
  auto nvml = mig::MigNvml::Load(**lib);
  if (!nvml.ok()) return nvml.status();
  unsigned int count = 0;
  if (nvml->count(&count) != NVML_SUCCESS) return Out::Error("MIGCUT: NVML lists no GPUs");
  std::optional<unsigned int> index;
  const mig::GpuModel* model = nullptr;
  for (unsigned int i = 0; i < count && !index; ++i) {
    nvmlDevice_t dev = nullptr;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    char product[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    if (nvml->handle_by_index(i, &dev) != NVML_SUCCESS ||
        nvml->uuid(dev, uuid, sizeof(uuid)) != NVML_SUCCESS || gpu != uuid) {
      continue;
    }
    index = i;
    nvml->name(dev, product, sizeof(product));
    model = mig::GpuModelFromProductName(product);
    if (model == nullptr) {
      return Out::Error("MIGCUT: GPU " + gpu + " (" + product +
                        ") is no MIG-capable model we know; models: " + mig::ModelNames());
    }
  }
  if (!index) return Out::Error("MIGCUT: this node has no GPU " + gpu);
  auto counts = mig::ParseProfileCounts(*model, words);
  if (!counts.ok()) return Out::Error("MIGCUT layout=\"" + layout + "\": " + counts.error());
  auto planned = mig::Place(*model, *counts);
  if (!planned.ok()) return Out::Error("MIGCUT layout=\"" + layout + "\": " + planned.error());
  auto before = mig::ListMigDevices(*nvml, *index, model);
  if (!before.ok()) return before.status();
  // The first of tesserad's devices that is the GPU's: from there on, every device's index moves.
  int first = -1;
  for (size_t d = 0; d < context.devices.size(); ++d) {
    const bool its = std::any_of(before->begin(), before->end(), [&](const mig::MigDevice& m) {
      return m.uuid == context.devices[d].uuid;
    });
    if (its) {
      first = static_cast<int>(d);
      break;
    }
  }
  if (first < 0) {
    return Out::Error("MIGCUT: GPU " + gpu +
                      " has no MIG device tesserad manages (MIG mode off, or not cut at all); "
                      "cut it with tessera mig apply and restart tesserad");
  }
  const std::string holders = context.registry->WithLedger([&](const ledger::MemoryLedger& l) {
    std::string out;
    const int devices = l.device_count();
    for (uint32_t c = 0; c < static_cast<uint32_t>(ledger::kMaxContainers); ++c) {
      const std::string id = l.ContainerId(c);
      if (id.empty()) continue;
      bool limited = false, holds = false;
      for (int d = 0; d < devices; ++d) {
        // A limit of 0 bars the container from the device (the device plugin's registrations
        // give 0 on every GPU but the container's own): that stays true wherever indices move.
        const uint64_t limit = l.Limit(c, d);
        limited = limited || limit != ledger::kUnlimited;
        if (d >= first && ((limit != ledger::kUnlimited && limit > 0) || l.Used(c, d) > 0)) {
          holds = true;
        }
      }
      if (!limited && l.book().containers[c].process_count.load() > 0) holds = true;
      if (holds) out += (out.empty() ? "" : ", ") + id;
    }
    return out;
  });
  if (!holders.empty()) {
    return Out::Error("MIGCUT: GPU " + gpu +
                      " is not cut while containers use it or a device after it (index " +
                      std::to_string(first) + " on; their indices would move): " + holders);
  }
  auto created = mig::ApplyMigLayout(*nvml, *index, model, *counts);
  if (!created.ok()) return Out::Error("MIGCUT: " + created.error());
  std::vector<std::string> notes;
  auto after = DiscoverDevices(**lib, &notes);
  if (!after.ok()) return Out::Error("MIGCUT: listing the devices after the cut: " + after.error());
  new_devices->clear();
  for (const ManagedDevice& m : *after) new_devices->push_back(m.info);
  protocol::Message reply{"OK", {{"gpu", gpu}, {"layout", layout}}};
  reply.fields["devices"] = std::to_string(created->size());
  return reply;
}

}  // namespace tessera::daemon
