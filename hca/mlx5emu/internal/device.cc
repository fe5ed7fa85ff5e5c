// The emulated devices, their device thread, configuration, faults and violations.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/log.h"
#include "hca/mlx5emu/internal/emu.h"
#include "hca/mlx5emu/mlx5emu.h"
#include "umr/caps.h"
#include "umr/segments.h"

namespace regcache::hca::mlx5emu {
namespace {

// Process-wide state, never destroyed: the device threads run until the process ends.
struct Globals {
  base::Mutex mu;
  Options options ABSL_GUARDED_BY(mu);
  bool configured ABSL_GUARDED_BY(mu) = false;
  std::vector<std::string> violations ABSL_GUARDED_BY(mu);
};
Globals& G() {
  static Globals* g = new Globals;
  return *g;
}

absl::StatusOr<Options> ParseOptions(absl::string_view text) {
  Options o;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(item, '=');
    int v = 0;
    if (!absl::SimpleAtoi(kv.second, &v) || v < 0) {
      return absl::InvalidArgumentError(absl::StrCat("mlx5emu: '", item, "' needs a number"));
    }
    const absl::string_view k = kv.first;
    if (k == "umr_on_devx_mkey") {
      o.umr_on_devx_mkey = v != 0;
    } else if (k == "pointer_mr_lkey") {
      o.pointer_mr_lkey = v != 0;
    } else if (k == "variant_on_dv_mkey") {
      o.variant_on_dv_mkey = v != 0;
    } else if (k == "devx_mkey") {
      o.devx_mkey = v != 0;
    } else if (k == "odp") {
      o.odp = v != 0;
    } else if (k == "umr_fence" && v <= 3) {
      o.umr_fence = v;
    } else if (k == "max_wqe_sz_sq" && v <= 0xffff) {
      o.max_wqe_sz_sq = v;
    } else if (k == "log_max_klm_list_size" && v <= 20) {
      o.log_max_klm_list_size = v;
    } else if (k == "umr_indirect_mkey_disabled") {
      o.umr_indirect_mkey_disabled = v != 0;
    } else if (k == "devx") {
      o.devx = v != 0;
    } else if (k == "umr_modify_atomic_disabled") {
      o.umr_modify_atomic_disabled = v != 0;
    } else if (k == "umr_modify_entity_size_disabled") {
      o.umr_modify_entity_size_disabled = v != 0;
    } else if (k == "fatal_signal" && v >= 1 && v < NSIG) {
      o.fatal_signal = v;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("mlx5emu: unknown option '", item, "'"));
    }
  }
  return o;
}

Image Adjusted(Image image, const Options& o) {
  if (o.umr_fence >= 0) image.general.umr_fence = static_cast<uint8_t>(o.umr_fence);
  if (o.max_wqe_sz_sq >= 0) image.general.max_wqe_sz_sq = static_cast<uint16_t>(o.max_wqe_sz_sq);
  if (o.log_max_klm_list_size >= 0) {
    image.general.log_max_klm_list_size = static_cast<uint8_t>(o.log_max_klm_list_size);
  }
  image.general.umr_indirect_mkey_disabled = o.umr_indirect_mkey_disabled;
  image.general.umr_modify_atomic_disabled = o.umr_modify_atomic_disabled;
  image.general.umr_modify_entity_size_disabled = o.umr_modify_entity_size_disabled;
  if (!o.odp) {
    image.general.pg = false;
    image.odp = {};
  }
  return image;
}

std::atomic<bool> g_fatal_signalled{false};

void OnFatalSignal(int) { g_fatal_signalled.store(true, std::memory_order_relaxed); }

// Installs the handler of Options::fatal_signal (once per process).
void WatchFatalSignal(int signo) {
  struct sigaction sa {};
  sa.sa_handler = OnFatalSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(signo, &sa, nullptr);
}

