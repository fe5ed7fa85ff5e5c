// Builds the same WQEs with umr/ and the way rdma-core's mlx5 provider (providers/mlx5/qp.c)
// fills its structs from <infiniband/mlx5dv.h>, and compares the bytes. Headers and inline
// functions only: no device needed.
#include "hca/mlx5/internal/prm_compat.h"

#include <infiniband/mlx5dv.h>

#include <array>
#include <cstring>
#include <random>

#include "gtest/gtest.h"
#include "umr/cqe.h"
#include "umr/wqe_builder.h"
#include "umr/wqe_decoder.h"

namespace regcache::hca::mlx5 {
namespace {

using Buf = std::array<uint8_t, 1024>;

uint8_t FmCeSe(const umr::WqeHeader& h) {
  return static_cast<uint8_t>((static_cast<int>(h.fence) << 5) |
                              (h.signaled ? MLX5_WQE_CTRL_CQ_UPDATE : 0) |
                              (h.solicited ? MLX5_WQE_CTRL_SOLICITED : 0));
}

uint8_t AccessByte(const umr::MkeyAccess& a) {
  return (a.remote_atomic ? MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_ATOMIC : 0) |
         (a.remote_write ? MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE : 0) |
         (a.remote_read ? MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ : 0) |
         (a.local_write ? MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_WRITE : 0) |
         (a.local_read ? MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_READ : 0);
}

TEST(PrmCompatTest, RuntimeSelfCheck) { EXPECT_TRUE(CheckPrmCompat().ok()) << CheckPrmCompat(); }

// Our BuildMapKey against rdma-core structs filled with the same choices (mr_list shape plus
// umr/'s additional mask bits, umr_en, access mode and start address), randomized.
TEST(PrmCompatTest, MapKlmBothWaysRandomized) {
  std::mt19937_64 rng(5);
  for (int it = 0; it < 500; ++it) {
    umr::WqeHeader h;
    h.wqe_index = rng() & 0xffff;
    h.sqn = rng() & 0xffffff;
    h.fence = static_cast<umr::FenceMode>(rng() % 5);
    h.signaled = rng() & 1;
    umr::MapKeyRequest r;
    r.key = static_cast<uint32_t>(rng());
    r.access = {true, (rng() & 1) != 0, (rng() & 1) != 0, (rng() & 1) != 0, (rng() & 1) != 0};
    r.en_rinval = rng() & 1;
    r.start_addr = rng();
    const size_t n = 1 + rng() % umr::kMaxInlineKlms;
    uint64_t total = 0;
    for (size_t i = 0; i < n; ++i) {
      r.klm.push_back(
          {1 + static_cast<uint32_t>(rng() % (1u << 31)), static_cast<uint32_t>(rng()), rng()});
      total += r.klm.back().byte_count;
    }
    r.length = total;
    Buf ours{};
    auto size = umr::BuildMapKey(h, r, 64, absl::MakeSpan(ours));
    ASSERT_TRUE(size.ok()) << size.status();

    Buf theirs{};
    const int octowords = static_cast<int>((n * 16 + 63) / 64 * 4);
    auto* ctrl = reinterpret_cast<mlx5_wqe_ctrl_seg*>(theirs.data());
    mlx5dv_set_ctrl_seg(ctrl, h.wqe_index, MLX5_OPCODE_UMR, 0, h.sqn, FmCeSe(h), 8 + octowords, 0,
                        htobe32(r.key));
    auto* u = reinterpret_cast<mlx5_wqe_umr_ctrl_seg*>(ctrl + 1);
    u->flags = MLX5_WQE_UMR_CTRL_FLAG_INLINE | MLX5_WQE_UMR_CTRL_FLAG_CHECK_FREE;
    u->klm_octowords = htobe16(octowords);
    u->mkey_mask =
        htobe64(MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE | MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY |
                MLX5_WQE_UMR_CTRL_MKEY_MASK_LEN | MLX5_WQE_UMR_CTRL_MKEY_MASK_START_ADDR |
                umr::kMaskEnRinval | umr::kMaskLr | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_LOCAL_WRITE |
                MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_READ |
                MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_WRITE |
                MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_ATOMIC);
    auto* mkc = reinterpret_cast<mlx5_wqe_mkey_context_seg*>(u + 1);
    mkc->access_flags = 0x80 | AccessByte(r.access) | umr::kAccessModeKlm;
    mkc->qpn_mkey = htobe32(0xffffff00 | (r.key & 0xff));
    mkc->flags_pd = htobe32(r.en_rinval ? 1u << 24 : 0);  // wqe.h MLX5_MKEY_REMOTE_INVAL
    mkc->start_addr = htobe64(r.start_addr);
    mkc->len = htobe64(r.length);
    auto* klm = reinterpret_cast<mlx5_wqe_umr_klm_seg*>(mkc + 1);
    for (const umr::KlmEntry& e : r.klm) {
      // rdma-core writes mr_list KLMs with mlx5dv_set_data_seg (docs/prm.md, Translation entries).
      mlx5dv_set_data_seg(reinterpret_cast<mlx5_wqe_data_seg*>(klm++), e.byte_count, e.mkey,
                          e.address);
    }
    ASSERT_EQ(0, std::memcmp(ours.data(), theirs.data(), size->bytes())) << it;
  }
}

// rdma-core's LOCAL_INV exactly (docs/prm.md, UMR WQE): umr/'s generic encoder reproduces it, and
// the decoder reads it back as a UMR that sets free.
TEST(PrmCompatTest, RdmaCoreLocalInvalidateBothWays) {
  Buf theirs{};
  const uint32_t key = 0x00123456;
  auto* ctrl = reinterpret_cast<mlx5_wqe_ctrl_seg*>(theirs.data());
  mlx5dv_set_ctrl_seg(ctrl, 0x77, MLX5_OPCODE_UMR, 0, 0x99, MLX5_WQE_CTRL_CQ_UPDATE, 8, 0,
                      htobe32(key));
  auto* u = reinterpret_cast<mlx5_wqe_umr_ctrl_seg*>(ctrl + 1);
  u->flags = MLX5_WQE_UMR_CTRL_FLAG_INLINE | MLX5_WQE_UMR_CTRL_FLAG_TRNSLATION_OFFSET |
             MLX5_WQE_UMR_CTRL_FLAG_CHECK_QPN;
  u->mkey_mask = htobe64(MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE | MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY |
                         MLX5_WQE_UMR_CTRL_MKEY_MASK_QPN);
  auto* mkc = reinterpret_cast<mlx5_wqe_mkey_context_seg*>(u + 1);
  mkc->free = MLX5_WQE_MKEY_CONTEXT_FREE;
  mkc->qpn_mkey = htobe32(0xffffff00);

  umr::WqeDesc d;
  d.ctrl.wqe_index = 0x77;
  d.ctrl.opcode = umr::kOpcodeUmr;
  d.ctrl.qpn = 0x99;
  d.ctrl.completion_mode = umr::kCeCqUpdate;
  d.ctrl.imm = key;
  d.umr.inline_translation = true;
  d.umr.translation_offset_en = true;
  d.umr.check_qpn = true;
  d.umr.mkey_mask = umr::kMaskFree | umr::kMaskKey | umr::kMaskQpn;
  d.mkc.free = true;
  d.mkc.access = {false, false, false, false, false};
  d.mkc.qpn = 0xffffff;
  Buf ours{};
  auto size = umr::EncodeWqe(d, absl::MakeSpan(ours));
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(size->ds, 8);
  EXPECT_EQ(0, std::memcmp(ours.data(), theirs.data(), 128));
  auto back = umr::DecodeWqe(absl::MakeConstSpan(theirs.data(), 128));
  ASSERT_TRUE(back.ok()) << back.status();
  d.ctrl.ds = 8;
  EXPECT_EQ(*back, d);

  // umr/'s own local invalidate differs by design (mask FREE only, no CHECK_QPN, tag kept);
  // filled the rdma-core way with those choices it is byte-identical too.
  Buf ours2{};
  umr::WqeHeader h;
  h.wqe_index = 0x77;
  h.sqn = 0x99;
  ASSERT_TRUE(umr::BuildLocalInvalidate(h, {key}, absl::MakeSpan(ours2)).ok());
  u->flags = MLX5_WQE_UMR_CTRL_FLAG_INLINE;
  u->mkey_mask = htobe64(MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE);
  EXPECT_EQ(0, std::memcmp(ours2.data(), theirs.data(), 128));
}

TEST(PrmCompatTest, SendInvalidateBothWays) {
  umr::WqeHeader h;
  h.wqe_index = 3;
  h.sqn = 0x4242;
  h.solicited = true;
  umr::SendInvalidateRequest r;
  r.invalidate_key = 0xabcdef01;
  r.sgl = {{128, 0x11, 0x1000}, {64, 0x12, 0x2000}};
  Buf ours{};
  auto size = umr::BuildSendInvalidate(h, r, absl::MakeSpan(ours));
  ASSERT_TRUE(size.ok());
  Buf theirs{};
  auto* ctrl = reinterpret_cast<mlx5_wqe_ctrl_seg*>(theirs.data());
  mlx5dv_set_ctrl_seg(ctrl, 3, MLX5_OPCODE_SEND_INVAL, 0, 0x4242, FmCeSe(h), 3, 0,
                      htobe32(r.invalidate_key));
  auto* ds = reinterpret_cast<mlx5_wqe_data_seg*>(ctrl + 1);
  for (const auto& s : r.sgl) mlx5dv_set_data_seg(ds++, s.byte_count, s.lkey, s.addr);
  EXPECT_EQ(0, std::memcmp(ours.data(), theirs.data(), size->bytes()));
}

TEST(PrmCompatTest, CqeBothWays) {
  mlx5_cqe64 cqe{};
  cqe.op_own = (MLX5_CQE_RESP_SEND_INV << 4) | 1;
  cqe.wqe_counter = htobe16(0x1234);
  cqe.sop_drop_qpn = htobe32(0x00abcdef);
  cqe.byte_cnt = htobe32(4096);
  cqe.imm_inval_pkey = htobe32(0x00010203);
  auto c = umr::DecodeCqe(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(&cqe), 64));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->opcode, umr::kCqeOpRespSendInv);
  EXPECT_TRUE(c->owner);
  EXPECT_EQ(c->wqe_counter, 0x1234);
  EXPECT_EQ(c->qpn, 0xabcdefu);
  EXPECT_EQ(c->byte_cnt, 4096u);
  EXPECT_EQ(c->imm_inval_pkey, 0x00010203u);

  umr::Cqe e;
  e.opcode = umr::kCqeOpReqErr;
  e.syndrome = MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR;
  e.vendor_err_synd = 0x93;
  e.qpn = 0x55;
  e.wqe_opcode = MLX5_OPCODE_UMR;
  e.wqe_counter = 9;
  auto bytes = umr::EncodeCqe(e);
  ASSERT_TRUE(bytes.ok());
  mlx5_err_cqe err;
  std::memcpy(&err, bytes->data(), sizeof(err));
  EXPECT_EQ(err.syndrome, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
  EXPECT_EQ(err.vendor_err_synd, 0x93);
  EXPECT_EQ(be32toh(err.s_wqe_opcode_qpn), (uint32_t{MLX5_OPCODE_UMR} << 24) | 0x55);
  EXPECT_EQ(be16toh(err.wqe_counter), 9);
  mlx5_cqe64 as64;
  std::memcpy(&as64, bytes->data(), sizeof(as64));
  EXPECT_EQ(mlx5dv_get_cqe_opcode(&as64), MLX5_CQE_REQ_ERR);
  EXPECT_EQ(mlx5dv_get_cqe_owner(&as64), 0);
}

}  // namespace
}  // namespace regcache::hca::mlx5