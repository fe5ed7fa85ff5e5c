// The mlx5 backend without a ConnectX: its spec, its capabilities from golden QUERY_HCA_CAP
// outboxes (bits set at the PRM offsets by hand, not by umr's encoder), its command statuses,
// the bytes it posts (the pool key's CREATE_MKEY executed by the sim; UMR WQEs under this
// device's fence, masks and inline limit), and the clear refusal where no ConnectX is.
#include "hca/mlx5/mlx5_device.h"

#include <cerrno>
#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hca/mlx5/internal/caps.h"
#include "hca/mlx5/internal/devx.h"
#include "hca/prm_convert.h"
#include "hca/sim/sim_device.h"
#include "hca/umr_poster.h"
#include "umr/caps.h"
#include "umr/mailbox.h"
#include "umr/prm.h"
#include "umr/wqe_decoder.h"

namespace regcache::hca::mlx5 {
namespace {

using ::testing::HasSubstr;

// Sets a PRM field: `width` bits at big-endian bit offset `off` of the capability union, which
// starts at byte 16 of the QUERY_HCA_CAP output.
void SetField(std::vector<uint8_t>& out, unsigned off, unsigned width, uint64_t value) {
  for (unsigned i = 0; i < width; ++i) {
    const unsigned bit = off + i;
    const bool one = ((value >> (width - 1 - i)) & 1) != 0;
    uint8_t& byte = out[16 + bit / 8];
    const uint8_t mask = static_cast<uint8_t>(0x80u >> (bit % 8));
    byte = one ? (byte | mask) : (byte & ~mask);
  }
}

// A ConnectX-6-like answer: 2^24 mkeys, indirection 4, KSM, 2^16 KLM entries, 1 KiB send WQEs,
// small-fence UMRs, atomics, page faults.
std::vector<uint8_t> GoldenGeneralCaps() {
  std::vector<uint8_t> out(umr::kQueryHcaCapOutBytes, 0);
  SetField(out, 0xea, 6, 24);      // log_max_mkey
  SetField(out, 0x100, 8, 4);      // max_indirection
  SetField(out, 0x108, 1, 1);      // fixed_buffer_size
  SetField(out, 0x109, 7, 64);     // log_max_mrw_sz
  SetField(out, 0x118, 1, 1);      // umr_extended_translation_offset
  SetField(out, 0x11a, 6, 16);     // log_max_klm_list_size
  SetField(out, 0x20a, 2, 1);      // umr_fence: initiator small
  SetField(out, 0x21e, 1, 1);      // atomic
  SetField(out, 0x227, 1, 1);      // pg
  SetField(out, 0x290, 16, 1024);  // max_wqe_sz_sq
  return out;
}

absl::StatusOr<Capabilities> CapsOf(const std::vector<uint8_t>& out, CapsPolicy policy = {}) {
  absl::StatusOr<umr::HcaCaps> hca = umr::DecodeHcaCaps(out);
  if (!hca.ok()) return hca.status();
  VerbsLimits v;
  v.max_qp_wr = 32768;
  v.odp_rc_read_write = true;
  return CapabilitiesFrom("mlx5_0", *hca, v, policy);
}

TEST(Mlx5Caps, GoldenOutboxMapsToCapabilities) {
  absl::StatusOr<Capabilities> c = CapsOf(GoldenGeneralCaps());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->backend, "mlx5");
  EXPECT_EQ(c->device_name, "mlx5_0");
  EXPECT_EQ(c->max_keys, 1u << 24);
  EXPECT_EQ(c->max_indirection, 4u);
  EXPECT_EQ(c->max_klm_entries, 65532u);  // 2^16, bounded by what one key may be created with
  EXPECT_EQ(c->max_inline_klm, 52u);      // (1024 - 128) / 16, in blocks of 4
  EXPECT_TRUE(c->umr_pointer_translation);
  EXPECT_TRUE(c->umr);
  EXPECT_FALSE(c->memory_windows);
  EXPECT_TRUE(c->ksm);
  EXPECT_TRUE(c->odp);
  EXPECT_TRUE(c->atomics);
  EXPECT_TRUE(c->umr_modify_atomic);
  EXPECT_TRUE(c->umr_modify_entity_size);
  EXPECT_FALSE(c->translation_offset);
  EXPECT_EQ(c->max_queue_depth, 4096u);
  EXPECT_EQ(c->max_key_length, 0u);  // 2^64
}

TEST(Mlx5Caps, UmrModifyLimitsAreReported) {
  std::vector<uint8_t> out = GoldenGeneralCaps();
  SetField(out, 0x207, 1, 1);  // umr_modify_entity_size_disabled
  SetField(out, 0x208, 1, 1);  // umr_modify_atomic_disabled
  absl::StatusOr<Capabilities> c = CapsOf(out);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->umr_modify_atomic);
  EXPECT_FALSE(c->umr_modify_entity_size);
}

