#include "base/stats.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace regcache::base::stats {
using ::regcache::base::MutexLock;

// --- HotCounter ---

namespace {

// Every thread block and counter slot, and what exited threads counted.
struct HotRegistry {
  base::Mutex mu;
  std::vector<std::atomic<uint64_t>*> blocks ABSL_GUARDED_BY(mu);
  std::array<uint64_t, HotCounter::kSlots> exited ABSL_GUARDED_BY(mu) = {};
  std::array<bool, HotCounter::kSlots> used ABSL_GUARDED_BY(mu) = {};
};

HotRegistry& Hot() {
  static HotRegistry* r = new HotRegistry;  // never destroyed: threads may exit after main
  return *r;
}

// One thread's slots: line-aligned and a whole number of lines, so no line is shared.
struct alignas(64) ThreadBlock {
  std::atomic<uint64_t> v[HotCounter::kSlots];
};
static_assert(sizeof(ThreadBlock) % 64 == 0);

thread_local bool tls_exited = false;  // trivially destructible: readable during thread exit

// Owns the calling thread's block; on thread exit folds its counts into `exited`.
struct ThreadBlockOwner {
  ThreadBlock* block = nullptr;
  ~ThreadBlockOwner();
};
thread_local ThreadBlockOwner tls_owner;

}  // namespace

constinit thread_local std::atomic<uint64_t>* HotCounter::tls_block_ = nullptr;

ThreadBlockOwner::~ThreadBlockOwner() {
  tls_exited = true;
  if (block == nullptr) return;
  HotCounter::DetachThread(block->v);
  delete block;
}

void HotCounter::DetachThread(std::atomic<uint64_t>* block) {
  tls_block_ = nullptr;
  HotRegistry& r = Hot();
  base::MutexLock lock(&r.mu);
  for (int i = 0; i < kSlots; ++i) {
    if (r.used[i]) r.exited[i] += block[i].load(std::memory_order_relaxed);
  }
  std::erase(r.blocks, block);
}

std::atomic<uint64_t>* HotCounter::AttachThread() {
  if (tls_exited) return nullptr;
  auto* b = new ThreadBlock;
  for (auto& v : b->v) v.store(0, std::memory_order_relaxed);
  HotRegistry& r = Hot();
  {
    base::MutexLock lock(&r.mu);
    r.blocks.push_back(b->v);
  }
  tls_owner.block = b;
  tls_block_ = b->v;
  return b->v;
}

HotCounter::HotCounter() {
  HotRegistry& r = Hot();
  base::MutexLock lock(&r.mu);
  for (int i = 0; i < kSlots; ++i) {
    if (!r.used[i]) {
      r.used[i] = true;
      r.exited[i] = 0;
      for (std::atomic<uint64_t>* b : r.blocks) b[i].store(0, std::memory_order_relaxed);
      slot_ = i;
      return;
    }
  }
}

HotCounter::~HotCounter() {
  if (slot_ < 0) return;
  HotRegistry& r = Hot();
  base::MutexLock lock(&r.mu);
  r.used[slot_] = false;
}

uint64_t HotCounter::value() const {
  uint64_t total = fallback_.load(std::memory_order_relaxed);
  if (slot_ < 0) return total;
  HotRegistry& r = Hot();
  base::MutexLock lock(&r.mu);
  total += r.exited[slot_];
  for (const std::atomic<uint64_t>* b : r.blocks) total += b[slot_].load(std::memory_order_relaxed);
  return total;
}

// --- Histogram ---

int HistogramSnapshot::BucketOf(uint64_t v) {
  constexpr uint64_t kSub = 1u << kSubBits;
  if (v < kSub) return static_cast<int>(v);
  const int e = 63 - std::countl_zero(v);  // floor(log2 v) >= kSubBits
  const int sub = static_cast<int>((v >> (e - kSubBits)) & (kSub - 1));
  return ((e - kSubBits + 1) << kSubBits) + sub;
}

uint64_t HistogramSnapshot::BucketUpperBound(int bucket) {
  constexpr int kSub = 1 << kSubBits;
  if (bucket < kSub) return static_cast<uint64_t>(bucket);
  const int e = (bucket >> kSubBits) + kSubBits - 1;
  const uint64_t sub = static_cast<uint64_t>(bucket & (kSub - 1));
  const uint64_t lower = (static_cast<uint64_t>(kSub) + sub) << (e - kSubBits);
  return lower + ((uint64_t{1} << (e - kSubBits)) - 1);
}

uint64_t HistogramSnapshot::Percentile(double p) const {
  if (count == 0) return 0;
  const double clamped = std::clamp(p, 0.0, 100.0);
  uint64_t rank = static_cast<uint64_t>(std::ceil(clamped / 100.0 * static_cast<double>(count)));
  rank = std::max<uint64_t>(rank, 1);
  uint64_t seen = 0;
  for (int b = 0; b < kBuckets; ++b) {
    seen += buckets[b];
    if (seen >= rank) return std::min(BucketUpperBound(b), max);
  }
  return max;
}

