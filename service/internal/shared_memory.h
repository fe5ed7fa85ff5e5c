// Shareable memory: a file-backed mapping that the daemon and a client both map, so the device
// (through the daemon's mapping) and the client (through its own) see the same bytes.
//
// Safety against the client: a mapping of a file that later shrinks raises SIGBUS on the next
// access to the lost pages — in the daemon, that would be any device access. So every file is
// sealed against shrinking before it is mapped: the daemon's own memfds are sealed against
// shrinking and growing (and further sealing) before their fd leaves the process; a client's
// fd must already carry F_SEAL_SHRINK or accept it (a memfd created with MFD_ALLOW_SEALING).
// Anything else (plain files, hugetlbfs files that cannot be sealed) is refused; a hugetlb memfd
// (MFD_HUGETLB | MFD_ALLOW_SEALING) can be sealed and is taken, with its huge page size.
//
// Large pages: a mapping of 2 MiB or more is placed at a 2 MiB aligned address (hugetlb ones at
// their huge page), so that shmem may back it with transparent huge pages and the device may
// translate it in pages that large (log_page_hint, service/internal/backing_page.h).
//
// dma-bufs (memory another driver exported, e.g. a GPU's) are kept by descriptor and never mapped:
// the device registers them itself, so no seal is needed (the exporter pins what is registered).
//
// Thread safety: immutable after creation; safe to read from any thread.
#ifndef REGCACHE_SERVICE_SHARED_MEMORY_H_
#define REGCACHE_SERVICE_SHARED_MEMORY_H_

#include <cstdint>
#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/unique_fd.h"
#include "hca/device.h"

namespace regcache::service {

class SharedMemory {
 public:
  // A new memfd of `length` bytes (hugetlb: 2 MiB pages), sealed and mapped.
  // kInvalidArgument for length 0 or not a multiple of the page size; errno-based errors from
  // memfd_create / ftruncate / fcntl / mmap (hugetlb without reserved huge pages: ENOMEM).
  static absl::StatusOr<std::unique_ptr<SharedMemory>> Create(uint64_t length, bool hugetlb,
                                                              absl::string_view name);

  // Maps [offset, offset+length) of a client's file. Takes ownership of `fd` (closed on error).
  // kInvalidArgument: not a regular file, length 0, offset or length not page aligned, the range
  // outside the file or wrapping; kFailedPrecondition: the file cannot be sealed against
  // shrinking — unless it is a hugetlbfs file and `unsealed_hugetlb` (a file of a hugetlbfs
  // mount cannot be sealed: taken only where nothing in this process touches the mapping, as
  // a device that reaches memory through pages the kernel pinned; see ImportClientFile).
  static absl::StatusOr<std::unique_ptr<SharedMemory>> Import(int fd, uint64_t offset,
                                                              uint64_t length,
                                                              bool unsealed_hugetlb = false);

  // Keeps [offset, offset+length) of a client's dma-buf (hca/dmabuf.h), unmapped: the device
  // registers it by descriptor (hca::Device::RegisterDmabufBacking), the daemon never maps it
  // here. Takes ownership of `fd`. kInvalidArgument: not a dma-buf, or the range empty,
  // wrapping or outside it.
  static absl::StatusOr<std::unique_ptr<SharedMemory>> ImportDmabuf(int fd, uint64_t offset,
                                                                    uint64_t length);

  // Import or ImportDmabuf, whichever kind of file `fd` is; a dma-buf only where the device
  // registers them (kUnimplemented naming it otherwise); an unsealable hugetlbfs file only where
  // the device is not the sim (the sim plays the device with this process's loads and stores,
  // which a client shrinking its file would turn into SIGBUS; a real device reaches the pages
  // its registration pinned, which stay until it is deregistered).
  static absl::StatusOr<std::unique_ptr<SharedMemory>> ImportClientFile(
      int fd, uint64_t offset, uint64_t length, const hca::Capabilities& device);

  ~SharedMemory();
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;

  uint8_t* data() const { return data_; }  // null for a dma-buf
  bool dmabuf() const { return dmabuf_; }
  bool sealed() const { return sealed_; }  // the file cannot shrink (false: see Import)
  int fd() const { return fd_.get(); }
  uint64_t offset() const { return offset_; }  // into the file
  uint64_t length() const { return length_; }
  bool hugetlb() const { return hugetlb_; }
  // The largest page (2^n bytes) the mapping's layout allows a device translation to use: a
  // hugetlb file's huge page; 21 (2 MiB) for other files when the mapping's address, its file
  // offset and its length are all multiples of 2 MiB; else 12.
  uint32_t log_page_hint() const { return log_page_hint_; }
  // A new descriptor of the same file, close-on-exec, for passing to a client.
  absl::StatusOr<int> DupFd() const;

 private:
  SharedMemory(base::UniqueFd fd, uint8_t* data, uint64_t length, bool hugetlb,
               uint32_t log_page_hint)
      : fd_(std::move(fd)),
        data_(data),
        length_(length),
        hugetlb_(hugetlb),
        log_page_hint_(log_page_hint) {}

  base::UniqueFd fd_;
  uint8_t* data_;
  uint64_t length_;
  bool hugetlb_;
  uint32_t log_page_hint_;
  bool dmabuf_ = false;
  bool sealed_ = true;
  uint64_t offset_ = 0;
};

}  // namespace regcache::service
#endif  // REGCACHE_SERVICE_SHARED_MEMORY_H_
