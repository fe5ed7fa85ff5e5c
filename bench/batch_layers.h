// The layers of a batch of keys on a verbs device, for regmr_bench's bind_queue and cache_layer
// rows: the same K window keys as its batch case, made in this process by each layer of
// regcache in turn, from the bottom:
//
//   bind_queue   the verbs backend's queue alone (hca::Queue: PostMap per key, one Doorbell,
//                the last completion awaited): what the backend adds to the device's floor
//                (bench/bind_floor.h) — its checks, its table and its bookkeeping;
//   cache_layer  the cache alone (cache::RegCache::RegisterBatch of K misses on a tenant with
//                the memory attached): adds the layout, the reservation, the records and their
//                publication.
//
// The batch case itself adds the rest: the client library, the ring and the daemon's grant
// table. Every layer's keys are invalidated after its timed region, so the next batch misses
// again. The device is opened by the daemon's own spec ("verbs:rxe0"), here, a second time.
#ifndef REGCACHE_BENCH_BATCH_LAYERS_H_
#define REGCACHE_BENCH_BATCH_LAYERS_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "bench/batch_memory.h"
#include "cache/reg_cache.h"
#include "hca/device.h"
#include "hca/verbs/verbs_device.h"

namespace regcache::bench {

class BatchLayers {
 public:
  // Null for a spec other than "verbs..."; an error where the device does not open. (Not on the
  // sim: a cache with a sim of its own in this process measured more than the daemon's whole
  // path, sharing the CPUs with the benchmark's client and the daemon's sim.)
  static absl::StatusOr<std::unique_ptr<BatchLayers>> Open(const std::string& spec) {
    if (!absl::StartsWith(spec, "verbs")) return std::unique_ptr<BatchLayers>();
    hca::verbs::RegisterBackend();
    auto l = std::unique_ptr<BatchLayers>(new BatchLayers);
    ASSIGN_OR_RETURN(l->device_, hca::OpenDevice(spec));
    return l;
  }
  ~BatchLayers() { Release(); }

  // Memory for `keys` ranges of `bytes`, range i starting i + 1 pages in (as the batch case),
  // attached to a tenant of a cache of its own and registered for the queue's keys; `keys`
  // windows and a queue that holds them all. Not timed.
  absl::Status Prepare(int keys, uint64_t bytes) {
    Release();
    ASSIGN_OR_RETURN(mem_, BatchMemory::Map(keys, bytes));
    bytes_ = bytes;
    // The queue's layer.
    ASSIGN_OR_RETURN(pd_, device_->AllocPd());
    ASSIGN_OR_RETURN(
        backing_, device_->RegisterBacking(pd_, mem_->va(), mem_->length(), hca::kAllAccess, {}));
    ASSIGN_OR_RETURN(keys_, device_->CreateIndirectKeys(pd_, 1, static_cast<uint32_t>(keys), {}));
    // Room for every bind at once.
    uint32_t depth = 1;
    while (depth < static_cast<uint32_t>(keys) + 1) depth *= 2;
    ASSIGN_OR_RETURN(queue_, device_->CreateQueue(pd_, hca::QueueOptions{depth}));
    // The cache's layer, built as the daemon builds its caches (service/internal/device_set.cc),
    // with its maintenance thread, which refills the pool and takes keys out of quarantine
    // between batches.
    cache::CacheOptions o;
    o.pool.capacity_classes =
        cache::RegCache::FitClasses(o.pool.capacity_classes, device_->capabilities());
    ASSIGN_OR_RETURN(cache_, cache::RegCache::Create(device_.get(), o));
    ASSIGN_OR_RETURN(tenant_, cache_->OpenTenant(cache::TenantOptions{}));
    cache::BackingSpec spec;
    spec.va = mem_->va();
    spec.local_addr = mem_->data();
    spec.length = mem_->length();
    RETURN_IF_ERROR(cache_->AddBacking(tenant_, spec).status());
    items_.clear();
    for (int i = 0; i < keys; ++i) {
      items_.push_back({mem_->range(i), bytes,
                        hca::kLocalRead | hca::kLocalWrite | hca::kRemoteRead | hca::kRemoteWrite});
    }
    return absl::OkStatus();
  }

