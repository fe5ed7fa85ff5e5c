// The verbs backend's self-test at open: does the device confine a peer to a memory window's
// own range, or only to the memory region the window is bound on (docs/key_bounds.md)?
//
// It registers a scratch region of four pages, binds a type-1 window over the second page with
// remote read, and reads through the window's rkey over an RC queue pair connected to itself:
// eight bytes inside the window (which must succeed and return the page's bytes), eight bytes
// just before it and eight bytes just after it (inside the region). A device that enforces the
// window's bounds refuses both outside reads (IBV_WC_REM_ACCESS_ERR); Soft-RoCE on Linux 6.1
// serves them. Everything it creates is released before it returns; it takes a few
// milliseconds (a few hundred on a software device under emulation).
#ifndef REGCACHE_HCA_VERBS_INTERNAL_BOUNDS_PROBE_H_
#define REGCACHE_HCA_VERBS_INTERNAL_BOUNDS_PROBE_H_

#include <string>

#include "hca/device.h"
#include "hca/verbs/context.h"

namespace regcache::hca::verbs {

struct BoundsProbe {
  // kKey: both outside reads were refused; kAttachment: at least one was served; kUnknown: the
  // test could not run or could not tell (a verb failed, the read inside was not served).
  KeyBounds bounds = KeyBounds::kUnknown;
  std::string detail;  // what was observed, in words
};

BoundsProbe ProbeWindowBounds(const Context& c);

// The second self-test at open: does the provider bind type-1 windows posted as a list of
// IBV_WR_BIND_MW work requests by one ibv_post_send (Context::set_bind_lists)? It posts binds
// of two windows (one page each, remote read) as one list on one self-connected queue pair,
// waits for the list's one completion, and reads eight bytes through each window's new rkey
// over a second queue pair of the PD: type-1 windows serve every queue pair of their PD. Usable
// only if all of it succeeds and the reads return the pages' bytes.
struct BindListProbe {
  bool usable = false;
  std::string detail;  // what was observed, in words
};

BindListProbe ProbeBindLists(const Context& c);

}  // namespace regcache::hca::verbs
#endif  // REGCACHE_HCA_VERBS_INTERNAL_BOUNDS_PROBE_H_