std::vector<Device*>* MakeDevices() {
  Options o;
  absl::Status env_status;
  {
    Globals& g = G();
    base::MutexLock lock(&g.mu);
    if (!g.configured) {
      const char* env = std::getenv("REGCACHE_MLX5EMU");
      absl::StatusOr<Options> parsed = ParseOptions(env != nullptr ? env : "");
      if (parsed.ok()) g.options = *parsed;
      env_status = parsed.status();
      g.configured = true;
    }
    o = g.options;
  }
  if (!env_status.ok()) {
    // A test run misconfigured: say so loudly (a violation fails the emu tests) and go on with
    // the defaults.
    Violation(absl::StrCat("REGCACHE_MLX5EMU: ", env_status.message()));
  }
  if (o.fatal_signal != 0) WatchFatalSignal(o.fatal_signal);
  auto* devices = new std::vector<Device*>;
  devices->push_back(new Device("mlx5_0", 0, ConnectX6Dx, o));
  devices->push_back(new Device("mlx5_1", 1, ConnectX7, o));
  return devices;
}

}  // namespace

bool FatalSignalled() { return g_fatal_signalled.load(std::memory_order_relaxed); }

void Aligned::operator()(uint8_t* p) const { ::operator delete[](p, std::align_val_t{4096}); }

DeviceMemory AllocDeviceMemory(size_t bytes) {
  return DeviceMemory(new (std::align_val_t{4096}) uint8_t[bytes]());
}

Device::Device(std::string name, uint32_t ordinal, Image (*model)(), const Options& options)
    : name_(std::move(name)), ordinal_(ordinal), model_(model) {
  ibv_.node_type = IBV_NODE_CA;
  ibv_.transport_type = IBV_TRANSPORT_IB;
  std::strncpy(ibv_.name, name_.c_str(), sizeof(ibv_.name) - 1);
  std::strncpy(ibv_.dev_name, absl::StrCat("uverbs_emu_", name_).c_str(),
               sizeof(ibv_.dev_name) - 1);
  Build(options);
  thread_ = std::thread([this] { Loop(); });
}

void Device::Build(const Options& options) {
  options_ = options;
  image_ = Adjusted(model_(), options);
  sim::CoreOptions c;
  c.max_keys = 1u << image_.log_max_mkey_emulated;
  c.max_indirection = image_.general.max_indirection;
  c.general_caps = image_.general;
  c.odp_caps = image_.odp;
  c.check_pd_on_create = true;
  c.max_klm_entries = 1u << image_.general.log_max_klm_list_size;
  core_ = sim::HcaCore::Create(c).value();
  fatal_.store(false);
}

absl::Status Device::Reconfigure(const Options& options) {
  base::MutexLock lock(&mu);
  if (open_contexts.load() != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("mlx5emu: ", name_, " has open contexts: close them first"));
  }
  dv_mkeys.clear();
  devx_mkeys.clear();
  Build(options);
  return absl::OkStatus();
}

Device::~Device() {
  stop_.store(true);
  thread_.join();
}

void Device::Kill() {
  if (fatal_.exchange(true, std::memory_order_acq_rel)) return;  // once
  base::MutexLock lock(&mu);
  for (auto& [qpn, qp] : qps) ToError(qp);
  // Every open context learns it asynchronously, as from the kernel's async event file.
  for (Context* c : contexts) {
    c->events.push_back(IBV_EVENT_DEVICE_FATAL);
    const uint64_t one = 1;
    if (write(c->async_fd.get(), &one, sizeof(one)) != sizeof(one)) {
      Violation(absl::StrCat(name_, ": could not signal a context's async event file"));
    }
  }
}

void Device::Kick() { kicks_.fetch_add(1, std::memory_order_release); }

