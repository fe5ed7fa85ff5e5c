// The memory ordering a ConnectX send queue and completion queue need, as named barriers
// (docs/mlx5.md, Doorbells). Posting a WQE is three steps the device must see in order:
//   1. the WQE bytes in the send queue buffer (host memory the device reads by DMA);
//   ToDeviceBarrier: the WQE is globally visible before the doorbell record says it exists;
//   2. the doorbell record (host memory): the producer counter, big-endian, low 16 bits;
//   WcStartBarrier: the record is visible before the write to the device page;
//   3. the first 8 bytes of the last WQE's control segment written to the UAR doorbell register
//      (write-combining device memory), then FlushWrites so it leaves the CPU now.
// Reading a CQE is the reverse: the owner byte says the device wrote it, FromDeviceBarrier keeps
// the rest of the CQE from being read before the owner byte.
//
// x86-64 orders stores to ordinary memory and loads among themselves: its barriers are compiler
// barriers except the write-combining flush (sfence). AArch64 needs real ones (dmb oshst /
// oshld for memory shared with the device, dsb st for device memory). Other architectures get a
// full fence everywhere: correct, if slower.
#ifndef REGCACHE_HCA_MLX5_INTERNAL_MMIO_H_
#define REGCACHE_HCA_MLX5_INTERNAL_MMIO_H_

#include <cstdint>
#include <cstring>

namespace regcache::hca::mlx5 {

#if defined(__x86_64__)
inline void ToDeviceBarrier() { asm volatile("" ::: "memory"); }
inline void FromDeviceBarrier() { asm volatile("" ::: "memory"); }
inline void WcStartBarrier() { asm volatile("" ::: "memory"); }
inline void FlushWrites() { asm volatile("sfence" ::: "memory"); }
#elif defined(__aarch64__)
inline void ToDeviceBarrier() { asm volatile("dmb oshst" ::: "memory"); }
inline void FromDeviceBarrier() { asm volatile("dmb oshld" ::: "memory"); }
inline void WcStartBarrier() { asm volatile("dsb st" ::: "memory"); }
inline void FlushWrites() { asm volatile("dsb st" ::: "memory"); }
#else
inline void ToDeviceBarrier() { __sync_synchronize(); }
inline void FromDeviceBarrier() { __sync_synchronize(); }
inline void WcStartBarrier() { __sync_synchronize(); }
inline void FlushWrites() { __sync_synchronize(); }
#endif

// One 8-byte store to a device register: the bytes as they are in memory (already big-endian).
inline void MmioWrite64(void* reg, const uint8_t bytes[8]) {
  uint64_t v;
  std::memcpy(&v, bytes, sizeof(v));
  *static_cast<volatile uint64_t*>(reg) = v;
}

}  // namespace regcache::hca::mlx5
#endif  // REGCACHE_HCA_MLX5_INTERNAL_MMIO_H_
