#include "service/internal/attach_memory.h"

#include "absl/strings/str_format.h"
#include "base/mutex.h"
#include "service/internal/backing_page.h"
#include "service/internal/device_set.h"

namespace regcache::service::internal {

absl::Status AttachSessionMemory(const DaemonConfig& config, Session& s, MemoryId memory,
                                 uint64_t client_va, bool on_demand) {
  if (client_va == 0) return absl::InvalidArgumentError("client address 0");
  cache::BackingSpec spec;
  {
    base::MutexLock lock(&s.mu);
    auto it = s.memories.find(memory);
    if (it == s.memories.end()) {
      return absl::NotFoundError(absl::StrFormat("no memory %d in this session", memory));
    }
    Memory& m = it->second;
    if (m.attached || m.attaching) {
      return absl::AlreadyExistsError(absl::StrFormat("memory %d is already attached", memory));
    }
    m.attaching = true;  // DetachMemory leaves it (and its mapping) alone from now on
    spec.va = client_va;
    spec.local_addr = m.mem->data();
    spec.length = m.mem->length();
    spec.on_demand = on_demand;
    if (m.mem->dmabuf()) {
      // Registered by descriptor at the client's addresses; the fd stays open in `m` (not
      // erased while attaching) for the call.
      spec.dmabuf = hca::DmabufRange{m.mem->fd(), m.mem->offset()};
      spec.log_page_size = 12;
    } else {
      spec.log_page_size = BackingLogPageSize(*m.mem, s.device->device->capabilities(), on_demand,
                                              config.max_backing_page_log);
    }
  }
  absl::StatusOr<cache::BackingId> backing = s.device->cache->AddBacking(s.tenant, spec);
  base::MutexLock lock(&s.mu);
  Memory& m = s.memories.at(memory);  // not erased while attaching
  m.attaching = false;
  if (!backing.ok()) return backing.status();
  m.backing = *backing;
  m.log_page_size = spec.log_page_size;
  m.attached = true;
  m.client_va = client_va;
  m.on_demand = on_demand;
  return absl::OkStatus();
}

}  // namespace regcache::service::internal
