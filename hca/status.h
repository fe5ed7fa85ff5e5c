// Device errors as absl::Status values that still carry the PRM-like completion syndrome.
//
// Every fallible device operation (a completion of a posted request, a peer data-path call, a
// command) reports failure as an absl::Status whose canonical code callers can act on and whose
// message names the syndrome and the reason, e.g.
//
//   PERMISSION_DENIED "REMOTE_ACCESS (syndrome 0x13): rkey 0x00012a03 lacks rw"
//
// The raw syndrome bytes travel as a Status payload so that code which needs them (tests,
// diagnostics, the UMR engine deciding whether to retry) does not parse messages: see ErrorOf().
//
// Syndrome values are those of mlx5 error CQEs (byte 55 syndrome, byte 54 vendor syndrome).
// Which syndrome a backend raises for which condition is listed at each backend; the sim's
// choices are documented in hca/sim/sim_device.h.
//
// Thread safety: pure functions.
#ifndef REGCACHE_HCA_STATUS_H_
#define REGCACHE_HCA_STATUS_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "umr/prm.h"

namespace regcache::hca {

// Error-CQE syndromes (mlx5 CQE byte 55). Only those the project raises or interprets; the
// values are the PRM codec's (umr/prm.h), named here for the device's callers.
enum class Syndrome : uint8_t {
  kNone = 0x00,
  // Local length error (e.g. access longer than the key allows locally).
  kLocalLength = umr::kCqeSyndLocalLength,
  // Malformed WQE (bad opcode, DS, octoword count).
  kLocalQpOp = umr::kCqeSyndLocalQpOp,
  // Local protection: an lkey access failed a key check.
  kLocalProt = umr::kCqeSyndLocalProt,
  // Flushed: the queue was in error when the WQE was executed.
  kWrFlush = umr::kCqeSyndWrFlush,
  // UMR / bind refused: target key state (free check, umr_en, PD, capacity).
  kMwBind = umr::kCqeSyndMwBind,
  kBadResp = umr::kCqeSyndBadResp,
  kLocalAccess = umr::kCqeSyndLocalAccess,
  // Remote invalid request (misaligned atomic, invalidate refused).
  kRemoteInvalReq = umr::kCqeSyndRemoteInvalReq,
  // Remote access: an rkey access failed a key check.
  kRemoteAccess = umr::kCqeSyndRemoteAccess,
  kRemoteOp = umr::kCqeSyndRemoteOp,
};

// Vendor syndromes (mlx5 error CQE byte 54): an ODP page fault could not be resolved.
inline constexpr uint8_t kVendorSyndromeOdpFault = umr::kCqeVendorSyndOdpPfault;

// The name used in messages ("REMOTE_ACCESS"); "SYNDROME_0x.." for values not listed above.
absl::string_view SyndromeName(Syndrome s);

// The canonical code the project maps each syndrome to:
//   kLocalProt, kRemoteAccess, kLocalAccess          -> kPermissionDenied
//   kMwBind                                          -> kFailedPrecondition
//   kLocalQpOp, kRemoteInvalReq, kLocalLength        -> kInvalidArgument
//   kWrFlush                                         -> kAborted
//   anything with vendor syndrome 0x93               -> kUnavailable
//   others                                           -> kInternal
absl::StatusCode CodeForSyndrome(Syndrome s, uint8_t vendor_syndrome);

// Builds the error status: code from CodeForSyndrome, message
// "<NAME> (syndrome 0x..[, vendor 0x..]): <reason>", and the syndrome payload.
// REQUIRES: s != kNone or vendor_syndrome != 0.
absl::Status DeviceError(Syndrome s, absl::string_view reason, uint8_t vendor_syndrome = 0);

struct ErrorInfo {
  Syndrome syndrome = Syndrome::kNone;
  uint8_t vendor_syndrome = 0;
};

// The syndromes carried by a status made by DeviceError (also after base::Annotate, which keeps
// payloads). nullopt for OK and for statuses that did not come from a device completion.
std::optional<ErrorInfo> ErrorOf(const absl::Status& status);

}  // namespace regcache::hca
#endif  // REGCACHE_HCA_STATUS_H_