  // The queue alone: a map per window, one doorbell, every completion awaited (seconds); then,
  // not timed, every window invalidated the same way.
  absl::StatusOr<double> RunQueue() {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<hca::KlmEntry> entries(keys_.size());
    for (size_t i = 0; i < keys_.size(); ++i) {
      entries[i] = hca::KlmEntry{backing_.key, items_[i].va, bytes_};
      hca::MapRequest r;
      r.key = keys_[i];
      r.new_variant = static_cast<uint8_t>(hca::KeyVariant(hca::NextVariant(keys_[i])));
      r.klm = absl::MakeConstSpan(&entries[i], 1);
      r.access = items_[i].access;
      r.start_addr = items_[i].va;
      r.length = bytes_;
      r.options.signaled = i + 1 == keys_.size();
      RETURN_IF_ERROR(queue_->PostMap(next_id_++, r));
      keys_[i] = hca::NextVariant(keys_[i]);
    }
    RETURN_IF_ERROR(RingAndAwait());
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (size_t i = 0; i < keys_.size(); ++i) {
      hca::PostOptions po;
      po.signaled = i + 1 == keys_.size();
      RETURN_IF_ERROR(queue_->PostInvalidate(next_id_++, keys_[i], po));
      keys_[i] = hca::NextVariant(keys_[i]);
    }
    RETURN_IF_ERROR(RingAndAwait());
    return secs;
  }

  // The cache alone: RegisterBatch of every range (each a miss, or the run fails); then, not
  // timed, every key released and invalidated.
  absl::StatusOr<double> RunCache() {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<absl::StatusOr<cache::KeyGrant>> got = cache_->RegisterBatch(tenant_, items_);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (const auto& g : got) {
      if (!g.ok()) return g.status();
      if (g->hit) return absl::InternalError("the cache layer's batch hit: expected misses");
      RETURN_IF_ERROR(cache_->Release(tenant_, g->handle));
      RETURN_IF_ERROR(cache_->Invalidate(tenant_, g->handle));
    }
    return secs;
  }

 private:
  BatchLayers() = default;

  absl::Status RingAndAwait() {
    RETURN_IF_ERROR(queue_->Doorbell());
    const uint64_t last = next_id_ - 1;
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    for (;;) {
      hca::Completion c[16];
      const size_t n = queue_->Poll(absl::MakeSpan(c));
      for (size_t i = 0; i < n; ++i) {
        if (!c[i].status.ok()) return c[i].status;
        if (c[i].request_id == last) return absl::OkStatus();
      }
      if (absl::Now() > give_up) return absl::DeadlineExceededError("no completion in 30 s");
    }
  }

  void Release() {
    if (cache_ != nullptr) {
      (void)cache_->CloseTenant(tenant_);
      cache_.reset();
    }
    queue_.reset();
    for (hca::Key k : keys_) (void)device_->DestroyKey(k);
    keys_.clear();
    if (backing_.key != 0) (void)device_->DestroyKey(backing_.key);
    backing_ = {};
    if (pd_.pdn != 0) (void)device_->DeallocPd(pd_);
    pd_ = {};
    mem_.reset();
  }

  std::unique_ptr<hca::Device> device_;
  std::unique_ptr<BatchMemory> mem_;
  uint64_t bytes_ = 0;
  hca::Pd pd_;
  hca::Backing backing_;
  std::vector<hca::Key> keys_;
  std::unique_ptr<hca::Queue> queue_;
  uint64_t next_id_ = 1;
  std::unique_ptr<cache::RegCache> cache_;
  cache::TenantId tenant_ = 0;
  std::vector<cache::RegisterItem> items_;
};

}  // namespace regcache::bench
#endif  // REGCACHE_BENCH_BATCH_LAYERS_H_