TEST(Mlx5Caps, SmallWqesAndNoPointerModeBoundTheLists) {
  std::vector<uint8_t> out = GoldenGeneralCaps();
  SetField(out, 0x290, 16, 512);
  CapsPolicy inline_only;
  inline_only.pointer_umr = false;
  absl::StatusOr<Capabilities> c = CapsOf(out, inline_only);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_inline_klm, 24u);
  EXPECT_FALSE(c->umr_pointer_translation);
  EXPECT_EQ(c->max_klm_entries, 24u);
  EXPECT_EQ(MaxInlineKlm(128), 0u);
  EXPECT_EQ(MaxInlineKlm(191), 0u);
  EXPECT_EQ(MaxInlineKlm(192), 4u);
}

TEST(Mlx5Caps, DevicesThatCannotMakeKeysAreRefusedWithTheReason) {
  std::vector<uint8_t> out = GoldenGeneralCaps();
  SetField(out, 0x209, 1, 1);  // umr_indirect_mkey_disabled
  EXPECT_THAT(CapsOf(out).status().message(), HasSubstr("umr_indirect_mkey_disabled"));
  EXPECT_TRUE(absl::IsUnavailable(CapsOf(out).status()));
  out = GoldenGeneralCaps();
  SetField(out, 0x11a, 6, 0);
  EXPECT_THAT(CapsOf(out).status().message(), HasSubstr("log_max_klm_list_size 0"));
  out = GoldenGeneralCaps();
  SetField(out, 0x290, 16, 100);
  EXPECT_THAT(CapsOf(out).status().message(), HasSubstr("cannot carry a UMR"));
}

TEST(Mlx5Caps, UmrFenceFollowsTheCapability) {
  EXPECT_EQ(UmrFence(0), umr::FenceMode::kStrongOrdering);
  EXPECT_EQ(UmrFence(1), umr::FenceMode::kInitiatorSmall);
  EXPECT_EQ(UmrFence(2), umr::FenceMode::kNone);
  EXPECT_EQ(UmrFence(3), umr::FenceMode::kStrongOrdering);  // unknown: the safe end
}

std::vector<uint8_t> Outbox(uint8_t status, uint32_t syndrome) {
  const umr::Mailbox16 out = umr::EncodeCmdStatusOut({status, syndrome});
  return std::vector<uint8_t>(out.begin(), out.end());
}

