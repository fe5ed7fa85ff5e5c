// Memory for a batch case of regmr_bench: K ranges of N bytes, range i starting i + 1 pages in
// (K different ranges over little memory), mapped and populated; unmapped with the object.
// Shared by the rows that make a batch's keys below regcache (bench/bind_floor.h,
// bench/batch_layers.h).
#ifndef REGCACHE_BENCH_BATCH_MEMORY_H_
#define REGCACHE_BENCH_BATCH_MEMORY_H_

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "base/errno_status.h"

namespace regcache::bench {

class BatchMemory {
 public:
  static absl::StatusOr<std::unique_ptr<BatchMemory>> Map(int keys, uint64_t bytes) {
    const uint64_t length = (static_cast<uint64_t>(keys) + 1) * kPage + bytes;
    void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) return base::ErrnoToStatus(errno, "mmap");
    return std::unique_ptr<BatchMemory>(new BatchMemory(p, length));
  }
  ~BatchMemory() { ::munmap(data_, length_); }
  BatchMemory(const BatchMemory&) = delete;
  BatchMemory& operator=(const BatchMemory&) = delete;

  void* data() const { return data_; }
  uint64_t va() const { return reinterpret_cast<uint64_t>(data_); }
  uint64_t length() const { return length_; }
  // The first address of range i.
  uint64_t range(int i) const { return va() + (static_cast<uint64_t>(i) + 1) * kPage; }

 private:
  static constexpr uint64_t kPage = 4096;
  BatchMemory(void* data, uint64_t length) : data_(data), length_(length) {}

  void* const data_;
  const uint64_t length_;
};

}  // namespace regcache::bench
#endif  // REGCACHE_BENCH_BATCH_MEMORY_H_
