// Keeping the two spinning ends of a cross-process round trip on different CPUs: the server side
// (a forked echo, regcached) runs on the last CPU and the benchmark's own threads off it. Without
// it, figures on a small machine flip by 2-3x between runs with the scheduler's placement.
#ifndef REGCACHE_BENCH_CPU_PINNING_H_
#define REGCACHE_BENCH_CPU_PINNING_H_

#include <sched.h>
#include <unistd.h>

namespace regcache::bench {

// The calling thread (and what it forks or execs afterwards) on the last CPU only.
inline void PinToLastCpu() {
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus < 2) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(static_cast<int>(cpus - 1), &set);
  (void)::sched_setaffinity(0, sizeof(set), &set);
}

// The calling thread off the last CPU, if that leaves it any CPU. Returns whether it moved, with
// its previous affinity in `*old` (when given) for RestoreCpus.
inline bool KeepOffLastCpu(cpu_set_t* old = nullptr) {
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t set;
  if (cpus < 2 || ::sched_getaffinity(0, sizeof(set), &set) != 0) return false;
  if (old != nullptr) *old = set;
  CPU_CLR(static_cast<int>(cpus - 1), &set);
  return CPU_COUNT(&set) > 0 && ::sched_setaffinity(0, sizeof(set), &set) == 0;
}

inline void RestoreCpus(const cpu_set_t& old) { (void)::sched_setaffinity(0, sizeof(old), &old); }

}  // namespace regcache::bench
#endif  // REGCACHE_BENCH_CPU_PINNING_H_