void Device::Loop() {
  // The device polls its doorbell records: a store to memory raises no event. It naps while
  // idle, longer the longer nothing happens (at most 200 µs), so an idle emulator costs little.
  absl::Duration nap = absl::ZeroDuration();
  uint32_t kicks = 0;
  while (!stop_.load(std::memory_order_acquire)) {
    if (options_.fatal_signal != 0 && FatalSignalled() && !fatal()) Kill();
    bool busy;
    {
      base::MutexLock lock(&mu);
      busy = Step();
    }
    const uint32_t k = kicks_.load(std::memory_order_acquire);
    if (busy || k != kicks) {
      kicks = k;
      nap = absl::ZeroDuration();
      continue;
    }
    nap = std::min(nap + absl::Microseconds(10), absl::Microseconds(200));
    absl::SleepFor(nap);
  }
}

bool Device::Step() {
  bool busy = false;
  for (auto& [qpn, qp] : qps) busy |= StepQp(this, qp);
  return busy;
}

std::vector<Device*>& Devices() {
  static std::vector<Device*>* devices = MakeDevices();  // never destroyed: handles outlive main
  return *devices;
}

Device* DeviceOf(ibv_device* d) {
  for (Device* dev : Devices()) {
    if (dev->ibv() == d) return dev;
  }
  return nullptr;
}

void Violation(std::string what) {
  RC_LOG(WARNING) << "mlx5emu violation: " << what;
  Globals& g = G();
  base::MutexLock lock(&g.mu);
  g.violations.push_back(std::move(what));
}

Faults& GetFaults() {
  static Faults* faults = new Faults;  // never destroyed, as Globals
  return *faults;
}

absl::Status Configure(absl::string_view options) {
  absl::StatusOr<Options> o = ParseOptions(options);
  if (!o.ok()) return o.status();
  {
    Globals& g = G();
    base::MutexLock lock(&g.mu);
    g.options = *o;
    g.configured = true;
  }
  for (Device* d : Devices()) {
    if (absl::Status s = d->Reconfigure(*o); !s.ok()) return s;
  }
  return absl::OkStatus();
}

void FailNthUmrWqe(uint32_t nth, uint8_t syndrome, uint8_t vendor_syndrome) {
  Faults& f = GetFaults();
  f.fail_syndrome.store(syndrome);
  f.fail_vendor.store(vendor_syndrome);
  f.fail_nth_umr_wqe.store(nth);
}

void FailNextCommand(uint16_t opcode, uint8_t status, uint32_t syndrome) {
  Faults& f = GetFaults();
  f.fail_command_status.store(status);
  f.fail_command_syndrome.store(syndrome);
  f.fail_command_opcode.store(opcode);
}

void DelayUmrCompletions(absl::Duration delay) {
  GetFaults().umr_cqe_delay_ns.store(absl::ToInt64Nanoseconds(delay));
}

void LoseUmrCompletions(uint32_t count) { GetFaults().lose_umr_cqes.store(count); }

void FailNextRegMr(int err) { GetFaults().fail_next_reg_mr.store(err); }

void KillDevice(absl::string_view name) {
  for (Device* d : Devices()) {
    if (d->name() == name) d->Kill();
  }
}

std::vector<std::string> Violations() {
  Globals& g = G();
  base::MutexLock lock(&g.mu);
  return g.violations;
}

void ClearViolations() {
  Globals& g = G();
  base::MutexLock lock(&g.mu);
  g.violations.clear();
}

sim::SimStats* StatsOf(absl::string_view name) {
  for (Device* d : Devices()) {
    if (d->name() == name) return &d->core().stats();
  }
  return nullptr;
}

Census CensusOf(absl::string_view name) {
  Census c;
  for (Device* d : Devices()) {
    if (d->name() != name) continue;
    base::MutexLock lock(&d->mu);
    c.contexts = static_cast<int>(d->contexts.size());
    c.files = static_cast<int>(d->files.size());
    for (const Ufile* f : d->files) {
      c.pds += static_cast<int>(f->pds.size());
      c.mrs += static_cast<int>(f->mrs.size());
      c.cqs += static_cast<int>(f->cqs.size());
      c.qps += static_cast<int>(f->qps.size());
    }
  }
  return c;
}

}  // namespace regcache::hca::mlx5emu
