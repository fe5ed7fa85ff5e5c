// The standard gRPC health check (grpc.health.v1.Health/Check) as a client, for regcachectl's
// `health` command (Kubernetes exec probes): a plain channel, no session, no control socket.
// The request and response are two tiny protobuf messages, encoded by hand
// (protocol/proto_wire.h) so that no generated health stubs are needed (Debian's gRPC ships
// the server side only).
#ifndef REGCACHE_TOOLS_INTERNAL_HEALTH_PROBE_H_
#define REGCACHE_TOOLS_INTERNAL_HEALTH_PROBE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace regcache::tools::internal {

// The serving status `target` ("unix:/run/regcache/grpc.sock") reports for `service` (""
// for the server as a whole), by name: "SERVING", "NOT_SERVING", "UNKNOWN" or
// "SERVICE_UNKNOWN" (a number for a status this code does not know). Errors are the call's:
// kUnavailable (nothing listens), kDeadlineExceeded (no answer within `timeout`), kNotFound
// (the server does not know `service`), kInternal for a response that does not parse.
absl::StatusOr<std::string> CheckHealth(const std::string& target, absl::string_view service,
                                        absl::Duration timeout);

// The response's status field (HealthCheckResponse.status, field 1, a varint) from its wire
// bytes: 0 when absent (proto3's default, UNKNOWN). kInternal for bytes that do not parse.
absl::StatusOr<uint64_t> ParseHealthResponse(absl::string_view bytes);

}  // namespace regcache::tools::internal
#endif  // REGCACHE_TOOLS_INTERNAL_HEALTH_PROBE_H_