void Histogram::Record(uint64_t v, uint64_t times) {
  if (times == 0) return;
  buckets_[HistogramSnapshot::BucketOf(v)].fetch_add(times, std::memory_order_relaxed);
  count_.fetch_add(times, std::memory_order_relaxed);
  sum_.fetch_add(v * times, std::memory_order_relaxed);
  uint64_t prev = max_.load(std::memory_order_relaxed);
  while (v > prev && !max_.compare_exchange_weak(prev, v, std::memory_order_relaxed)) {
  }
}

HistogramSnapshot Histogram::Snapshot() const {
  HistogramSnapshot s;
  for (int b = 0; b < HistogramSnapshot::kBuckets; ++b) {
    s.buckets[b] = buckets_[b].load(std::memory_order_relaxed);
  }
  // The count is the sum of the buckets read, so a snapshot taken during updates is still
  // internally consistent for percentiles.
  for (uint64_t n : s.buckets) s.count += n;
  s.sum = sum_.load(std::memory_order_relaxed);
  s.max = max_.load(std::memory_order_relaxed);
  return s;
}

// --- Collector ---

namespace internal {

void Collector::Visit(absl::string_view name, absl::string_view help, const Counter& c) {
  samples_.push_back({component_,
                      std::string(name),
                      std::string(help),
                      Kind::kCounter,
                      static_cast<int64_t>(c.value()),
                      {}});
}
void Collector::Visit(absl::string_view name, absl::string_view help, const HotCounter& c) {
  samples_.push_back({component_,
                      std::string(name),
                      std::string(help),
                      Kind::kCounter,
                      static_cast<int64_t>(c.value()),
                      {}});
}
void Collector::Visit(absl::string_view name, absl::string_view help, const Gauge& g) {
  samples_.push_back(
      {component_, std::string(name), std::string(help), Kind::kGauge, g.value(), {}});
}
void Collector::Visit(absl::string_view name, absl::string_view help, const Histogram& h) {
  samples_.push_back(
      {component_, std::string(name), std::string(help), Kind::kHistogram, 0, h.Snapshot()});
}

}  // namespace internal

// --- Registry ---

Registry::Id Registry::Add(std::string component, SnapshotFn fn) {
  MutexLock lock(&mu_);
  const Id id = next_id_++;
  entries_.push_back({id, std::move(component), std::move(fn)});
  return id;
}

Registry::Id Registry::Register(std::string labels, const Registry* child) {
  return Add(std::move(labels), [child](absl::string_view labels) {
    std::vector<Sample> samples = child->Snapshot();
    for (Sample& s : samples) {
      const size_t brace = s.component.find('{');
      if (brace == std::string::npos) {
        s.component = absl::StrCat(s.component, "{", labels, "}");
      } else {
        s.component.insert(brace + 1, absl::StrCat(labels, ","));
      }
    }
    return samples;
  });
}

Registry::Id Registry::RegisterCollector(std::function<std::vector<Sample>()> collect) {
  return Add("", [collect = std::move(collect)](absl::string_view) { return collect(); });
}

void Registry::Unregister(Id id) {
  MutexLock lock(&mu_);
  std::erase_if(entries_, [id](const Entry& e) { return e.id == id; });
}

std::vector<Sample> Registry::Snapshot() const {
  MutexLock lock(&mu_);
  std::vector<Sample> out;
  for (const Entry& e : entries_) {
    std::vector<Sample> part = e.fn(e.component);
    out.insert(out.end(), std::make_move_iterator(part.begin()),
               std::make_move_iterator(part.end()));
  }
  return out;
}

Registry& Registry::Global() {
  static Registry* registry = new Registry;
  return *registry;
}

Registration& Registration::operator=(Registration&& other) noexcept {
  if (this != &other) {
    if (registry_ != nullptr) registry_->Unregister(id_);
    registry_ = other.registry_;
    id_ = other.id_;
    other.registry_ = nullptr;
  }
  return *this;
}

Registration::~Registration() {
  if (registry_ != nullptr) registry_->Unregister(id_);
}

absl::StatusOr<int64_t> FindValue(const std::vector<Sample>& samples, absl::string_view component,
                                  absl::string_view name) {
  for (const Sample& s : samples) {
    if (s.component == component && s.name == name) return s.value;
  }
  const Sample* only = nullptr;
  for (const Sample& s : samples) {
    if (s.name != name || !absl::StartsWith(s.component, absl::StrCat(component, "{"))) continue;
    if (only != nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("stat ", component, "/", name,
                                                        " has several series (", only->component,
                                                        ", ", s.component, "): name one"));
    }
    only = &s;
  }
  if (only != nullptr) return only->value;
  return absl::NotFoundError(absl::StrCat("no stat ", component, "/", name));
}

}  // namespace regcache::base::stats