TEST(Mlx5Commands, FirmwareStatusesBecomeCodesWithNameAndSyndrome) {
  EXPECT_TRUE(CommandStatus("CREATE_MKEY", 0, 0, Outbox(0, 0)).ok());
  absl::Status s = CommandStatus("CREATE_MKEY", -1, EREMOTEIO, Outbox(0x03, 0x1234abcd));
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("CREATE_MKEY"));
  EXPECT_THAT(s.message(), HasSubstr("BAD_PARAM (0x03)"));
  EXPECT_THAT(s.message(), HasSubstr("syndrome 0x1234abcd"));
  EXPECT_TRUE(absl::IsResourceExhausted(CommandStatus("x", -1, EREMOTEIO, Outbox(0x08, 1))));
  EXPECT_TRUE(absl::IsResourceExhausted(CommandStatus("x", -1, EREMOTEIO, Outbox(0x0f, 1))));
  EXPECT_TRUE(absl::IsNotFound(CommandStatus("x", -1, EREMOTEIO, Outbox(0x05, 1))));
  EXPECT_TRUE(absl::IsFailedPrecondition(CommandStatus("x", -1, EREMOTEIO, Outbox(0x09, 1))));
  EXPECT_TRUE(absl::IsUnimplemented(CommandStatus("x", -1, EREMOTEIO, Outbox(0x02, 1))));
  // A status in the outbox counts even when the call itself returned 0.
  EXPECT_TRUE(absl::IsInvalidArgument(CommandStatus("x", 0, 0, Outbox(0x50, 7))));
  EXPECT_THAT(CommandStatus("x", -1, EREMOTEIO, Outbox(0x77, 7)).message(),
              HasSubstr("status 0x77"));
  // Not the firmware: the errno speaks.
  EXPECT_TRUE(absl::IsPermissionDenied(CommandStatus("x", -1, EPERM, Outbox(0, 0))));
  EXPECT_TRUE(absl::IsResourceExhausted(CommandStatus("x", -1, ENOMEM, Outbox(0, 0))));
}

// The CREATE_MKEY input the backend sends for its pool keys is one the sim's command processor
// executes into exactly such a key (one source of bytes: hca::PoolKeyMailbox).
TEST(Mlx5Bytes, PoolKeyMailboxIsTheOneTheSimExecutes) {
  absl::StatusOr<std::unique_ptr<sim::SimDevice>> d = sim::NewSimDevice({});
  ASSERT_TRUE(d.ok()) << d.status();
  absl::StatusOr<Pd> pd = (*d)->AllocPd();
  ASSERT_TRUE(pd.ok());
  IndirectKeyOptions o;
  o.remote_invalidate = true;
  absl::StatusOr<umr::FreeMkeyParams> p = IndirectKeyParams(*pd, 48, 65532, o);
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<std::vector<uint8_t>> in = PoolKeyMailbox(*p);
  ASSERT_TRUE(in.ok()) << in.status();
  std::vector<uint8_t> out;
  ASSERT_TRUE((*d)->ExecuteCommandForTest(*in, &out).ok());
  absl::StatusOr<umr::CreateMkeyOut> created = umr::DecodeCreateMkeyOut(out);
  ASSERT_TRUE(created.ok()) << created.status();
  absl::StatusOr<KeyInfo> info = (*d)->QueryKey(MakeKey(created->mkey_index, 0));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(info->free);
  EXPECT_TRUE(info->umr_en);
  EXPECT_EQ(info->layout, Layout::kKlm);
  EXPECT_EQ(info->capacity_entries, 48u);
  EXPECT_TRUE(info->remote_invalidate);
  EXPECT_EQ(info->access, kLocalRead);
  EXPECT_EQ(info->pd, *pd);
  EXPECT_EQ(KeyVariant(info->key), 0);
  // Bad parameters are the caller's, refused before any byte is sent.
  EXPECT_TRUE(absl::IsInvalidArgument(IndirectKeyParams(*pd, 0, 65532, o).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(IndirectKeyParams(*pd, 65536, 65532, o).status()));
}

// The UMR WQEs the backend's queues write, under its device's settings: the fence the device
// asks for, no A in the mask where a UMR may not change it, lists beyond the inline limit by
// pointer under the staging buffer's lkey.
TEST(Mlx5Bytes, UmrWqesFollowTheDevice) {
  alignas(64) static uint8_t ring[64 * 64];
  std::vector<uint8_t> staged;
  UmrPosterOptions o;
  o.sqn = 0x1234;
  o.umr_fence = UmrFence(1);
  o.modify = {/*atomic=*/false, /*entity_size=*/false};
  o.max_inline_klm = 24;
  o.register_staging = [](absl::Span<uint8_t>) -> absl::StatusOr<Key> { return 0x4242u << 8; };
  o.release_staging = [](Key) {};
  absl::StatusOr<std::unique_ptr<UmrPoster>> poster =
      UmrPoster::Create(absl::MakeSpan(ring, sizeof(ring)), std::move(o));
  ASSERT_TRUE(poster.ok()) << poster.status();
  std::vector<KlmEntry> klm(24, KlmEntry{0x100, 0x10000, 4096});
  MapRequest m;
  m.key = MakeKey(7, 0);
  m.new_variant = 1;
  m.klm = klm;
  m.access = kLocalRead | kRemoteRead | kRemoteWrite;
  m.length = 24 * 4096;
  ASSERT_TRUE((*poster)->PostMap(1, m).ok());
  absl::StatusOr<umr::WqeDesc> w = umr::DecodeWqe(absl::MakeConstSpan(ring, 64 * 8));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->ctrl.qpn, 0x1234u);
  EXPECT_EQ(w->ctrl.fence, umr::FenceMode::kInitiatorSmall);
  EXPECT_EQ(w->umr.mkey_mask & umr::kMaskA, 0u);
  EXPECT_TRUE(w->umr.inline_translation);
  EXPECT_EQ(w->mkc.mkey_7_0, 1);
  // Atomics cannot be granted on this device: refused before posting.
  m.access |= kRemoteAtomic;
  EXPECT_TRUE(absl::IsInvalidArgument((*poster)->PostMap(2, m)));
  // 25 entries: over this device's inline limit, so by pointer.
  m.access = kLocalRead | kRemoteRead;
  klm.push_back(klm.back());
  m.klm = klm;
  const uint32_t at = (*poster)->producer();
  ASSERT_TRUE((*poster)->PostMap(3, m).ok());
  absl::StatusOr<umr::WqeDesc> p = umr::DecodeWqe(absl::MakeConstSpan(ring + 64 * at, 64 * 3));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->umr.inline_translation);
  ASSERT_TRUE(p->translation_pointer.has_value());
  EXPECT_EQ(p->translation_pointer->lkey, 0x4242u << 8);
  EXPECT_EQ(p->translation_pointer->byte_count, 28u * 16);  // 25 entries padded to 64 B
}

