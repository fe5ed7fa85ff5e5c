// dma-bufs: memory another driver exported (a GPU's through its driver, or udmabuf's over a
// memfd) and handed around by file descriptor. What every layer needs to know of one before a
// device registers it (ibv_reg_dmabuf_mr): that the descriptor is one, and how large it is. And
// the mapping through which the simulated devices play a device's access to it (a real device
// reaches the exporter's pages by DMA; the daemon never maps a dma-buf for a real one).
//
// Thread safety: free functions; a DmabufMapping is immutable after creation.
#ifndef REGCACHE_HCA_DMABUF_H_
#define REGCACHE_HCA_DMABUF_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace regcache::hca {

// Part of a dma-buf, by its descriptor. The descriptor stays the caller's: a backend that keeps
// the buffer takes a reference of its own.
struct DmabufRange {
  int fd = -1;
  uint64_t offset = 0;  // into the buffer
};

// Whether `fd` is a dma-buf: a file of the dma-buf file system (DMA_BUF_MAGIC).
bool IsDmabuf(int fd);

// The size of dma-buf `fd` in bytes (lseek to its end, which the dma-buf core answers).
// kInvalidArgument when `fd` is not a dma-buf.
absl::StatusOr<uint64_t> DmabufSize(int fd);

// kInvalidArgument unless `fd` is a dma-buf and [offset, offset+length) a non-empty range
// within it that does not wrap.
absl::Status CheckDmabufRange(int fd, uint64_t offset, uint64_t length);

// [offset, offset+length) of a dma-buf mapped shared, readable and writable (the exporter must
// support mmap: udmabuf does, most GPU exporters do not). REQUIRES: offset page aligned.
class DmabufMapping {
 public:
  // kInvalidArgument as CheckDmabufRange or for an unaligned offset; errno-based errors of
  // mmap (an exporter that cannot be mapped: ENODEV, EINVAL).
  static absl::StatusOr<std::unique_ptr<DmabufMapping>> Map(int fd, uint64_t offset,
                                                            uint64_t length);
  ~DmabufMapping();
  DmabufMapping(const DmabufMapping&) = delete;
  DmabufMapping& operator=(const DmabufMapping&) = delete;

  uint8_t* data() const { return data_; }
  uint64_t length() const { return length_; }

 private:
  DmabufMapping(uint8_t* data, uint64_t length) : data_(data), length_(length) {}
  uint8_t* const data_;
  const uint64_t length_;
};

}  // namespace regcache::hca
#endif  // REGCACHE_HCA_DMABUF_H_