TEST(Mlx5Spec, ParsesAndRefusesWithTheKnownKeys) {
  BackendSpec spec;
  spec.device = "mlx5_1";
  spec.params = {
      {"port", "2"}, {"mkey_api", "mlx5dv"}, {"pointer_umr", "0"}, {"max_queue_depth", "1024"}};
  absl::StatusOr<Mlx5Options> o = Mlx5OptionsFromSpec(spec);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->context.device_name, "mlx5_1");
  EXPECT_EQ(o->context.port, 2);
  EXPECT_EQ(o->mkey_api, MkeyApi::kMlx5dv);
  EXPECT_FALSE(o->pointer_umr);
  EXPECT_EQ(o->context.max_queue_depth, 1024u);
  spec.params = {{"mkey_api", "fast"}};
  EXPECT_THAT(Mlx5OptionsFromSpec(spec).status().message(), HasSubstr("auto, devx or mlx5dv"));
  spec.params = {{"colour", "red"}};
  EXPECT_THAT(Mlx5OptionsFromSpec(spec).status().message(), HasSubstr("unknown parameter"));
  spec.params = {{"port", "0"}};
  EXPECT_TRUE(absl::IsInvalidArgument(Mlx5OptionsFromSpec(spec).status()));
}

// Here there is no ConnectX (the unit tier runs anywhere): opening says so, naming the backend.
TEST(Mlx5Device, WithoutAConnectXOpeningIsUnavailableWithTheReason) {
  absl::StatusOr<std::unique_ptr<Device>> d = NewMlx5Device({});
  if (d.ok()) GTEST_SKIP() << "a ConnectX is present: the hw tier covers it";
  EXPECT_TRUE(absl::IsUnavailable(d.status())) << d.status();
  EXPECT_THAT(d.status().message(), HasSubstr("mlx5"));
}

}  // namespace
}  // namespace regcache::hca::mlx5
